#include "models/dflash.h"

#include <algorithm>
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
    if (f.find_tensor("rope_freqs.weight")) refuse("rope frequency factors ('rope_freqs.weight')");
    for (const std::string & name : f.tensor_names()) {  // per-tensor scales of any product
        if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0) refuse("'" + name + "'");
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

// DFlash2: llama.cpp's rule (a selector_hidden tensor), with its four keys.
void load_dflash2(const ModelFile & f, const Hparams & hp, DFlashParams & d, DFlashWeights & dw) {
    for (auto [key, value] : {std::pair<const char *, int64_t *>{"conv_kernel_size", &d.conv_kernel},
                              {"conv_group_size", &d.conv_group}, {"selector_rank", &d.selector_rank},
                              {"selector_top_k", &d.selector_top_k}}) {
        *value = f.get_int(hp.key(key), 0);
        if (*value <= 0) throw ModelFormatError("DFlash2 drafter '" + f.path() + "' needs a positive '" + hp.key(key) + "'");
    }
    const int64_t e = hp.n_embd;
    if (e % d.conv_group != 0) {
        throw ModelFormatError("'" + hp.key("conv_group_size") + "' " + std::to_string(d.conv_group) +
                               " does not divide the width " + std::to_string(e));
    }
    d.logit_scale = finite_float(f, hp.key("logit_scale"), 0.0, 0.0, true);
    d.final_softcap = finite_float(f, hp.key("final_logit_softcapping"), 0.0, 0.0, true);
    const int64_t k = d.conv_kernel, groups = e / d.conv_group;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        dw.attn_conv.push_back({f.tensor(p + "attn_conv_base", {e, k, 2}, TensorRole::vector),
                                f.tensor(p + "attn_conv_proj.weight", {e, 2 * k * groups})});
        dw.ffn_conv.push_back({f.tensor(p + "ffn_conv_base", {e, k, 2}, TensorRole::vector),
                               f.tensor(p + "ffn_conv_proj.weight", {e, 2 * k * groups})});
    }
    dw.hidden_proj = f.tensor("selector_hidden.weight", {e, d.selector_rank});
    const ggml_tensor * codebook = f.find_tensor("selector_predecessor.weight");
    const int64_t vocab = codebook ? codebook->ne[1] : 0;
    dw.predecessor = f.tensor("selector_predecessor.weight", {d.selector_rank, vocab});
    dw.successor = f.tensor("selector_successor.weight", {d.selector_rank, vocab});
    dw.candidate_predecessor = dw.predecessor;
    dw.candidate_successor = dw.successor;
}

// DSpark: llama.cpp's rule (a markov_w1 tensor). Shapes against the vocabulary and
// the head's rows are checked when the drafter is bound to its target.
void load_dspark(const ModelFile & f, const Hparams & hp, DFlashParams & d, DFlashWeights & dw) {
    const ggml_tensor * w1 = f.find_tensor("markov_w1.weight");
    const ggml_tensor * w2 = f.find_tensor("markov_w2.weight");
    if (!w2) throw ModelFormatError("DSpark drafter '" + f.path() + "' has markov_w1.weight but no markov_w2.weight");
    const int64_t rank = w1->ne[0];
    dw.markov_w1 = f.tensor("markov_w1.weight", {rank, w1->ne[1]});
    dw.markov_w2 = f.tensor("markov_w2.weight", {rank, w2->ne[1]});
    dw.markov_chain = dw.markov_w1;
    // a [n, 1] matrix (llama.cpp's converter quantizes it as one), not a vector
    dw.conf_proj = f.tensor_or_null("conf_proj.weight", {hp.n_embd + rank, 1}, TensorRole::matrix);
    dw.conf_bias = dw.conf_proj ? f.tensor_or_null("conf_proj.bias", {1}) : nullptr;
    const std::string conf_key = hp.key("has_confidence_head");
    if (!dw.conf_proj && f.has_key(conf_key) && f.get_int(conf_key) != 0) {
        throw ModelFormatError("DSpark drafter '" + f.path() + "' says it has a confidence head (" + conf_key +
                               ") but has no conf_proj.weight");
    }
    d.dspark = true;
    d.sample_from_anchor = f.get_int(hp.key("sample_from_anchor"), 1) != 0;
}

// A DFlash file with a piece of DSpark but no Markov head (markov_w1).
void refuse_partial_dspark(const ModelFile & f, const Hparams & hp) {
    for (const std::string & key : {hp.key("sample_from_anchor"), hp.key("has_confidence_head")}) {
        if (f.has_key(key)) {
            throw ModelFormatError("drafter '" + f.path() + "' has '" + key +
                                   "', a DSpark key, but no Markov head ('markov_w1.weight')");
        }
    }
    for (const char * name : {"markov_w2.weight", "conf_proj.weight"}) {
        if (f.find_tensor(name)) {
            throw ModelFormatError("drafter '" + f.path() + "' has '" + name +
                                   "', a piece of DSpark, but no Markov head ('markov_w1.weight')");
        }
    }
}

}  // namespace

void load_dflash(const ModelFile & f, Hparams & hp, ModelWeights & w, DFlashParams & d, DFlashWeights & dw) {
    hp = read_common_hparams(f, "dflash");
    if (!f.has_key(hp.key("attention.layer_norm_rms_epsilon"))) {
        throw ModelFormatError("drafter '" + f.path() + "' lacks '" + hp.key("attention.layer_norm_rms_epsilon") + "'");
    }
    refuse_unsupported(f, hp);
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    const float kq_scale = finite_float(f, hp.key("attention.scale"), 0.0, 0.0, true);
    if (kq_scale != 0.0f) hp.kq_scale = kq_scale;
    const float embd_scale = finite_float(f, hp.key("embedding_scale"), 0.0, 0.0, true);
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
    d.value_scale = finite_float(f, hp.key("attention.value_scale"), 0.0, 0.0, true);
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
    // a reduced vocabulary: row r of the drafter's own head drafts target token d2t[r]
    if (f.find_tensor("d2t")) {
        if (!output) throw ModelFormatError("drafter '" + f.path() + "' has 'd2t' but no head of its own ('output.weight')");
        dw.d2t = f.tensor("d2t", {output->ne[1]}, TensorRole::table);
        if (dw.d2t->type != GGML_TYPE_I64) throw ModelFormatError("'d2t' in '" + f.path() + "' must be I64");
    }

    if (f.find_tensor("selector_hidden.weight")) load_dflash2(f, hp, d, dw);
    if (f.find_tensor("markov_w1.weight")) {
        if (d.dflash2()) throw ModelFormatError("drafter '" + f.path() + "' has both a DFlash2 selector and a DSpark head");
        load_dspark(f, hp, d, dw);
    } else {
        refuse_partial_dspark(f, hp);
    }

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

namespace {

// y[t] = sum over taps of (base[side][tap] + dyn[t][side][tap][group]) * x[t - tap],
// x before the block's first row being 0: causal within the block, never past it.
ggml_tensor * grouped_conv(ForwardGraph & g, const DFlashParams & d, const DFlashConvWeights & w, ggml_tensor * x,
                           ggml_tensor * dyn, int side) {
    ggml_context * ctx = g.ctx;
    const int64_t e = x->ne[0], n = x->ne[1], taps = d.conv_kernel, groups = e / d.conv_group;
    const size_t f = sizeof(float);
    ggml_tensor * base = w.base->type == GGML_TYPE_F32 ? w.base : ggml_cast(ctx, w.base, GGML_TYPE_F32);
    ggml_tensor * y = nullptr;
    for (int64_t tap = 0; tap < std::min(taps, n); ++tap) {
        ggml_tensor * group_w = ggml_cont(ctx, ggml_view_2d(ctx, dyn, groups, n, dyn->nb[1], (side * taps + tap) * groups * f));
        // each group's weight spread over its conv_group channels
        group_w = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, group_w, 1, groups, n), d.conv_group, groups, n, 1);
        ggml_tensor * weight = ggml_add(ctx, ggml_reshape_2d(ctx, group_w, e, n),
                                        ggml_view_1d(ctx, base, e, (side * taps + tap) * e * f));
        ggml_tensor * earlier = tap == 0 ? x
                                         : ggml_pad_ext(ctx, ggml_view_2d(ctx, x, e, n - tap, x->nb[1], 0),
                                                        0, 0, (int) tap, 0, 0, 0, 0, 0);
        ggml_tensor * term = ggml_mul(ctx, weight, earlier);
        y = y ? ggml_add(ctx, y, term) : term;
    }
    return y;
}

// One sublayer (attention or FFN) of a DFlash2 drafter wrapped in its conv:
// one projection of the normed input gives both sides' dynamic weights.
template <typename Sublayer>
ggml_tensor * convolved(ForwardGraph & g, const DFlashParams & d, const DFlashConvWeights & w, ggml_tensor * normed,
                        Sublayer sublayer) {
    if (!d.convolves()) return sublayer(normed);
    ggml_tensor * dyn = g.matmul(w.proj, normed);
    return grouped_conv(g, d, w, sublayer(grouped_conv(g, d, w, normed, dyn, 0)), dyn, 1);
}

// Rows first..last-1 along dim 2 of a 3-D tensor, contiguous.
ggml_tensor * rows(ggml_context * ctx, ggml_tensor * t, int64_t first, int64_t last) {
    return ggml_cont(ctx, ggml_view_3d(ctx, t, t->ne[0], t->ne[1], last - first, t->nb[1], t->nb[2], first * t->nb[2]));
}

// What pass C of a DFlash2 drafter returns for a block of n rows (g = n - 1
// MASK rows): the only tensors read back.
struct DFlashLattice {
    ggml_tensor * ids = nullptr;     // I32 [k, g]: each MASK row's top-k candidates (unordered)
    ggml_tensor * scores = nullptr;  // [k, g]: row 1: unary + transition from the anchor; later rows: unary
    ggml_tensor * pairs = nullptr;   // [k (cand), k (pred), g - 1]: transitions from row i-1's candidates (g > 1)
};

// The candidate lattice of the block's MASK rows (rows 1..n-1; the anchor's row
// never reaches the LM head); see DFlashLattice.
DFlashLattice build_lattice(ForwardGraph & g, const DFlashParams & d, const DFlashWeights & dw, ggml_tensor * final) {
    ggml_context * ctx = g.ctx;
    const int64_t k = d.selector_top_k, masks = g.n_rows - 1, rank = d.selector_rank;
    ggml_tensor * hidden = ggml_view_2d(ctx, final, final->ne[0], masks, final->nb[1], final->nb[1]);
    ggml_tensor * logits = g.matmul(g.w.output, hidden);  // [n_vocab, masks]
    if (d.logit_scale != 0.0f) logits = ggml_scale(ctx, logits, d.logit_scale);
    if (d.final_softcap > 0.0f) {
        logits = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, logits, 1.0f / d.final_softcap)), d.final_softcap);
    }
    ggml_tensor * cand = ggml_cont(ctx, ggml_top_k(ctx, logits, (int) k));  // I32 [k, masks]
    ggml_tensor * unary = ggml_get_rows(ctx, ggml_reshape_3d(ctx, logits, 1, logits->ne[0], masks), cand);
    unary = ggml_reshape_3d(ctx, unary, k, 1, masks);
    ggml_tensor * gate = ggml_reshape_3d(ctx, g.matmul(dw.hidden_proj, hidden), rank, 1, masks);  // P h
    // codebook rows of every candidate, [rank, k, masks]
    auto codes = [&](ggml_tensor * codebook) {
        return ggml_reshape_3d(ctx, ggml_get_rows(ctx, codebook, ggml_reshape_1d(ctx, cand, k * masks)), rank, k, masks);
    };
    ggml_tensor * succ = codes(dw.candidate_successor);  // B[cand]

    DFlashLattice lattice;
    lattice.ids = cand;
    // the first MASK row's one predecessor is the anchor: its transition joins that row's unary scores
    ggml_tensor * anchor = ggml_get_rows(ctx, dw.predecessor, ggml_view_1d(ctx, g.tokens, 1, 0));  // [rank, 1]
    ggml_tensor * anchor_gated = ggml_mul(ctx, ggml_reshape_3d(ctx, anchor, rank, 1, 1), rows(ctx, gate, 0, 1));
    ggml_tensor * first = ggml_add(ctx, rows(ctx, unary, 0, 1), ggml_mul_mat(ctx, rows(ctx, succ, 0, 1), anchor_gated));
    lattice.scores = ggml_reshape_2d(ctx, first, k, 1);
    if (masks > 1) {
        lattice.scores = ggml_concat(ctx, lattice.scores, ggml_reshape_2d(ctx, rows(ctx, unary, 1, masks), k, masks - 1), 1);
        // later rows: the predecessors are the previous row's candidates
        ggml_tensor * pred_gated =
            ggml_mul(ctx, rows(ctx, codes(dw.candidate_predecessor), 0, masks - 1), rows(ctx, gate, 1, masks));
        lattice.pairs = ggml_mul_mat(ctx, rows(ctx, succ, 1, masks), pred_gated);  // [k cand, k pred, masks - 1]
    }
    return lattice;
}

// DSpark's predicting rows of the block (from d.first_draft_row()): the head's
// logits biased by the Markov head, chained from the anchor through each row's
// greedy pick, then their top-k; and each row's confidence.
void build_dspark(ForwardGraph & g, const DFlashParams & d, const DFlashWeights & dw, ggml_tensor * final) {
    ggml_context * ctx = g.ctx;
    const int64_t first = d.first_draft_row(), n = g.n_rows - first;
    ggml_tensor * hidden = ggml_view_2d(ctx, final, final->ne[0], n, final->nb[1], first * final->nb[1]);
    ggml_tensor * logits = g.matmul(g.w.output, hidden);  // [head rows, n]
    ggml_tensor * code = ggml_get_rows(ctx, dw.markov_w1, ggml_view_1d(ctx, g.tokens, 1, 0));  // the anchor's [rank, 1]
    ggml_tensor * biased = nullptr, * confidence = nullptr;
    for (int64_t i = 0; i < n; ++i) {
        ggml_tensor * row = ggml_view_2d(ctx, logits, logits->ne[0], 1, logits->nb[1], i * logits->nb[1]);
        row = ggml_add(ctx, row, g.matmul(dw.markov_w2, code));
        biased = biased ? ggml_concat(ctx, biased, row, 1) : row;
        if (dw.conf_proj) {
            ggml_tensor * h = ggml_view_2d(ctx, hidden, hidden->ne[0], 1, hidden->nb[1], i * hidden->nb[1]);
            ggml_tensor * c = ggml_mul_mat(ctx, dw.conf_proj, ggml_concat(ctx, ggml_cont(ctx, h), code, 0));
            c = ggml_sigmoid(ctx, dw.conf_bias ? ggml_add(ctx, c, dw.conf_bias) : c);
            confidence = confidence ? ggml_concat(ctx, confidence, c, 1) : c;
        }
        if (i + 1 < n) code = ggml_get_rows(ctx, dw.markov_chain, ggml_argmax(ctx, row));  // greedy, as llama.cpp
    }
    biased = ggml_cont(ctx, biased);
    ggml_tensor * ids = ggml_top_k(ctx, biased, g.top_k);  // [k, n]
    ggml_tensor * values = ggml_reshape_2d(
        ctx, ggml_get_rows(ctx, ggml_reshape_3d(ctx, biased, 1, biased->ne[0], n), ids), g.top_k, n);
    g.outputs.push_back(ids);
    g.outputs.push_back(values);
    if (confidence) g.outputs.push_back(ggml_reshape_1d(ctx, ggml_cont(ctx, confidence), n));
}

}  // namespace

ggml_tensor * build_dflash_block(ForwardGraph & g, const DFlashParams & d, const DFlashWeights & dw) {
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    ggml_tensor * x = embed_tokens(g);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & l = g.w.layers[il];
        const DFlashConvWeights no_conv{};
        ggml_tensor * o = convolved(g, d, d.convolves() ? dw.attn_conv[il] : no_conv, rms_norm(g, x, l.attn_norm),
                                    [&](ggml_tensor * h) {
            ggml_tensor * q = ggml_reshape_3d(ctx, g.matmul(l.wq, h), hp.head_dim, hp.n_head, g.n_rows);
            q = rope(g, il, rms_norm(g, q, l.q_norm));
            auto [k, v] = keys_and_values(g, il, h);
            ggml_tensor * out = g.matmul(l.wo, attend(g, il, q, k, v));
            return d.value_scale != 0.0f ? ggml_scale(ctx, out, d.value_scale) : out;
        });
        if (l.attn_post_norm) o = rms_norm(g, o, l.attn_post_norm);
        x = ggml_add(ctx, x, o);
        ggml_tensor * f = convolved(g, d, d.convolves() ? dw.ffn_conv[il] : no_conv, rms_norm(g, x, l.ffn_norm),
                                    [&](ggml_tensor * h) {
            return gated_ffn(g, l, h, d.gelu ? FfnActivation::gelu : FfnActivation::silu);
        });
        if (l.ffn_post_norm) f = rms_norm(g, f, l.ffn_post_norm);
        x = ggml_add(ctx, x, f);
    }
    ggml_tensor * final = rms_norm(g, x, g.w.output_norm);
    if (d.selects()) {
        const DFlashLattice lattice = build_lattice(g, d, dw, final);
        for (ggml_tensor * t : {lattice.ids, lattice.scores, lattice.pairs}) {
            if (t) g.outputs.push_back(t);
        }
    } else if (d.dspark) {
        build_dspark(g, d, dw, final);
    }
    return final;
}

}  // namespace ggspec
