#include "models/head_model.h"

namespace ggspec {

HeadModel nextn_head_model(const ModelFile & file, const Architecture & arch, const Hparams & trunk,
                           const ModelWeights & trunk_w) {
    HeadModel m;
    arch.load_nextn(file, trunk, trunk_w, m.hp, m.w);
    m.build = arch.build_nextn;
    m.trunk_width = trunk.n_embd;
    return m;
}

}  // namespace ggspec
