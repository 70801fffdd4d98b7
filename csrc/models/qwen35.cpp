// qwen35 (Qwen3.5/3.6 dense): a hybrid trunk where three of every four layers
// are Gated DeltaNet (delta_net.h) and the rest gated full attention: q and a
// sigmoid output gate interleaved per head in attn_q, per-head q/k norms, and
// multi-section RoPE (IMROPE) on the first n_rot dims. Norm weights are stored
// with llama.cpp's +1 folded in. block_count counts the NextN (MTP) blocks
// stored after the trunk; the trunk's layers are the ones before them.
// qwen35moe (qwen35moe.cpp) is the same trunk and head with mixture-of-experts FFNs.
#include "models/qwen35.h"

#include <algorithm>

#include "errors.h"
#include "model_file.h"
#include "models/delta_net.h"
#include "models/layers.h"

namespace ggspec {

namespace {

void read_layer_kinds(const ModelFile & file, Hparams & hp, int64_t block_count) {
    hp.is_recurrent.assign(hp.n_layer, false);
    const std::string kinds_key = hp.key("attention.recurrent_layers");
    if (file.has_key(kinds_key)) {
        const std::vector<int64_t> kinds = file.get_int_array(kinds_key);
        if ((int64_t) kinds.size() != block_count) {
            throw ModelFormatError("'" + kinds_key + "' has " + std::to_string(kinds.size()) + " entries for " +
                                   std::to_string(block_count) + " blocks");
        }
        for (int64_t il = 0; il < hp.n_layer; ++il) hp.is_recurrent[il] = kinds[il] != 0;
        return;
    }
    const int64_t interval = file.get_int(hp.key("full_attention_interval"), 4);
    if (interval <= 0) throw ModelFormatError("'" + hp.key("full_attention_interval") + "' must be positive");
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.is_recurrent[il] = (il + 1) % interval != 0;
}

void read_delta_net_hparams(const ModelFile & file, Hparams & hp) {
    hp.ssm_conv_kernel = file.get_int(hp.key("ssm.conv_kernel"));
    hp.ssm_head_dim = file.get_int(hp.key("ssm.state_size"));
    hp.ssm_v_heads = file.get_int(hp.key("ssm.time_step_rank"));
    hp.ssm_k_heads = file.get_int(hp.key("ssm.group_count"));
    const int64_t inner = file.get_int(hp.key("ssm.inner_size"));
    if (hp.ssm_conv_kernel < 2 || hp.ssm_head_dim <= 0 || hp.ssm_k_heads <= 0 || hp.ssm_v_heads <= 0 ||
        hp.ssm_v_heads % hp.ssm_k_heads != 0) {
        throw ModelFormatError("implausible GatedDeltaNet shape in '" + file.path() + "': conv kernel " +
                               std::to_string(hp.ssm_conv_kernel) + ", head size " + std::to_string(hp.ssm_head_dim) +
                               ", " + std::to_string(hp.ssm_v_heads) + " value heads over " +
                               std::to_string(hp.ssm_k_heads) + " key heads");
    }
    if (inner != hp.ssm_v_dim()) {
        throw ModelFormatError("'" + hp.key("ssm.inner_size") + "' is " + std::to_string(inner) + ", but " +
                               std::to_string(hp.ssm_v_heads) + " value heads of " + std::to_string(hp.ssm_head_dim) +
                               " make " + std::to_string(hp.ssm_v_dim()));
    }
}

// The pre-FFN norm and the FFN: dense, or routed experts with a shared one.
void bind_ffn(const ModelFile & f, const Hparams & hp, const std::string & p, LayerWeights & l) {
    const int64_t e = hp.n_embd;
    l.ffn_norm = f.tensor(p + "post_attention_norm.weight", {e});  // the pre-FFN norm, despite its name
    if (hp.n_expert > 0) {
        bind_experts(f, hp, p, l);
        return;
    }
    l.ffn_gate = f.tensor(p + "ffn_gate.weight", {e, hp.n_ff});
    l.ffn_up = f.tensor(p + "ffn_up.weight", {e, hp.n_ff});
    l.ffn_down = f.tensor(p + "ffn_down.weight", {hp.n_ff, e});
}

ggml_tensor * ffn(ForwardGraph & g, const LayerWeights & l, ggml_tensor * x) {
    x = rms_norm(g, x, l.ffn_norm);
    return l.experts.router ? mixture_of_experts(g, l, x) : gated_ffn(g, l, x, FfnActivation::silu);
}

void bind_qwen35_layers(const ModelFile & f, const Hparams & hp, ModelWeights & w) {
    const int64_t e = hp.n_embd, hd = hp.head_dim;
    w.layers.resize(hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        l.attn_norm = f.tensor(p + "attn_norm.weight", {e});
        bind_ffn(f, hp, p, l);
        if (hp.recurrent(il)) {
            const int64_t hv = hp.ssm_v_heads;
            l.ssm_in = f.tensor(p + "attn_qkv.weight", {e, hp.ssm_conv_channels()});
            l.ssm_z = f.tensor(p + "attn_gate.weight", {e, hp.ssm_v_dim()});
            l.ssm_conv1d = f.tensor(p + "ssm_conv1d.weight", {hp.ssm_conv_kernel, hp.ssm_conv_channels()},
                                     TensorRole::vector);  // ggml_ssm_conv takes F32
            l.ssm_dt = f.tensor(p + "ssm_dt.bias", {hv});
            l.ssm_a = f.tensor(p + "ssm_a", {hv});
            l.ssm_beta = f.tensor(p + "ssm_beta.weight", {e, hv});
            l.ssm_alpha = f.tensor(p + "ssm_alpha.weight", {e, hv});
            l.ssm_norm = f.tensor(p + "ssm_norm.weight", {hp.ssm_head_dim});
            l.ssm_out = f.tensor(p + "ssm_out.weight", {hp.ssm_v_dim(), e});
        } else {
            l.wq = f.tensor(p + "attn_q.weight", {e, 2 * hd * hp.n_head});  // per head: [q | gate]
            l.wk = f.tensor(p + "attn_k.weight", {e, hp.n_embd_kv()});
            l.wv = f.tensor(p + "attn_v.weight", {e, hp.n_embd_kv()});
            l.wo = f.tensor(p + "attn_output.weight", {hd * hp.n_head, e});
            l.q_norm = f.tensor(p + "attn_q_norm.weight", {hd});
            l.k_norm = f.tensor(p + "attn_k_norm.weight", {hd});
        }
    }
}

ggml_tensor * gated_attention(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    const LayerWeights & l = g.w.layers[il];
    const int64_t n = g.n_rows, hd = hp.head_dim;
    const size_t f = sizeof(float);

    const std::vector<ggml_tensor *> qkv = g.matmuls({l.wq, l.wk, l.wv}, x);
    ggml_tensor * q_and_gate = qkv[0];  // [2 * hd * n_head, n]
    ggml_tensor * q = ggml_view_3d(ctx, q_and_gate, hd, hp.n_head, n, 2 * hd * f, q_and_gate->nb[1], 0);
    ggml_tensor * gate = ggml_view_3d(ctx, q_and_gate, hd, hp.n_head, n, 2 * hd * f, q_and_gate->nb[1], hd * f);
    gate = ggml_cont_2d(ctx, gate, hd * hp.n_head, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, qkv[1], hd, hp.n_head_kv, n);
    ggml_tensor * v = qkv[2];
    q = rope(g, il, rms_norm(g, q, l.q_norm));
    k = rope(g, il, rms_norm(g, k, l.k_norm));
    ggml_tensor * heads = ggml_mul(ctx, attend(g, il, q, k, v), ggml_sigmoid(ctx, gate));
    return g.matmul(l.wo, heads);
}

}  // namespace

void load_qwen35_family(const ModelFile & file, const std::string & arch, bool moe, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, arch, moe);
    const int64_t block_count = hp.n_layer;
    hp.n_nextn = file.get_int(hp.key("nextn_predict_layers"), 0);
    if (hp.n_nextn < 0 || hp.n_nextn >= block_count) {
        throw ModelFormatError("'" + hp.key("nextn_predict_layers") + "' is " + std::to_string(hp.n_nextn) + " of " +
                               std::to_string(block_count) + " blocks");
    }
    hp.n_layer = block_count - hp.n_nextn;
    hp.is_swa.assign(hp.n_layer, false);
    require_keys(file, {hp.key("attention.layer_norm_rms_epsilon")});
    const std::string sections_key = hp.key("rope.dimension_sections");
    const std::vector<int64_t> sections = file.has_key(sections_key) ? file.get_int_array(sections_key)
                                                                     : std::vector<int64_t>{};
    if (sections.size() != 4) throw ModelFormatError("'" + sections_key + "' must be an array of 4 section sizes");
    int64_t pairs = 0;
    for (int64_t s : sections) pairs += s < 0 ? hp.n_rot : s;  // a negative section fails below
    if (pairs <= 0 || pairs > hp.n_rot / 2) {
        throw ModelFormatError("'" + sections_key + "' must split at most the " + std::to_string(hp.n_rot / 2) +
                               " rotated pairs (rope.dimension_count / 2) into non-negative sections, got [" +
                               std::to_string(sections[0]) + ", " + std::to_string(sections[1]) + ", " +
                               std::to_string(sections[2]) + ", " + std::to_string(sections[3]) + "]");
    }
    for (int i = 0; i < 4; ++i) hp.rope_sections[i] = (int) sections[i];
    hp.n_pos_per_token = 4;  // time, height, width, extra: text uses (p, p, p, 0)
    hp.rope_type = GGML_ROPE_TYPE_IMROPE;
    read_layer_kinds(file, hp, block_count);
    if (std::find(hp.is_recurrent.begin(), hp.is_recurrent.end(), false) == hp.is_recurrent.end()) {
        throw ModelFormatError("'" + file.path() + "' has no full-attention layer among its " +
                               std::to_string(hp.n_layer) + " (every layer is recurrent); ggspec needs one");
    }
    read_delta_net_hparams(file, hp);
    bind_embeddings(file, hp, w);
    bind_qwen35_layers(file, hp, w);
}

ggml_tensor * build_qwen35_trunk(ForwardGraph & g) {
    ggml_tensor * x = embed_tokens(g);
    for (int64_t il = 0; il < g.hp.n_layer; ++il) {
        const LayerWeights & l = g.w.layers[il];
        g.layer_inputs.push_back(x);
        ggml_tensor * normed = rms_norm(g, x, l.attn_norm);
        x = ggml_add(g.ctx, x, g.hp.recurrent(il) ? delta_net(g, il, normed) : gated_attention(g, il, normed));
        x = ggml_add(g.ctx, x, ffn(g, l, x));
    }
    return rms_norm(g, x, g.w.output_norm);
}

// The NextN block n_layer: a gated-attention block over
// eh_proj([enorm(embedding); hnorm(trunk hidden)]), with its own final norm and
// optional embeddings and LM head (the trunk's otherwise, as in llama.cpp).
void load_qwen35_nextn(const ModelFile & f, const Hparams & trunk, const ModelWeights & trunk_w, Hparams & hp,
                       ModelWeights & w) {
    const int64_t e = trunk.n_embd, hd = trunk.head_dim;
    hp = trunk;
    hp.n_layer = 1;
    hp.n_nextn = 0;
    hp.is_recurrent.assign(1, false);
    hp.is_swa.assign(1, false);
    const std::string p = "blk." + std::to_string(trunk.n_layer) + ".";
    w.nextn.eh_proj = f.tensor(p + "nextn.eh_proj.weight", {2 * e, e});
    w.nextn.enorm = f.tensor(p + "nextn.enorm.weight", {e});
    w.nextn.hnorm = f.tensor(p + "nextn.hnorm.weight", {e});
    w.tok_embd = f.tensor_or_null(p + "nextn.embed_tokens.weight", {e, trunk.n_vocab});
    if (!w.tok_embd) w.tok_embd = trunk_w.tok_embd;
    w.output = f.tensor_or_null(p + "nextn.shared_head_head.weight", {e, trunk.n_vocab});
    if (!w.output) w.output = trunk_w.output;
    w.output_norm = f.tensor_or_null(p + "nextn.shared_head_norm.weight", {e});
    if (!w.output_norm) w.output_norm = trunk_w.output_norm;

    LayerWeights & l = w.layers.emplace_back();
    l.attn_norm = f.tensor(p + "attn_norm.weight", {e});
    bind_ffn(f, hp, p, l);
    l.wq = f.tensor(p + "attn_q.weight", {e, 2 * hd * hp.n_head});
    l.wk = f.tensor(p + "attn_k.weight", {e, hp.n_embd_kv()});
    l.wv = f.tensor(p + "attn_v.weight", {e, hp.n_embd_kv()});
    l.wo = f.tensor(p + "attn_output.weight", {hd * hp.n_head, e});
    l.q_norm = f.tensor(p + "attn_q_norm.weight", {hd});
    l.k_norm = f.tensor(p + "attn_k_norm.weight", {hd});
}

ggml_tensor * build_qwen35_nextn(ForwardGraph & g) {
    const NextnWeights & n = g.w.nextn;
    const LayerWeights & l = g.w.layers[0];
    ggml_tensor * embedded = rms_norm(g, embed_tokens(g), n.enorm);
    ggml_tensor * hidden = rms_norm(g, g.hidden_in, n.hnorm);
    ggml_tensor * x = g.matmul(n.eh_proj, ggml_concat(g.ctx, embedded, hidden, 0));  // embedding first
    x = ggml_add(g.ctx, x, gated_attention(g, 0, rms_norm(g, x, l.attn_norm)));
    x = ggml_add(g.ctx, x, ffn(g, l, x));
    return rms_norm(g, x, g.w.output_norm);
}

static void load_qwen35(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    load_qwen35_family(file, "qwen35", false, hp, w);
}

extern const Architecture kQwen35 = {"qwen35", load_qwen35, build_qwen35_trunk, load_qwen35_nextn, build_qwen35_nextn};

}  // namespace ggspec
