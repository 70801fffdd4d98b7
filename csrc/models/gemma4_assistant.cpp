// The Gemma 4 assistant (llama.cpp's gemma4-assistant, src/models/gemma4-assistant.cpp),
// a per-token draft head in a GGUF of its own. A row reads a token and a row as wide as
// its target: u = nextn.pre_projection [target token_embd(token) * sqrt(target width);
// row]; then gemma4 blocks with q only, each attending over the target's cache of the
// target's last layer of its kind (sliding-window blocks: layer n_layer - 2, global
// ones: n_layer - 1, through the target's KV sharing); its own tied embedding is the
// LM head (no soft-capping), and nextn.post_projection of its final-normed row is the
// row its next draft step reads. It keeps no KV: every step of a draft sits at the
// position of the token the draft follows, as llama.cpp's shared-cache draft loop has it.
#include <cmath>
#include <string>

#include "errors.h"
#include "models/drafter_file.h"
#include "models/gemma4.h"
#include "models/head_model.h"
#include "models/layers.h"

namespace ggspec {

namespace {

struct AssistantWeights {
    ggml_tensor * target_embd = nullptr;  // the target's token_embd
    ggml_tensor * pre_projection = nullptr;
    ggml_tensor * post_projection = nullptr;
    float embd_scale = 1.0f;  // sqrt(target width)
};

ggml_tensor * build_assistant(ForwardGraph & g, const AssistantWeights & a) {
    ggml_tensor * x = ggml_scale(g.ctx, ggml_get_rows(g.ctx, a.target_embd, g.tokens), a.embd_scale);
    ggml_tensor * u = g.matmul(a.pre_projection, ggml_concat(g.ctx, x, g.hidden_in, 0));  // embedding first
    for (int64_t il = 0; il < g.hp.n_layer; ++il) u = gemma4_layer(g, il, u, nullptr);
    ggml_tensor * f = rms_norm(g, u, g.w.output_norm);
    g.layer_inputs = {g.matmul(a.post_projection, f)};  // what a chained row reads (chain_tap 0)
    return f;
}

// The target layer each block reads (hp.kv_layer): the target's last of the block's
// kind, n_layer - 2 or n_layer - 1, as llama.cpp shares them. The blocks read its cache
// with their own shapes: each kind's must be the target's, and the layer of their kind.
void bind_target_kv(const ModelFile & f, Hparams & hp, const Hparams & trunk) {
    const std::string & path = f.path();
    if (trunk.arch != "gemma4") {
        throw ModelFormatError("'" + path + "' is a Gemma 4 assistant, which drafts over a gemma4 target's cache; the "
                               "target is " + trunk.arch);
    }
    if (hp.n_swa != trunk.n_swa) {
        throw ModelFormatError("Gemma 4 assistant '" + path + "' attends over a window of " + std::to_string(hp.n_swa) +
                               " (attention.sliding_window), its target over " + std::to_string(trunk.n_swa));
    }
    hp.kv_layer.resize((size_t) hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const bool swa = hp.is_swa[il];
        const int64_t read = trunk.n_layer - (swa ? 2 : 1);
        const std::string kind = swa ? "sliding-window" : "global";
        if (read < 0 || trunk.is_swa[read] != swa) {
            throw ModelFormatError("Gemma 4 assistant '" + path + "' block " + std::to_string(il) + " (" + kind +
                                   ") would read target layer " + std::to_string(read) + ", which is not " + kind);
        }
        if (hp.head_dim_kind(swa) != trunk.head_dim_kind(swa) || hp.n_head_kv_kind(swa) != trunk.n_head_kv_kind(swa)) {
            throw ModelFormatError("Gemma 4 assistant '" + path + "' reads the target's " + kind + " KV as " +
                                   std::to_string(hp.n_head_kv_kind(swa)) + " heads of " +
                                   std::to_string(hp.head_dim_kind(swa)) + "; the target's are " +
                                   std::to_string(trunk.n_head_kv_kind(swa)) + " heads of " +
                                   std::to_string(trunk.head_dim_kind(swa)));
        }
        hp.kv_layer[il] = read;
    }
}

}  // namespace

HeadModel gemma4_assistant_head_model(std::unique_ptr<ModelFile> file, const Hparams & trunk,
                                      const ModelWeights & trunk_w, ggml_backend_dev_t dev) {
    HeadModel m;
    m.file = std::move(file);
    const ModelFile & f = *m.file;
    Hparams & hp = m.hp;
    hp = read_common_hparams(f, "gemma4-assistant", /*moe=*/false, /*per_layer=*/true);
    read_gemma4_attention(f, hp);
    const std::string out_key = hp.key("embedding_length_out"), layers_key = hp.key("nextn_predict_layers");
    require_keys(f, {out_key, layers_key});
    const int64_t width = f.get_int(out_key);
    if (width != trunk.n_embd || width == hp.n_embd) {
        throw ModelFormatError("Gemma 4 assistant '" + f.path() + "' reads a target " + std::to_string(width) +
                               " wide (" + out_key + "), but its target is " + std::to_string(trunk.n_embd) +
                               (width == hp.n_embd ? " (llama.cpp also needs it to differ from the assistant's own width)"
                                                   : ""));
    }
    if (f.get_int(layers_key) != hp.n_layer) {
        throw ModelFormatError("'" + layers_key + "' in '" + f.path() + "' must be its block_count " +
                               std::to_string(hp.n_layer) + ": every block of the assistant drafts");
    }
    bind_target_kv(f, hp, trunk);
    require_target_vocabulary(f, hp.n_vocab, trunk.n_vocab, "Gemma 4 assistant");

    const int64_t e = hp.n_embd;
    const std::vector<int64_t> n_ff = layer_ints(f, hp.key("feed_forward_length"), hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const int64_t hd = hp.head_dim_of(il), n_q = hd * hp.n_head;
        LayerWeights & l = m.w.layers.emplace_back();
        l.attn_norm = f.tensor(p + "attn_norm.weight", {e});
        l.wq = f.tensor(p + "attn_q.weight", {e, n_q});
        l.q_norm = f.tensor(p + "attn_q_norm.weight", {hd});
        l.wo = f.tensor(p + "attn_output.weight", {n_q, e});
        l.attn_post_norm = f.tensor(p + "post_attention_norm.weight", {e});
        l.out_scale = f.tensor(p + "layer_output_scale.weight", {1});
        l.ffn_norm = f.tensor(p + "ffn_norm.weight", {e});
        l.ffn_gate = f.tensor(p + "ffn_gate.weight", {e, n_ff[il]});
        l.ffn_up = f.tensor(p + "ffn_up.weight", {e, n_ff[il]});
        l.ffn_down = f.tensor(p + "ffn_down.weight", {n_ff[il], e});
        l.ffn_post_norm = f.tensor(p + "post_ffw_norm.weight", {e});
    }
    bind_proportional_rope(f, hp, m.w);
    m.w.tok_embd = f.tensor("token_embd.weight", {e, trunk.n_vocab});
    m.w.output = m.w.tok_embd;
    m.w.output_norm = f.tensor("output_norm.weight", {e});
    AssistantWeights a;
    a.target_embd = trunk_w.tok_embd;
    a.embd_scale = std::sqrt((float) width);
    a.pre_projection = f.tensor("nextn.pre_projection.weight", {2 * width, e});
    a.post_projection = f.tensor("nextn.post_projection.weight", {e, width});
    // llama.cpp loads a sparse LM head's centroids and ordering and never reads them: full-vocabulary logits
    f.ignore_tensor("masked_embd_centroids.weight");
    f.ignore_tensor("masked_embd_ordering");
    f.check_all_used("ggspec's Gemma 4 assistant graph");
    m.file->bind(dev);

    m.build = [a](ForwardGraph & g) { return build_assistant(g, a); };
    m.trunk_width = width;
    m.chain_tap = 0;
    m.chain_width = width;
    m.reads_trunk_kv = true;
    return m;
}

}  // namespace ggspec
