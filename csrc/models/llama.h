#pragma once
#include "models/forward_graph.h"

namespace ggspec {

// The llama block, also used by qwen3 (whose q/k norms it applies when bound).
ggml_tensor * build_llama_trunk(ForwardGraph & g);

}  // namespace ggspec
