// What the gemma4 trunk and its gemma4-assistant drafter read alike.
#pragma once
#include "hparams.h"
#include "model_file.h"
#include "models/forward_graph.h"

namespace ggspec {

// The sliding-window pattern (a per-layer array), the window, and each kind's head
// size, KV heads and rotary width; NEOX RoPE, attention unscaled.
void read_gemma4_attention(const ModelFile & file, Hparams & hp);

// rope_freqs.weight ("proportional" RoPE: 1e30 freezes a pair) when a layer is global.
void bind_proportional_rope(const ModelFile & file, const Hparams & hp, ModelWeights & w);

// One layer on the residual x: attention (over the layer's own new KV, or the cache
// it reads: Hparams::cache_layer, or every layer of a drafter without attn_k), the
// GeGLU FFN, each with its post norm; then the per-layer input's term (per_layer:
// [n_embd_per_layer, n_rows, n_layer], or null) and layer_output_scale.
ggml_tensor * gemma4_layer(ForwardGraph & g, int64_t il, ggml_tensor * x, ggml_tensor * per_layer);

}  // namespace ggspec
