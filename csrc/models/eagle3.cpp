// EAGLE-3 (llama.cpp's eagle3): one decoder layer over the pair (token P+1, g_P)
// at position P, where g_P = fc([f_a; f_b; f_c]) fuses the target's rows at P from
// three tapped layers. The layer attends over concat(norm(embedding), norm(g)),
// its residual is the raw g (or norm(g): norm_before_residual), and its output
// before the final norm is the g of the next chained draft. An LM head over a
// reduced vocabulary drafts target tokens through d2t.
#include <string>

#include "errors.h"
#include "models/drafter_file.h"
#include "models/head_model.h"
#include "models/layers.h"

namespace ggspec {

namespace {

struct Eagle3Weights {
    ggml_tensor * fc = nullptr;           // [3 * target width, n_embd]
    ggml_tensor * enc_norm = nullptr;     // before fc (norm_before_fc), or none
    ggml_tensor * hidden_norm = nullptr;  // blk.0.attn_norm_2: the norm of g
    bool norm_before_residual = false;
};

// features: rows read the target's tapped rows (through fc); else a chained row's g.
ggml_tensor * build_eagle3(ForwardGraph & g, const Eagle3Weights & e, bool features) {
    const LayerWeights & l = g.w.layers[0];
    ggml_tensor * in = g.hidden_in;
    if (features) in = g.matmul(e.fc, e.enc_norm ? rms_norm(g, in, e.enc_norm) : in);
    ggml_tensor * g_norm = rms_norm(g, in, e.hidden_norm);
    ggml_tensor * x = ggml_concat(g.ctx, rms_norm(g, embed_tokens(g), l.attn_norm), g_norm, 0);  // embedding first
    x = ggml_add(g.ctx, self_attention(g, 0, x), e.norm_before_residual ? g_norm : in);
    x = ggml_add(g.ctx, x, gated_ffn(g, l, rms_norm(g, x, l.ffn_norm), FfnActivation::silu));
    g.layer_inputs = {in, x};  // x: the residual leaving the layer, what a chained row reads
    return rms_norm(g, x, g.w.output_norm);
}

}  // namespace

HeadModel eagle3_head_model(std::unique_ptr<ModelFile> file, const Hparams & trunk, const ModelWeights & trunk_w,
                            ggml_backend_dev_t dev) {
    HeadModel m;
    m.file = std::move(file);
    const ModelFile & f = *m.file;
    const std::string & path = f.path();
    Hparams & hp = m.hp;
    hp = read_common_hparams(f, "eagle3");
    hp.rope_type = GGML_ROPE_TYPE_NORMAL;
    if (hp.n_layer != 1) {
        throw ModelFormatError("EAGLE-3 drafter '" + path + "' has " + std::to_string(hp.n_layer) +
                               " layers (eagle3.block_count); EAGLE-3 has one decoder layer");
    }

    // Bound to its target: the taps and their width, the vocabulary.
    const std::string layers_key = hp.key("target_layers"), width_key = hp.key("target_hidden_size");
    if (!f.is_array(layers_key)) throw ModelFormatError("EAGLE-3 drafter '" + path + "' lacks '" + layers_key + "'");
    const std::vector<int64_t> layers = f.get_int_array(layers_key);
    if (layers.size() != 3) {
        throw ModelFormatError("'" + layers_key + "' in '" + path + "' has " + std::to_string(layers.size()) +
                               " entries; EAGLE-3 taps exactly 3 target layers");
    }
    const int64_t width = f.get_int(width_key);
    if (width != trunk.n_embd) {
        throw ModelFormatError("EAGLE-3 drafter '" + path + "' reads a target " + std::to_string(width) + " wide (" +
                               width_key + "), but its target is " + std::to_string(trunk.n_embd) + " wide");
    }
    m.trunk_taps.clear();
    for (int64_t layer : layers) {
        if (layer < 0 || layer > trunk.n_layer) {
            throw ModelFormatError("EAGLE-3 drafter '" + path + "' taps target layer " + std::to_string(layer) + " (" +
                                   layers_key + "), but its target has layers 0.." + std::to_string(trunk.n_layer - 1) +
                                   " and " + std::to_string(trunk.n_layer) + ", its final output");
        }
        m.trunk_taps.push_back(layer == trunk.n_layer ? -1 : (int) layer);  // n_layer: after the final norm
    }
    m.trunk_width = 3 * width;
    require_target_vocabulary(f, hp.n_vocab, trunk.n_vocab, "EAGLE-3 drafter");

    const int64_t e = hp.n_embd, n_q = hp.head_dim * hp.n_head, n_kv = hp.n_embd_kv();
    Eagle3Weights ew;
    ew.fc = f.tensor("fc.weight", {m.trunk_width, e});
    if (f.get_int(hp.key("norm_before_fc"), 0) != 0) ew.enc_norm = f.tensor("enc.output_norm.weight", {m.trunk_width});
    ew.norm_before_residual = f.get_int(hp.key("norm_before_residual"), 0) != 0;
    ew.hidden_norm = f.tensor("blk.0.attn_norm_2.weight", {e});
    LayerWeights & l = m.w.layers.emplace_back();
    l.attn_norm = f.tensor("blk.0.attn_norm.weight", {e});
    l.wq = f.tensor("blk.0.attn_q.weight", {2 * e, n_q});
    l.wk = f.tensor("blk.0.attn_k.weight", {2 * e, n_kv});
    l.wv = f.tensor("blk.0.attn_v.weight", {2 * e, n_kv});
    l.wo = f.tensor("blk.0.attn_output.weight", {n_q, e});
    l.ffn_norm = f.tensor("blk.0.ffn_norm.weight", {e});
    l.ffn_gate = f.tensor("blk.0.ffn_gate.weight", {e, hp.n_ff});
    l.ffn_up = f.tensor("blk.0.ffn_up.weight", {e, hp.n_ff});
    l.ffn_down = f.tensor("blk.0.ffn_down.weight", {hp.n_ff, e});
    m.w.rope_freqs = f.tensor_or_null("rope_freqs.weight", {hp.n_rot / 2});
    m.w.output_norm = f.tensor("output_norm.weight", {e});

    // Embeddings and LM head: its own where it ships them, else the target's.
    if (e != trunk.n_embd && !(f.find_tensor("token_embd.weight") && f.find_tensor("output.weight"))) {
        throw ModelFormatError("EAGLE-3 drafter '" + path + "' is " + std::to_string(e) + " wide, its target " +
                               std::to_string(trunk.n_embd) + ": it must ship its own token_embd and output");
    }
    m.w.tok_embd = hp.n_vocab != 0 ? f.tensor("token_embd.weight", {e, trunk.n_vocab}) : trunk_w.tok_embd;
    const ggml_tensor * d2t = f.find_tensor("d2t");
    const ggml_tensor * own_head = f.find_tensor("output.weight");
    if (d2t && !own_head) {
        throw ModelFormatError("EAGLE-3 drafter '" + path + "' has 'd2t' but no head of its own ('output.weight')");
    }
    const int64_t head_rows = d2t ? own_head->ne[1] : trunk.n_vocab;
    m.w.output = own_head ? f.tensor("output.weight", {e, head_rows}) : trunk_w.output;
    if (d2t) {
        const ggml_tensor * table = f.tensor("d2t", {head_rows}, TensorRole::table);
        if (table->type != GGML_TYPE_I64) throw ModelFormatError("'d2t' in '" + path + "' must be I64");
        m.head_to_token = read_token_map(f, table, trunk.n_vocab, "EAGLE-3 drafter");
    }
    hp.n_vocab = trunk.n_vocab;
    f.check_all_used("ggspec's EAGLE-3 graph");
    m.file->bind(dev);

    m.build = [ew](ForwardGraph & g) { return build_eagle3(g, ew, true); };
    m.build_chained = [ew](ForwardGraph & g) { return build_eagle3(g, ew, false); };
    m.chain_tap = 1;
    m.first_token = 1;
    return m;
}

}  // namespace ggspec
