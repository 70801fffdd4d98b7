#pragma once
#include <string>

#include "models/forward_graph.h"

namespace ggspec {

// The qwen35 family's reader and graphs, shared by qwen35 (dense FFNs) and
// qwen35moe (moe: mixture-of-experts FFNs, in the trunk and the NextN block).
void load_qwen35_family(const class ModelFile & file, const std::string & arch, bool moe, Hparams & hp,
                        ModelWeights & w);
ggml_tensor * build_qwen35_trunk(ForwardGraph & g);
void load_qwen35_nextn(const class ModelFile & f, const Hparams & trunk, const ModelWeights & trunk_w, Hparams & hp,
                       ModelWeights & w);
ggml_tensor * build_qwen35_nextn(ForwardGraph & g);

}  // namespace ggspec
