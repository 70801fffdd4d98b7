#pragma once
#include "models/forward_graph.h"

namespace ggspec {

// The llama block, also used by qwen2, qwen3 and phi3 (the q/k norms, biases
// and fused projections it applies are those their loaders bound).
ggml_tensor * build_llama_trunk(ForwardGraph & g);

}  // namespace ggspec
