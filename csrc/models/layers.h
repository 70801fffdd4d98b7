// Building blocks shared by the graph builders.
#pragma once
#include <utility>

#include "models/forward_graph.h"

namespace ggspec {

ggml_tensor * embed_tokens(ForwardGraph & g);
ggml_tensor * rms_norm(ForwardGraph & g, ggml_tensor * x, ggml_tensor * weight);

// RoPE as the model configures it for layer il (multi-section when each
// token carries several positions).
ggml_tensor * rope(ForwardGraph & g, int64_t il, ggml_tensor * x);

// Writes k [hd, n_head_kv, n] and v [hd * n_head_kv, n] into layer il's cache
// at this forward's slots; returns the two write nodes.
std::pair<ggml_tensor *, ggml_tensor *> write_kv(ForwardGraph & g, int64_t il, ggml_tensor * k, ggml_tensor * v);

// Roped q [hd, n_head, n], k [hd, n_head_kv, n] and v [hd * n_head_kv, n]:
// writes k and v to the cache, attends over it with the layer's mask, and
// returns the heads' outputs [hd * n_head, n] before the output projection.
// hd and n_head_kv are the layer's (Hparams::head_dim_of, n_head_kv_of).
ggml_tensor * attend(ForwardGraph & g, int64_t il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v);

// The same attention over what the cache of layer hp.cache_layer(il) already
// holds, writing nothing: a shared-KV layer's over the layer it reads (after
// that layer's write when the graph made it), or a drafter's over a layer of its
// target's cache (the graph's kv is then the target's).
ggml_tensor * attend_cached(ForwardGraph & g, int64_t il, ggml_tensor * q);

// The pre-normed input's q [hd, n_head, n], k [hd, n_head_kv, n] and v
// [hd * n_head_kv, n], with their biases: three products or one fused (phi3).
struct QkvRows {
    ggml_tensor * q;
    ggml_tensor * k;
    ggml_tensor * v;
};
QkvRows project_qkv(ForwardGraph & g, int64_t il, ggml_tensor * x);

// Pre-normed input -> q/k/v projections, optional per-head q/k norm, RoPE,
// KV cache write, masked softmax attention, output projection.
ggml_tensor * self_attention(ForwardGraph & g, int64_t il, ggml_tensor * x);

enum class FfnActivation { silu, gelu };
// down(act(gate x) * up x); a fused ffn_up (phi3, SiLU) holds gate and up as its halves.
ggml_tensor * gated_ffn(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x, FfnActivation act);

// The routed experts of a mixture-of-experts FFN on x, as llama.cpp's build_moe_ffn
// with softmax gating over the router's logits [n_expert, n] and renormalized
// weights: each row's n_expert_used experts (through ggml_mul_mat_id, whose every
// output is one vec_dot: the same bits whichever rows share an expert), each output
// times its expert's down_scale (when the file has one) and its weight, summed in
// rank order.
ggml_tensor * routed_experts(ForwardGraph & g, const ExpertWeights & ex, ggml_tensor * x, ggml_tensor * logits,
                             FfnActivation act);

// qwen35moe's FFN (l.experts): the routed SiLU experts over router(x), plus the shared expert.
ggml_tensor * mixture_of_experts(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x);

}  // namespace ggspec
