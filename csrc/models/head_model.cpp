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

HeadModel attached_head_model(const std::string & path, const Hparams & trunk, const ModelWeights & trunk_w,
                              ggml_backend_dev_t dev) {
    auto file = std::make_unique<ModelFile>(path);
    const std::string arch = file->has_key("general.architecture") ? file->get_str("general.architecture") : "";
    if (arch == "eagle3") return eagle3_head_model(std::move(file), trunk, trunk_w, dev);
    if (arch == "gemma4-assistant") return gemma4_assistant_head_model(std::move(file), trunk, trunk_w, dev);
    throw ModelFormatError("'" + path + "' is not a draft head ggspec attaches (general.architecture '" + arch +
                           "'; draft heads: eagle3, gemma4-assistant)");
}

}  // namespace ggspec
