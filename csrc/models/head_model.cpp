#include "models/head_model.h"

#include "errors.h"

namespace ggspec {

HeadModel nextn_head_model(const ModelFile & file, const Architecture & arch, const Hparams & trunk,
                           const ModelWeights & trunk_w) {
    HeadModel m;
    arch.load_nextn(file, trunk, trunk_w, m.hp, m.w);
    m.build = arch.build_nextn;
    m.trunk_width = trunk.n_embd;
    return m;
}

std::vector<int64_t> read_token_map(const ModelFile & file, const ggml_tensor * d2t, int64_t n_vocab,
                                    const std::string & what) {
    std::vector<int64_t> map((size_t) ggml_nelements(d2t));  // I64, checked at load
    file.read_tensor(d2t, map.data());
    for (int64_t id : map) {
        if (id < 0 || id >= n_vocab) {
            throw ModelFormatError(what + " '" + file.path() + "' maps a draft row to token " + std::to_string(id) +
                                   " (d2t), outside the vocabulary of " + std::to_string(n_vocab));
        }
    }
    return map;
}

}  // namespace ggspec
