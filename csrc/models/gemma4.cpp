// gemma4 (Gemma 4 E2B, E4B, 31B), as llama.cpp's src/models/gemma4.cpp builds it:
// gemma3's scaled embeddings, q/k norms and post norms, with
//   - sliding-window and global layers of their own head sizes, KV head counts
//     and rotary widths; global layers turn only some pairs ("proportional" RoPE:
//     rope_freqs.weight freezes the rest);
//   - V RMS-normed without a weight, V = K's projection where attn_v is absent;
//     attention unscaled (q and k are normed);
//   - the last shared_kv_layers layers writing no KV: each attends over the last
//     KV layer of its kind;
//   - per-layer token embeddings: each layer adds proj(gelu(inp_gate x) * its own
//     slice of [per_layer_token_embd(token); per_layer_model_proj(embedding)]);
//   - each layer's output times layer_output_scale, and soft-capped logits;
//   - in the mixture-of-experts size (26B-A4B), GELU experts beside each layer's MLP.
#include <algorithm>
#include <cmath>

#include "errors.h"
#include "model_file.h"
#include "models/gemma4.h"
#include "models/layers.h"

namespace ggspec {

namespace {

// The attention shape per kind of layer: head_count_kv per layer must be one value per kind.
void read_attention_shapes(const ModelFile & f, Hparams & hp) {
    require_keys(f, {hp.key("attention.key_length_swa"), hp.key("attention.value_length_swa")});
    hp.head_dim_swa = f.get_int(hp.key("attention.key_length_swa"));
    if (hp.head_dim_swa <= 0 || f.get_int(hp.key("attention.value_length_swa")) != hp.head_dim_swa) {
        throw ModelFormatError("'" + f.path() + "': " + hp.arch + " needs attention.key_length_swa == value_length_swa > 0");
    }
    const std::vector<int64_t> kv_heads = layer_ints(f, hp.key("attention.head_count_kv"), hp.n_layer);
    for (bool swa : {true, false}) {
        int64_t heads = 0;
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            if (hp.is_swa[il] != swa) continue;
            if (heads != 0 && kv_heads[il] != heads) {
                throw ModelFormatError("'" + f.path() + "': attention.head_count_kv varies among the " +
                                       (swa ? "sliding-window" : "global") + " layers, which ggspec does not run");
            }
            heads = kv_heads[il];
        }
        if (heads == 0) continue;  // no layer of this kind
        if (hp.n_head % heads != 0) {
            throw ModelFormatError("'" + f.path() + "': " + std::to_string(hp.n_head) + " heads over " +
                                   std::to_string(heads) + " KV heads");
        }
        (swa ? hp.n_head_kv_swa : hp.n_head_kv) = heads;
    }
    hp.n_rot_swa = f.get_int(hp.key("rope.dimension_count_swa"), hp.n_rot);
    if (hp.n_rot_swa <= 0 || hp.n_rot_swa > hp.head_dim_swa || hp.n_rot_swa % 2 != 0) {
        throw ModelFormatError("rope.dimension_count_swa " + std::to_string(hp.n_rot_swa) +
                               " does not fit the sliding-window head size " + std::to_string(hp.head_dim_swa));
    }
}

// llama.cpp's rule (llama-model.cpp, `reuse`): a shared-KV layer reads the last
// KV layer of its kind, which must be the second-to-last KV layer for sliding-
// window layers and the last for global ones.
void read_shared_kv_layers(const ModelFile & f, Hparams & hp) {
    const std::string key = hp.key("attention.shared_kv_layers");
    const int64_t shared = f.get_int(key, 0);
    const int64_t n_kv = hp.n_layer - shared;
    if (shared < 0 || n_kv < 2) {
        throw ModelFormatError("'" + key + "' is " + std::to_string(shared) + " of " + std::to_string(hp.n_layer) +
                               " layers in '" + f.path() + "'; llama.cpp needs at least 2 layers with their own KV");
    }
    if (shared == 0) return;
    hp.kv_layer.resize((size_t) hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const int64_t src = il < n_kv ? il : n_kv - (hp.is_swa[il] ? 2 : 1);
        if (hp.is_swa[src] != hp.is_swa[il]) {
            throw ModelFormatError("shared-KV layer " + std::to_string(il) + " of '" + f.path() + "' would read layer " +
                                   std::to_string(src) + ", a layer of the other kind (" + key + " " +
                                   std::to_string(shared) + " and attention.sliding_window_pattern disagree)");
        }
        hp.kv_layer[il] = src;
    }
}

void bind_per_layer_embeddings(const ModelFile & f, const Hparams & hp, ModelWeights & w) {
    const int64_t e = hp.n_embd, n_pl = hp.n_embd_per_layer;
    w.per_layer_tok_embd = f.tensor("per_layer_token_embd.weight", {n_pl * hp.n_layer, hp.n_vocab});
    w.per_layer_model_proj = f.tensor("per_layer_model_proj.weight", {e, n_pl * hp.n_layer});
    w.per_layer_proj_norm = f.tensor("per_layer_proj_norm.weight", {n_pl});
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        l.ple_gate = f.tensor(p + "inp_gate.weight", {e, n_pl});
        l.ple_proj = f.tensor(p + "proj.weight", {n_pl, e});
        l.ple_post_norm = f.tensor(p + "post_norm.weight", {e});
    }
}

void bind_gemma4_layers(const ModelFile & f, const Hparams & hp, ModelWeights & w) {
    const int64_t e = hp.n_embd;
    const std::vector<int64_t> n_ff = layer_ints(f, hp.key("feed_forward_length"), hp.n_layer);
    w.layers.resize(hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        const int64_t hd = hp.head_dim_of(il), n_q = hd * hp.n_head, n_kv = hp.n_embd_kv_of(il);
        l.attn_norm = f.tensor(p + "attn_norm.weight", {e});
        l.wq = f.tensor(p + "attn_q.weight", {e, n_q});
        l.q_norm = f.tensor(p + "attn_q_norm.weight", {hd});
        // A shared-KV layer computes no k or v; converted files may still carry them.
        const bool own_kv = hp.cache_layer(il) == il;
        l.wk = own_kv ? f.tensor(p + "attn_k.weight", {e, n_kv}) : f.tensor_or_null(p + "attn_k.weight", {e, n_kv});
        l.wv = f.tensor_or_null(p + "attn_v.weight", {e, n_kv});  // absent: V is K's projection
        l.k_norm = own_kv ? f.tensor(p + "attn_k_norm.weight", {hd}) : f.tensor_or_null(p + "attn_k_norm.weight", {hd});
        l.wo = f.tensor(p + "attn_output.weight", {n_q, e});
        l.attn_post_norm = f.tensor(p + "post_attention_norm.weight", {e});
        l.ffn_norm = f.tensor(p + "ffn_norm.weight", {e});
        l.ffn_gate = f.tensor(p + "ffn_gate.weight", {e, n_ff[il]});
        l.ffn_up = f.tensor(p + "ffn_up.weight", {e, n_ff[il]});
        l.ffn_down = f.tensor(p + "ffn_down.weight", {n_ff[il], e});
        l.ffn_post_norm = f.tensor(p + "post_ffw_norm.weight", {e});
        l.out_scale = f.tensor_or_null(p + "layer_output_scale.weight", {1});
        if (hp.n_expert > 0 && f.find_tensor(p + "ffn_gate_inp.weight")) {  // llama.cpp: a layer has experts or not
            bind_routed_experts(f, hp, p, l.experts);
            l.experts.router_scale = f.tensor(p + "ffn_gate_inp.scale", {e});
            l.ffn_pre_norm_2 = f.tensor(p + "pre_ffw_norm_2.weight", {e});
            l.ffn_post_norm_1 = f.tensor(p + "post_ffw_norm_1.weight", {e});
            l.ffn_post_norm_2 = f.tensor(p + "post_ffw_norm_2.weight", {e});
        }
    }
}

void load_gemma4(const ModelFile & f, Hparams & hp, ModelWeights & w) {
    const bool moe = f.get_int("gemma4.expert_count", 0) > 0;  // the 26B-A4B
    hp = read_common_hparams(f, "gemma4", moe, /*per_layer=*/true);
    read_gemma4_attention(f, hp);
    read_shared_kv_layers(f, hp);
    hp.embd_scale = std::sqrt((float) hp.n_embd);
    hp.final_softcap = finite_float(f, hp.key("final_logit_softcapping"), 30.0, 0.0, true);  // llama.cpp's default; 0: none
    require_keys(f, {hp.key("embedding_length_per_layer_input")});
    hp.n_embd_per_layer = f.get_int(hp.key("embedding_length_per_layer_input"));
    if (hp.n_embd_per_layer < 0) throw ModelFormatError("'" + f.path() + "': negative embedding_length_per_layer_input");

    bind_embeddings(f, hp, w);
    bind_gemma4_layers(f, hp, w);
    if (hp.n_embd_per_layer > 0) bind_per_layer_embeddings(f, hp, w);
    bind_proportional_rope(f, hp, w);
}

// Every layer's per-layer input [n_embd_per_layer, n_rows, n_layer], from the
// token and the scaled embedding x: ((P x) / sqrt(n_embd), RMS-normed) plus the
// token's row of per_layer_token_embd * sqrt(n_embd_per_layer), over sqrt(2).
ggml_tensor * per_layer_inputs(ForwardGraph & g, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const int64_t n_pl = g.hp.n_embd_per_layer, n_layer = g.hp.n_layer, n = g.n_rows;
    ggml_tensor * own = ggml_get_rows(ctx, g.w.per_layer_tok_embd, g.tokens);
    own = ggml_scale(ctx, ggml_reshape_3d(ctx, own, n_pl, n_layer, n), std::sqrt((float) n_pl));
    ggml_tensor * proj = ggml_scale(ctx, g.matmul(g.w.per_layer_model_proj, x), 1.0f / std::sqrt((float) g.hp.n_embd));
    proj = rms_norm(g, ggml_reshape_3d(ctx, proj, n_pl, n_layer, n), g.w.per_layer_proj_norm);
    ggml_tensor * in = ggml_scale(ctx, ggml_add(ctx, proj, own), 1.0f / std::sqrt(2.0f));
    return ggml_cont(ctx, ggml_permute(ctx, in, 0, 2, 1, 3));
}

// q, then attention over the layer's own new K and V, or over the cache it reads
// (a shared-KV layer's, the assistant's: no attn_k of its own).
ggml_tensor * gemma4_attention(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    const LayerWeights & l = g.w.layers[il];
    const int64_t hd = hp.head_dim_of(il), n = g.n_rows;
    const bool own_kv = hp.cache_layer(il) == il && l.wk;
    std::vector<ggml_tensor *> weights{l.wq};
    if (own_kv) weights.push_back(l.wk);
    if (own_kv && l.wv) weights.push_back(l.wv);
    const std::vector<ggml_tensor *> proj = g.matmuls(weights, x);
    ggml_tensor * q = rope(g, il, rms_norm(g, ggml_reshape_3d(ctx, proj[0], hd, hp.n_head, n), l.q_norm));
    if (!own_kv) return g.matmul(l.wo, attend_cached(g, il, q));
    ggml_tensor * k_proj = proj[1];
    ggml_tensor * v_proj = l.wv ? proj[2] : k_proj;
    ggml_tensor * k = rope(g, il, rms_norm(g, ggml_reshape_3d(ctx, k_proj, hd, hp.n_head_kv_of(il), n), l.k_norm));
    ggml_tensor * v = ggml_rms_norm(ctx, ggml_reshape_3d(ctx, v_proj, hd, hp.n_head_kv_of(il), n), hp.rms_eps);
    return g.matmul(l.wo, attend(g, il, q, k, v));
}

// A mixture-of-experts layer's experts (26B-A4B): GELU experts over their own norm
// of x, routed by a router that reads another (x RMS-normed, over sqrt(n_embd),
// times ffn_gate_inp.scale), as llama.cpp's gemma4 graph computes its logits.
ggml_tensor * gemma4_experts(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const ExpertWeights & ex = l.experts;
    ggml_tensor * router_in = ggml_scale(ctx, ggml_rms_norm(ctx, x, g.hp.rms_eps), 1.0f / std::sqrt((float) g.hp.n_embd));
    ggml_tensor * logits = g.matmul(ex.router, ggml_mul(ctx, router_in, ex.router_scale));
    return routed_experts(g, ex, rms_norm(g, x, l.ffn_pre_norm_2), logits, FfnActivation::gelu);
}

ggml_tensor * build_gemma4_trunk(ForwardGraph & g) {
    ggml_tensor * x = embed_tokens(g);
    ggml_tensor * per_layer = g.hp.n_embd_per_layer > 0 ? per_layer_inputs(g, x) : nullptr;
    for (int64_t il = 0; il < g.hp.n_layer; ++il) {
        g.layer_inputs.push_back(x);
        x = gemma4_layer(g, il, x, per_layer);
    }
    return rms_norm(g, x, g.w.output_norm);
}

}  // namespace

void read_gemma4_attention(const ModelFile & f, Hparams & hp) {
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    hp.kq_scale = 1.0f;  // q and k are RMS-normed: llama.cpp's f_attention_scale 1
    require_keys(f, {hp.key("attention.sliding_window_pattern"), hp.key("attention.layer_norm_rms_epsilon")});
    if (!f.is_array(hp.key("attention.sliding_window_pattern"))) {
        throw ModelFormatError("'" + hp.key("attention.sliding_window_pattern") + "' in '" + f.path() +
                               "' must be a per-layer array (llama.cpp reads it as one)");
    }
    read_swa_layers(f, hp, 0, /*window_required=*/true, 10000.0f);
    read_attention_shapes(f, hp);
}

ggml_tensor * gemma4_layer(ForwardGraph & g, int64_t il, ggml_tensor * x, ggml_tensor * per_layer) {
    ggml_context * ctx = g.ctx;
    const LayerWeights & l = g.w.layers[il];
    x = ggml_add(ctx, x, rms_norm(g, gemma4_attention(g, il, rms_norm(g, x, l.attn_norm)), l.attn_post_norm));
    ggml_tensor * ffn = gated_ffn(g, l, rms_norm(g, x, l.ffn_norm), FfnActivation::gelu);
    if (l.experts.router) {  // the MLP beside the experts, each with its post norm
        ffn = ggml_add(ctx, rms_norm(g, ffn, l.ffn_post_norm_1), rms_norm(g, gemma4_experts(g, l, x), l.ffn_post_norm_2));
    }
    x = ggml_add(ctx, x, rms_norm(g, ffn, l.ffn_post_norm));
    if (per_layer) {
        ggml_tensor * own = ggml_view_2d(ctx, per_layer, per_layer->ne[0], per_layer->ne[1], per_layer->nb[1],
                                         il * per_layer->nb[2]);
        ggml_tensor * pe = ggml_mul(ctx, ggml_gelu(ctx, g.matmul(l.ple_gate, x)), own);
        x = ggml_add(ctx, x, rms_norm(g, g.matmul(l.ple_proj, pe), l.ple_post_norm));
    }
    return l.out_scale ? ggml_mul(ctx, x, l.out_scale) : x;
}

void bind_proportional_rope(const ModelFile & f, const Hparams & hp, ModelWeights & w) {
    if (std::find(hp.is_swa.begin(), hp.is_swa.end(), false) != hp.is_swa.end()) {
        w.rope_freqs = f.tensor("rope_freqs.weight", {hp.head_dim / 2});
    }
}

extern const Architecture kGemma4 = {"gemma4", load_gemma4, build_gemma4_trunk};

}  // namespace ggspec
