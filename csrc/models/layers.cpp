#include "models/layers.h"

#include <algorithm>
#include <cmath>

#include "kernels/fused_attention.h"
#include "kernels/geglu.h"
#include "kernels/masked_soft_max.h"
#include "kernels/rms_norm.h"
#include "kernels/set_columns.h"

namespace ggspec {

ggml_tensor * embed_tokens(ForwardGraph & g) {
    ggml_tensor * x = ggml_get_rows(g.ctx, g.w.tok_embd, g.tokens);
    return g.hp.embd_scale == 1.0f ? x : ggml_scale(g.ctx, x, g.hp.embd_scale);
}

ggml_tensor * rms_norm(ForwardGraph & g, ggml_tensor * x, ggml_tensor * weight) {
    return rms_norm_mul(g.ctx, x, weight, g.hp.rms_eps, g.kernels_for(weight));
}

// YaRN's correction range, as llama.cpp's defaults (it reads them from the file
// for none of the architectures ggspec runs).
constexpr float kYarnBetaFast = 32.0f;
constexpr float kYarnBetaSlow = 1.0f;

ggml_tensor * rope(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    const Hparams & hp = g.hp;
    const bool swa = hp.is_swa[il];
    const float base = swa ? hp.rope_base_swa : hp.rope_base;
    const float freq_scale = swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    const int n_ctx_orig = (int) hp.n_ctx_orig;
    if (hp.n_pos_per_token > 1) {
        int sections[4];
        std::copy(hp.rope_sections, hp.rope_sections + 4, sections);
        return ggml_rope_multi(g.ctx, x, g.positions, nullptr, (int) hp.n_rot, sections, hp.rope_type, n_ctx_orig,
                               base, freq_scale, hp.rope_ext_factor(), hp.rope_attn_factor, kYarnBetaFast,
                               kYarnBetaSlow);
    }
    return ggml_rope_ext(g.ctx, x, g.positions, swa ? nullptr : g.w.rope_freqs, (int) hp.n_rot_of(il), hp.rope_type,
                         n_ctx_orig, base, freq_scale, hp.rope_ext_factor(), hp.rope_attn_factor, kYarnBetaFast,
                         kYarnBetaSlow);
}

std::pair<ggml_tensor *, ggml_tensor *> write_kv(ForwardGraph & g, int64_t il, ggml_tensor * k, ggml_tensor * v) {
    ggml_context * ctx = g.ctx;
    const AttentionInputs & in = g.attention_inputs(il);
    const int64_t n_kv_dim = g.hp.n_embd_kv_of(il);
    ggml_tensor * vc = g.kv.v(il);
    ggml_tensor * k_written = ggml_set_rows(ctx, g.kv.k(il), ggml_reshape_2d(ctx, k, n_kv_dim, g.n_rows), in.k_idx);
    // V is stored transposed so that attention multiplies it without a copy.
    ggml_tensor * v_written = set_columns(ctx, vc, ggml_reshape_2d(ctx, v, n_kv_dim, g.n_rows), in.k_idx, in.v_idx,
                                          g.kernels_for(vc));
    return {k_written, v_written};
}

namespace {

// Views of the first n_kv slots of the cache of layer `cache` (its tensors, or
// the nodes that wrote them in this graph, which orders every read after the
// writes), shaped for layer il's attention: K [hd, n_kv, n_head_kv] and
// V^T [n_kv, hd, n_head_kv].
std::pair<ggml_tensor *, ggml_tensor *> kv_views(ForwardGraph & g, int64_t il, int64_t cache, ggml_tensor * k_cache,
                                                 ggml_tensor * v_cache) {
    ggml_context * ctx = g.ctx;
    const AttentionInputs & in = g.attention_inputs(il);
    const int64_t hd = g.hp.head_dim_of(il), n_head_kv = g.hp.n_head_kv_of(il);
    ggml_tensor * kc = g.kv.k(cache);
    ggml_tensor * vc = g.kv.v(cache);
    ggml_tensor * kview = ggml_view_3d(ctx, k_cache, hd, n_head_kv, in.n_kv, ggml_row_size(kc->type, hd), kc->nb[1], 0);
    ggml_tensor * vview = ggml_view_3d(ctx, v_cache, in.n_kv, hd, n_head_kv, vc->nb[1], vc->nb[1] * hd, 0);
    return {ggml_permute(ctx, kview, 0, 2, 1, 3), vview};
}

ggml_tensor * attend_views(ForwardGraph & g, int64_t il, ggml_tensor * q, ggml_tensor * kcache, ggml_tensor * vcache) {
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    const AttentionInputs & in = g.attention_inputs(il);
    ggml_tensor * mask = in.mask;
    // each row over its own sequence's region of the view, as one op where the kernel path has it
    if (ggml_tensor * heads = fused_attention(ctx, q, kcache, vcache, mask, in.regions, hp.kq_scale,
                                              g.kernels_for(kcache))) {
        return heads;
    }
    ggml_tensor * kq = g.matmul(kcache, ggml_permute(ctx, q, 0, 2, 1, 3), mask);  // [n_kv, n, n_head]
    kq = masked_soft_max(ctx, kq, mask, hp.kq_scale, g.kernels_for(kcache));
    ggml_tensor * kqv = g.matmul(vcache, kq);  // [hd, n, n_head]
    return ggml_cont_2d(ctx, ggml_permute(ctx, kqv, 0, 2, 1, 3), hp.head_dim_of(il) * hp.n_head, g.n_rows);
}

}  // namespace

ggml_tensor * attend(ForwardGraph & g, int64_t il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v) {
    auto [k_written, v_written] = write_kv(g, il, k, v);
    g.written_kv.resize((size_t) g.hp.n_layer);
    g.written_kv[(size_t) il] = {k_written, v_written};
    auto [kcache, vcache] = kv_views(g, il, il, k_written, v_written);
    return attend_views(g, il, q, kcache, vcache);
}

ggml_tensor * attend_cached(ForwardGraph & g, int64_t il, ggml_tensor * q) {
    const int64_t src = g.hp.cache_layer(il);
    const bool written = src < (int64_t) g.written_kv.size() && g.written_kv[(size_t) src].first;
    auto [kcache, vcache] = kv_views(g, il, src, written ? g.written_kv[(size_t) src].first : g.kv.k(src),
                                     written ? g.written_kv[(size_t) src].second : g.kv.v(src));
    return attend_views(g, il, q, kcache, vcache);
}

QkvRows project_qkv(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    const LayerWeights & l = g.w.layers[il];
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    const int64_t n = g.n_rows, hd = hp.head_dim_of(il), n_head_kv = hp.n_head_kv_of(il);
    const int64_t n_q = hd * hp.n_head, n_kv = hd * n_head_kv;
    auto biased = [&](ggml_tensor * y, ggml_tensor * bias) { return bias ? ggml_add(ctx, y, bias) : y; };
    if (!l.wqkv) {
        const std::vector<ggml_tensor *> qkv = g.matmuls({l.wq, l.wk, l.wv}, x);
        return {ggml_reshape_3d(ctx, biased(qkv[0], l.bq), hd, hp.n_head, n),
                ggml_reshape_3d(ctx, biased(qkv[1], l.bk), hd, n_head_kv, n), biased(qkv[2], l.bv)};
    }
    ggml_tensor * qkv = g.matmul(l.wqkv, x);
    if (l.bqkv) {
        qkv = ggml_add(ctx, qkv, l.bqkv);
    } else if (l.bq) {  // the three separate biases, concatenated as llama.cpp does
        qkv = ggml_add(ctx, qkv, ggml_concat(ctx, ggml_concat(ctx, l.bq, l.bk, 0), l.bv, 0));
    }
    const size_t row = qkv->nb[1], el = ggml_element_size(qkv);
    ggml_tensor * q = ggml_view_3d(ctx, qkv, hd, hp.n_head, n, hd * el, row, 0);
    ggml_tensor * k = ggml_view_3d(ctx, qkv, hd, n_head_kv, n, hd * el, row, n_q * el);
    // V is written to the cache as contiguous rows.
    ggml_tensor * v = ggml_cont(ctx, ggml_view_2d(ctx, qkv, n_kv, n, row, (n_q + n_kv) * el));
    return {q, k, v};
}

ggml_tensor * self_attention(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    const Hparams & hp = g.hp;
    const LayerWeights & l = g.w.layers[il];
    auto [q, k, v] = project_qkv(g, il, x);
    if (l.q_norm) q = rms_norm(g, q, l.q_norm);
    if (l.k_norm) k = rms_norm(g, k, l.k_norm);
    q = rope(g, il, q);
    k = rope(g, il, k);
    if (hp.q_scale != 1.0f) q = ggml_scale(g.ctx, q, hp.q_scale);
    return g.matmul(l.wo, attend(g, il, q, k, v));
}

ggml_tensor * gated_ffn(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x, FfnActivation act) {
    if (!l.ffn_gate) {  // fused [gate; up] (phi3, SiLU): ggml's swiglu splits the row in halves
        return g.matmul(l.ffn_down, ggml_swiglu(g.ctx, g.matmul(l.ffn_up, x)));
    }
    const std::vector<ggml_tensor *> gate_up = g.matmuls({l.ffn_gate, l.ffn_up}, x);
    ggml_tensor * gate = gate_up[0];
    ggml_tensor * up = gate_up[1];
    ggml_tensor * h = act == FfnActivation::silu ? ggml_swiglu_split(g.ctx, gate, up)
                                                 : geglu(g.ctx, gate, up, g.kernels_for(l.ffn_gate));
    return g.matmul(l.ffn_down, h);
}

ggml_tensor * routed_experts(ForwardGraph & g, const ExpertWeights & ex, ggml_tensor * x, ggml_tensor * logits,
                             FfnActivation act) {
    ggml_context * ctx = g.ctx;
    const int64_t n = g.n_rows, e = g.hp.n_embd, n_used = g.hp.n_expert_used;
    ggml_tensor * probs = ggml_soft_max(ctx, logits);  // [n_expert, n]
    ggml_tensor * chosen = ggml_argsort_top_k(ctx, probs, (int) n_used);  // [n_used, n], best first
    ggml_tensor * weights = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, g.hp.n_expert, n), chosen);
    weights = ggml_reshape_2d(ctx, weights, n_used, n);
    // llama.cpp clamps the sum to the smallest normal half before dividing
    ggml_tensor * sum = ggml_clamp(ctx, ggml_sum_rows(ctx, weights), 6.103515625e-5f, INFINITY);
    weights = ggml_reshape_3d(ctx, ggml_div(ctx, weights, sum), 1, n_used, n);

    ggml_tensor * rows = ggml_reshape_3d(ctx, x, e, 1, n);
    ggml_tensor * gate;
    ggml_tensor * up;
    if (ex.gate_up) {
        ggml_tensor * gate_up = ggml_mul_mat_id(ctx, ex.gate_up, rows, chosen);  // [2 n_ff_exp, n_used, n]
        const int64_t n_ff = gate_up->ne[0] / 2;
        gate = ggml_view_3d(ctx, gate_up, n_ff, n_used, n, gate_up->nb[1], gate_up->nb[2], 0);
        up = ggml_view_3d(ctx, gate_up, n_ff, n_used, n, gate_up->nb[1], gate_up->nb[2], n_ff * gate_up->nb[0]);
    } else {
        up = ggml_mul_mat_id(ctx, ex.up, rows, chosen);  // [n_ff_exp, n_used, n]
        gate = ggml_mul_mat_id(ctx, ex.gate, rows, chosen);
    }
    ggml_tensor * h = act == FfnActivation::silu ? ggml_swiglu_split(ctx, gate, up) : ggml_geglu_split(ctx, gate, up);
    ggml_tensor * outs = ggml_mul_mat_id(ctx, ex.down, h, chosen);  // [e, n_used, n]
    if (ex.down_scale) {  // each chosen expert's scale, as llama.cpp's build_lora_mm_id picks it
        ggml_tensor * scales = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, ex.down_scale, 1, g.hp.n_expert, 1), 1,
                                              g.hp.n_expert, n, 1);
        outs = ggml_mul(ctx, outs, ggml_get_rows(ctx, scales, chosen));
    }
    outs = ggml_mul(ctx, outs, weights);
    ggml_tensor * routed = ggml_view_2d(ctx, outs, e, n, outs->nb[2], 0);
    for (int64_t i = 1; i < n_used; ++i) {
        routed = ggml_add(ctx, routed, ggml_view_2d(ctx, outs, e, n, outs->nb[2], i * outs->nb[1]));
    }
    return n_used == 1 ? ggml_cont(ctx, routed) : routed;
}

ggml_tensor * mixture_of_experts(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x) {
    ggml_tensor * routed = routed_experts(g, l.experts, x, g.matmul(l.experts.router, x), FfnActivation::silu);
    ggml_tensor * shared = gated_ffn(g, l, x, FfnActivation::silu);
    shared = ggml_mul(g.ctx, shared, ggml_sigmoid(g.ctx, g.matmul(l.experts.shared_gate, x)));  // [e, n] x [1, n]
    return ggml_add(g.ctx, routed, shared);
}

}  // namespace ggspec
