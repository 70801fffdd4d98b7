// Building blocks shared by the graph builders.
#pragma once
#include "models/forward_graph.h"

namespace ggspec {

ggml_tensor * embed_tokens(ForwardGraph & g);
ggml_tensor * rms_norm(ForwardGraph & g, ggml_tensor * x, ggml_tensor * weight);

// Pre-normed input -> q/k/v projections, optional per-head q/k norm, RoPE,
// KV cache write, masked softmax attention, output projection.
ggml_tensor * self_attention(ForwardGraph & g, int64_t il, ggml_tensor * x);

enum class FfnActivation { silu, gelu };
// down(act(gate x) * up x)
ggml_tensor * gated_ffn(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x, FfnActivation act);

}  // namespace ggspec
