// muse-glimmer (Muse Glimmer 30B): a Gemma-like dense trunk, as llama.cpp's
// src/models/muse-glimmer.cpp. The embedding is RMS-normed without a weight;
// every fourth layer attends globally with no RoPE (NoPE), the others over a
// sliding window with RoPE; q/k norms; the heads are gated by sigmoid(attn_gate x)
// before the output projection; post-attention and post-FFN norms (eps 1e-8, a
// constant of the graph) before each residual add; SwiGLU FFN; an untied LM head
// whose logits are scaled by logit_scale, then optionally soft-capped. Norm weights
// hold the converter's +1.
#include "model_file.h"
#include "models/layers.h"

namespace ggspec {

namespace {

constexpr float kPostNormEps = 1e-8f;

ggml_tensor * post_norm(ForwardGraph & g, ggml_tensor * x, ggml_tensor * weight) {
    return ggml_mul(g.ctx, ggml_rms_norm(g.ctx, x, kPostNormEps), weight);
}

void load_muse_glimmer(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, "muse-glimmer");
    hp.rope_type = GGML_ROPE_TYPE_NORMAL;
    require_keys(file, {hp.key("attention.layer_norm_rms_epsilon"), hp.key("logit_scale")});
    read_swa_layers(file, hp, 4, true, hp.rope_base);
    hp.logit_scale = finite_float(file, hp.key("logit_scale"), 1.0, 0.0, false);
    hp.final_softcap = finite_float(file, hp.key("final_logit_softcapping"), 0.0, 0.0, true);
    bind_embeddings(file, hp, w);
    w.output = file.tensor("output.weight", {hp.n_embd, hp.n_vocab});  // llama.cpp requires an untied head
    bind_layers(file, hp, LayerOptions{/*qk_norm=*/true, /*post_norms=*/true}, w);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        w.layers[il].attn_out_gate = file.tensor("blk." + std::to_string(il) + ".attn_gate.weight",
                                                 {hp.n_embd, hp.head_dim * hp.n_head});
    }
}

ggml_tensor * gated_attention(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    const LayerWeights & l = g.w.layers[il];
    auto [q, k, v] = project_qkv(g, il, x);
    q = rms_norm(g, q, l.q_norm);
    k = rms_norm(g, k, l.k_norm);
    if (g.hp.is_swa[il]) {  // global layers attend without positions
        q = rope(g, il, q);
        k = rope(g, il, k);
    }
    ggml_tensor * gate = ggml_sigmoid(g.ctx, g.matmul(l.attn_out_gate, x));
    return g.matmul(l.wo, ggml_mul(g.ctx, attend(g, il, q, k, v), gate));
}

ggml_tensor * build_muse_glimmer_trunk(ForwardGraph & g) {
    ggml_tensor * x = ggml_rms_norm(g.ctx, embed_tokens(g), g.hp.rms_eps);
    for (int64_t il = 0; il < g.hp.n_layer; ++il) {
        const LayerWeights & l = g.w.layers[il];
        g.layer_inputs.push_back(x);
        x = ggml_add(g.ctx, post_norm(g, gated_attention(g, il, rms_norm(g, x, l.attn_norm)), l.attn_post_norm), x);
        ggml_tensor * ffn = gated_ffn(g, l, rms_norm(g, x, l.ffn_norm), FfnActivation::silu);
        x = ggml_add(g.ctx, post_norm(g, ffn, l.ffn_post_norm), x);
    }
    return rms_norm(g, x, g.w.output_norm);
}

}  // namespace

extern const Architecture kMuseGlimmer = {"muse-glimmer", load_muse_glimmer, build_muse_glimmer_trunk};

}  // namespace ggspec
