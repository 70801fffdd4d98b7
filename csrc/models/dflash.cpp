#include "models/dflash.h"

#include <cmath>
#include <string>

#include "errors.h"
#include "model_file.h"
#include "models/layers.h"

namespace ggspec {

namespace {

// Optional pieces of llama.cpp's dflash that ggspec does not run yet: refused
// by name rather than silently ignored.
void refuse_unsupported(const ModelFile & f, const Hparams & hp) {
    auto refuse = [&](const std::string & what) {
        throw ModelFormatError("drafter '" + f.path() + "' has " + what + ", which ggspec does not support yet");
    };
    if (f.find_tensor("selector_hidden.weight")) refuse("DFlash2's candidate selector ('selector_hidden.weight')");
    if (f.find_tensor("markov_w1.weight")) refuse("a DSpark head ('markov_w1.weight')");
    if (f.find_tensor("d2t")) refuse("a reduced draft vocabulary ('d2t')");
    for (const char * name : {"fc.scale", "output.scale", "rope_freqs.weight"}) {
        if (f.find_tensor(name)) refuse("'" + std::string(name) + "'");
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        for (const char * name : {"attn_sinks.weight", "layer_output_scale.weight"}) {
            const std::string t = "blk." + std::to_string(il) + "." + name;
            if (f.find_tensor(t)) refuse("'" + t + "'");
        }
    }
    // [n_rot/2, 0, 0, 0] (what the converter writes for M-RoPE targets) is NeoX at p.
    const std::string sections = hp.key("rope.dimension_sections");
    if (f.has_key(sections)) {
        const std::vector<int64_t> s = f.get_int_array(sections);
        for (size_t i = 1; i < s.size(); ++i) {
            if (s[i] != 0) refuse("multi-section RoPE ('" + sections + "')");
        }
    }
    if (f.has_key(hp.key("hyper_connection.count")) && f.get_int(hp.key("hyper_connection.count")) > 0) {
        refuse("hyper-connections");
    }
}

void read_sliding_window(const ModelFile & f, Hparams & hp) {
    hp.n_swa = f.get_int(hp.key("attention.sliding_window"), 0);
    if (hp.n_swa <= 0) return;
    const std::string key = hp.key("attention.sliding_window_pattern");
    if (!f.is_array(key)) throw ModelFormatError("drafter '" + f.path() + "' has a sliding window but no '" + key + "'");
    const std::vector<int64_t> flags = f.get_int_array(key);
    if ((int64_t) flags.size() != hp.n_layer) {
        throw ModelFormatError("'" + key + "' has " + std::to_string(flags.size()) + " entries for " +
                               std::to_string(hp.n_layer) + " layers");
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.is_swa[il] = flags[il] != 0;
    hp.rope_base_swa = hp.rope_base;
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
}

}  // namespace

void load_dflash(const ModelFile & f, Hparams & hp, ModelWeights & w, DFlashParams & d, DFlashWeights & dw) {
    hp = read_common_hparams(f, "dflash");
    if (!f.has_key(hp.key("attention.layer_norm_rms_epsilon"))) {
        throw ModelFormatError("drafter '" + f.path() + "' lacks '" + hp.key("attention.layer_norm_rms_epsilon") + "'");
    }
    refuse_unsupported(f, hp);
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    const float kq_scale = (float) f.get_float(hp.key("attention.scale"), 0.0);
    if (kq_scale != 0.0f) hp.kq_scale = kq_scale;
    const float embd_scale = (float) f.get_float(hp.key("embedding_scale"), 0.0);
    if (embd_scale != 0.0f) hp.embd_scale = embd_scale;
    read_sliding_window(f, hp);

    const std::string layers_key = hp.key("target_layers");
    if (!f.is_array(layers_key)) throw ModelFormatError("drafter '" + f.path() + "' lacks '" + layers_key + "'");
    d.target_layers = f.get_int_array(layers_key);
    if (d.target_layers.empty()) throw ModelFormatError("'" + layers_key + "' is empty");
    d.block_size = f.get_int(hp.key("block_size"), 16);
    if (d.block_size < 2) throw ModelFormatError("'" + hp.key("block_size") + "' must be at least 2");
    if (!f.has_key("tokenizer.ggml.mask_token_id")) {
        throw ModelFormatError("drafter '" + f.path() + "' names no mask token (tokenizer.ggml.mask_token_id)");
    }
    d.mask_token = (int32_t) f.get_int("tokenizer.ggml.mask_token_id");
    d.value_scale = (float) f.get_float(hp.key("attention.value_scale"), 0.0);
    d.causal = f.get_int(hp.key("attention.causal"), 0) != 0;
    if (f.has_key(hp.key("hidden_activation"))) {
        const std::string act = f.get_str(hp.key("hidden_activation"));
        if (act != "silu" && act != "gelu" && act != "gelu_pytorch_tanh") {
            throw ModelFormatError("unsupported '" + hp.key("hidden_activation") + "' '" + act + "'");
        }
        d.gelu = act != "silu";
    }

    const int64_t e = hp.n_embd;
    dw.fc = f.tensor("fc.weight", {(int64_t) d.target_layers.size() * e, e});
    dw.enc_norm = f.tensor("enc.output_norm.weight", {e});
    w.output_norm = f.tensor("output_norm.weight", {e});
    if (hp.n_vocab > 0) w.tok_embd = f.tensor("token_embd.weight", {e, hp.n_vocab});
    const ggml_tensor * output = f.find_tensor("output.weight");
    if (output) w.output = f.tensor("output.weight", {e, output->ne[1]});

    const int64_t n_q = hp.head_dim * hp.n_head, n_kv = hp.n_embd_kv();
    w.layers.resize(hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        l.attn_norm = f.tensor(p + "attn_norm.weight", {e});
        l.wq = f.tensor(p + "attn_q.weight", {e, n_q});
        l.wk = f.tensor(p + "attn_k.weight", {e, n_kv});
        l.wv = f.tensor_or_null(p + "attn_v.weight", {e, n_kv});  // absent: V is the unweighted norm of raw K
        l.wo = f.tensor(p + "attn_output.weight", {n_q, e});
        l.q_norm = f.tensor(p + "attn_q_norm.weight", {hp.head_dim});
        l.k_norm = f.tensor(p + "attn_k_norm.weight", {hp.head_dim});
        l.attn_post_norm = f.tensor_or_null(p + "post_attention_norm.weight", {e});
        l.ffn_norm = f.tensor(p + "ffn_norm.weight", {e});
        l.ffn_gate = f.tensor(p + "ffn_gate.weight", {e, hp.n_ff});
        l.ffn_up = f.tensor(p + "ffn_up.weight", {e, hp.n_ff});
        l.ffn_down = f.tensor(p + "ffn_down.weight", {hp.n_ff, e});
        l.ffn_post_norm = f.tensor_or_null(p + "post_ffw_norm.weight", {e});
    }
}

namespace {

// K normed and roped, V (or, without attn_v, the unweighted norm of raw K), from x.
std::pair<ggml_tensor *, ggml_tensor *> keys_and_values(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    const Hparams & hp = g.hp;
    const LayerWeights & l = g.w.layers[il];
    ggml_tensor * raw = ggml_reshape_3d(g.ctx, g.matmul(l.wk, x), hp.head_dim, hp.n_head_kv, g.n_rows);
    ggml_tensor * v = l.wv ? g.matmul(l.wv, x)
                           : ggml_reshape_2d(g.ctx, ggml_rms_norm(g.ctx, raw, hp.rms_eps), hp.n_embd_kv(), g.n_rows);
    return {rope(g, il, rms_norm(g, raw, l.k_norm)), v};
}

}  // namespace

ggml_tensor * build_dflash_inject(ForwardGraph & g, const DFlashWeights & dw) {
    ggml_tensor * encoded = rms_norm(g, g.matmul(dw.fc, g.hidden_in), dw.enc_norm);
    for (int64_t il = 0; il < g.hp.n_layer; ++il) {
        auto [k, v] = keys_and_values(g, il, encoded);
        auto [k_written, v_written] = write_kv(g, il, k, v);
        g.writes.push_back(k_written);
        g.writes.push_back(v_written);
    }
    return encoded;
}

ggml_tensor * build_dflash_block(ForwardGraph & g, const DFlashParams & d) {
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    ggml_tensor * x = embed_tokens(g);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & l = g.w.layers[il];
        ggml_tensor * h = rms_norm(g, x, l.attn_norm);
        ggml_tensor * q = ggml_reshape_3d(ctx, g.matmul(l.wq, h), hp.head_dim, hp.n_head, g.n_rows);
        q = rope(g, il, rms_norm(g, q, l.q_norm));
        auto [k, v] = keys_and_values(g, il, h);
        ggml_tensor * o = g.matmul(l.wo, attend(g, il, q, k, v));
        if (d.value_scale != 0.0f) o = ggml_scale(ctx, o, d.value_scale);
        if (l.attn_post_norm) o = rms_norm(g, o, l.attn_post_norm);
        x = ggml_add(ctx, x, o);
        ggml_tensor * f = gated_ffn(g, l, rms_norm(g, x, l.ffn_norm), d.gelu ? FfnActivation::gelu : FfnActivation::silu);
        if (l.ffn_post_norm) f = rms_norm(g, f, l.ffn_post_norm);
        x = ggml_add(ctx, x, f);
    }
    return rms_norm(g, x, g.w.output_norm);
}

}  // namespace ggspec
