#include "models/drafter_file.h"

#include "errors.h"

namespace ggspec {

void require_target_vocabulary(const ModelFile & file, int64_t n_embedded, int64_t n_vocab, const std::string & what) {
    const size_t vocab = file.array_size("tokenizer.ggml.tokens");
    if (vocab != 0 && (int64_t) vocab != n_vocab) {
        throw ModelFormatError(what + " '" + file.path() + "' has a vocabulary of " + std::to_string(vocab) +
                               " tokens, its target " + std::to_string(n_vocab));
    }
    if (n_embedded != 0 && n_embedded != n_vocab) {
        throw ModelFormatError(what + " '" + file.path() + "' embeds " + std::to_string(n_embedded) +
                               " tokens, its target " + std::to_string(n_vocab));
    }
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
