// Hyperparameters and weight handles of a decoder-only transformer, read from
// GGUF keys named as llama.cpp names them ("{arch}.block_count", ...).
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ggml.h"
#include "kernels/lane_packs.h"

namespace ggspec {

class ModelFile;

struct Hparams {
    std::string arch;
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;  // key and value head size (equal in the supported archs)
    int64_t n_ff = 0;
    int64_t n_ctx_train = 0;
    int64_t n_rot = 0;
    float rms_eps = 1e-5f;

    int rope_type = GGML_ROPE_TYPE_NORMAL;
    float rope_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    float rope_base_swa = 10000.0f;
    float rope_freq_scale_swa = 1.0f;
    // What llama.cpp's context derives from rope.scaling.*: the kind (YaRN mixes
    // in extrapolation: rope_ext_factor()), the magnitude factor every rotation
    // is multiplied by, and the training context YaRN and LongRoPE refer to.
    enum class RopeScaling { none, linear, yarn, longrope };
    RopeScaling rope_scaling = RopeScaling::linear;
    float rope_attn_factor = 1.0f;
    int64_t n_ctx_orig = 0;

    int64_t n_swa = 0;         // sliding window; 0 = every layer attends to the whole context
    std::vector<bool> is_swa;  // per layer
    // The sliding-window layers' attention shape where it is their own (gemma4:
    // attention.key_length_swa, head_count_kv per layer, rope.dimension_count_swa);
    // 0: the global layers' (head_dim, n_head_kv, n_rot).
    int64_t head_dim_swa = 0;
    int64_t n_head_kv_swa = 0;
    int64_t n_rot_swa = 0;
    // The layer whose KV cache each layer attends over: gemma4's shared-KV layers
    // read an earlier layer's and write none. Empty: every layer its own.
    std::vector<int64_t> kv_layer;

    float embd_scale = 1.0f;     // multiplies token embeddings (Gemma: sqrt(n_embd))
    float q_scale = 1.0f;        // multiplies q after RoPE (Gemma)
    float kq_scale = 1.0f;       // softmax scale
    float logit_scale = 1.0f;    // multiplies the logits before any soft-capping (muse-glimmer)
    float final_softcap = 0.0f;  // tanh soft-capping of the logits; 0 = off

    // Multi-section RoPE (qwen35's IMROPE): each token carries n_pos_per_token
    // position ids, section-major, and rope_sections splits the rotated pairs.
    int64_t n_pos_per_token = 1;
    int rope_sections[4] = {0, 0, 0, 0};

    // Gated DeltaNet layers (qwen35): a recurrent state instead of a KV cache.
    std::vector<bool> is_recurrent;  // per layer; empty = none
    int64_t ssm_conv_kernel = 0;     // Kc: the causal conv's width
    int64_t ssm_head_dim = 0;        // dk: the k (and v) head size
    int64_t ssm_k_heads = 0;         // Hk
    int64_t ssm_v_heads = 0;         // Hv, a multiple of Hk
    int64_t n_nextn = 0;             // NextN (MTP) blocks stored after the trunk's layers

    // Mixture-of-experts FFNs (qwen35moe): 0 experts = a dense FFN.
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;  // experts routed to per row
    int64_t n_ff_exp = 0;       // an expert's FFN width
    int64_t n_ff_shexp = 0;     // the shared expert's

    int64_t n_embd_per_layer = 0;  // per-layer token embeddings' width (gemma4); 0: none

    int64_t n_embd_kv() const { return head_dim * n_head_kv; }  // a global layer's
    // The attention shape of a kind of layer (swa: sliding-window), and of layer il.
    int64_t head_dim_kind(bool swa) const { return swa && head_dim_swa ? head_dim_swa : head_dim; }
    int64_t n_head_kv_kind(bool swa) const { return swa && n_head_kv_swa ? n_head_kv_swa : n_head_kv; }
    int64_t n_embd_kv_kind(bool swa) const { return head_dim_kind(swa) * n_head_kv_kind(swa); }
    int64_t head_dim_of(int64_t il) const { return head_dim_kind(is_swa[il]); }
    int64_t n_head_kv_of(int64_t il) const { return n_head_kv_kind(is_swa[il]); }
    int64_t n_embd_kv_of(int64_t il) const { return n_embd_kv_kind(is_swa[il]); }
    int64_t n_rot_of(int64_t il) const { return is_swa[il] && n_rot_swa ? n_rot_swa : n_rot; }
    int64_t cache_layer(int64_t il) const { return kv_layer.empty() ? il : kv_layer[il]; }
    float rope_ext_factor() const { return rope_scaling == RopeScaling::yarn ? 1.0f : 0.0f; }
    bool recurrent(int64_t il) const { return !is_recurrent.empty() && is_recurrent[il]; }
    bool has_recurrent() const { return std::find(is_recurrent.begin(), is_recurrent.end(), true) != is_recurrent.end(); }
    int64_t ssm_k_dim() const { return ssm_head_dim * ssm_k_heads; }
    int64_t ssm_v_dim() const { return ssm_head_dim * ssm_v_heads; }
    int64_t ssm_conv_channels() const { return 2 * ssm_k_dim() + ssm_v_dim(); }  // q, k and v go through the conv
    std::string key(const std::string & suffix) const { return arch + "." + suffix; }
};

// The routed experts of a mixture-of-experts FFN, as llama.cpp's build_moe_ffn
// runs them: a softmax router picks n_expert_used experts per row, their weights
// renormalized to sum to 1. In qwen35moe the layer's dense ffn_gate/up/down hold
// the shared expert (ffn_*_shexp), which every row runs, scaled by
// sigmoid(shared_gate x); in gemma4 they are a GELU MLP beside the experts.
struct ExpertWeights {
    ggml_tensor * router = nullptr;       // ffn_gate_inp [n_embd, n_expert]
    ggml_tensor * gate = nullptr;         // ffn_gate_exps [n_embd, n_ff_exp, n_expert]
    ggml_tensor * up = nullptr;           // ffn_up_exps [n_embd, n_ff_exp, n_expert]
    ggml_tensor * gate_up = nullptr;      // ffn_gate_up_exps [n_embd, 2 n_ff_exp, n_expert]: gate and up fused
    ggml_tensor * down = nullptr;         // ffn_down_exps [n_ff_exp, n_embd, n_expert]
    ggml_tensor * shared_gate = nullptr;  // ffn_gate_inp_shexp [n_embd]
    ggml_tensor * down_scale = nullptr;   // ffn_down_exps.scale [n_expert]: each expert's output scale, or none
    ggml_tensor * router_scale = nullptr; // ffn_gate_inp.scale [n_embd] (gemma4: the router reads its own norm of x)
};

struct LayerWeights {
    ggml_tensor * attn_norm = nullptr;
    ggml_tensor * wq = nullptr;
    ggml_tensor * wk = nullptr;
    ggml_tensor * wv = nullptr;
    ggml_tensor * wo = nullptr;
    ggml_tensor * q_norm = nullptr;
    ggml_tensor * k_norm = nullptr;
    ggml_tensor * attn_post_norm = nullptr;
    ggml_tensor * attn_out_gate = nullptr;  // attn_gate: sigmoid(attn_gate x) gates the heads before wo (muse-glimmer)
    // Fused projections and biases, as llama.cpp's create_tensor_qkv binds them:
    // attn_qkv [q; k; v] in place of wq/wk/wv, a bias per projection or one fused.
    ggml_tensor * wqkv = nullptr;
    ggml_tensor * bqkv = nullptr;
    ggml_tensor * bq = nullptr;
    ggml_tensor * bk = nullptr;
    ggml_tensor * bv = nullptr;
    ggml_tensor * ffn_norm = nullptr;
    ggml_tensor * ffn_gate = nullptr;  // null with a fused gate-up: ffn_up holds [gate; up] (phi3)
    ggml_tensor * ffn_up = nullptr;
    ggml_tensor * ffn_down = nullptr;
    ggml_tensor * ffn_post_norm = nullptr;

    // Gated DeltaNet (llama.cpp's names in comments)
    ggml_tensor * ssm_in = nullptr;     // attn_qkv: [q; k; v] before the conv
    ggml_tensor * ssm_z = nullptr;      // attn_gate: the output gate z
    ggml_tensor * ssm_conv1d = nullptr; // [Kc, channels]
    ggml_tensor * ssm_dt = nullptr;     // ssm_dt.bias [Hv]
    ggml_tensor * ssm_a = nullptr;      // -exp(A_log) [Hv]
    ggml_tensor * ssm_beta = nullptr;
    ggml_tensor * ssm_alpha = nullptr;
    ggml_tensor * ssm_norm = nullptr;   // [dk], shared by the heads
    ggml_tensor * ssm_out = nullptr;

    ExpertWeights experts;  // unset (router null) for a dense FFN

    // gemma4's mixture-of-experts layers: the experts' input norm, and the post
    // norms of the dense MLP's output and of the experts'
    ggml_tensor * ffn_pre_norm_2 = nullptr;
    ggml_tensor * ffn_post_norm_1 = nullptr;
    ggml_tensor * ffn_post_norm_2 = nullptr;

    // gemma4: the per-layer embedding's gate [n_embd -> n_embd_per_layer], its projection
    // back and that projection's norm; the scalar the layer's output is multiplied by.
    ggml_tensor * ple_gate = nullptr;
    ggml_tensor * ple_proj = nullptr;
    ggml_tensor * ple_post_norm = nullptr;
    ggml_tensor * out_scale = nullptr;
};

// A NextN (MTP) draft head's input projection: [enorm(embedding); hnorm(hidden)] -> n_embd.
struct NextnWeights {
    ggml_tensor * eh_proj = nullptr;
    ggml_tensor * enorm = nullptr;
    ggml_tensor * hnorm = nullptr;
};

struct ModelWeights {
    ggml_tensor * tok_embd = nullptr;
    ggml_tensor * output_norm = nullptr;
    ggml_tensor * output = nullptr;  // the LM head; token_embd when tied
    ggml_tensor * rope_freqs = nullptr;  // per-pair RoPE frequency divisors [n_rot / 2] (Llama 3.1+), or none
    // LongRoPE's two sets of divisors (phi3); the target picks one by its context.
    ggml_tensor * rope_long = nullptr;
    ggml_tensor * rope_short = nullptr;
    // gemma4's per-layer token embeddings [n_layer * n_embd_per_layer, n_vocab], the
    // projection of the embedding to them, and its norm [n_embd_per_layer]
    ggml_tensor * per_layer_tok_embd = nullptr;
    ggml_tensor * per_layer_model_proj = nullptr;
    ggml_tensor * per_layer_proj_norm = nullptr;
    std::vector<LayerWeights> layers;
    NextnWeights nextn;  // a draft head's; unset in a trunk
    // Copies of weights in another layout for the path vnni-block, made at
    // their first product (kernels/lane_packs.h), shared by every graph of these weights.
    std::shared_ptr<LanePacks> lane_packs = std::make_shared<LanePacks>();
};

// A float key that must be finite and >= min (or > min when !min_allowed): a
// ModelFormatError naming it otherwise.
float finite_float(const ModelFile & file, const std::string & key, double fallback, double min, bool min_allowed);

// The keys every supported architecture shares; the architecture's own
// loader adds what is particular to it. A file with experts is refused unless
// the architecture runs them (moe), which then requires them.
// per_layer: feed_forward_length and attention.head_count_kv may vary per layer;
// the first layer's values are kept, and the loader reads the rest (gemma4).
Hparams read_common_hparams(const ModelFile & file, const std::string & arch, bool moe = false, bool per_layer = false);

// Binds block p's routed experts (with ffn_down_exps.scale when the file has it).
void bind_routed_experts(const ModelFile & file, const Hparams & hp, const std::string & p, ExpertWeights & x);
// Those, and into the block's dense FFN weights its shared expert (qwen35moe).
void bind_experts(const ModelFile & file, const Hparams & hp, const std::string & p, LayerWeights & l);

// token_embd / output_norm / output (tied to token_embd when absent).
void bind_embeddings(const ModelFile & file, const Hparams & hp, ModelWeights & w);

struct LayerOptions {
    bool qk_norm = false;       // per-head RMSNorm of q and k (qwen3, gemma3)
    bool post_norms = false;    // post_attention_norm and post_ffw_norm (gemma3)
    bool fused_gate_up = false; // ffn_up [n_embd, 2 n_ff] holds gate and up, no ffn_gate (phi3)
};
void bind_layers(const ModelFile & file, const Hparams & hp, const LayerOptions & opt, ModelWeights & w);

// Sliding-window layers as llama.cpp's load_swa_pattern reads them: the window
// (attention.sliding_window, required when `window_required`; 0 or absent: every
// layer global), then per-layer flags or a period (attention.sliding_window_pattern,
// default `period`: every period-th layer global, 0: none), and the SWA layers' RoPE
// base (rope.freq_base_swa, default `swa_base`).
void read_swa_layers(const ModelFile & file, Hparams & hp, int64_t period, bool window_required, float swa_base);

// A per-layer integer key: an array of n_layer values, or one value for every layer.
std::vector<int64_t> layer_ints(const ModelFile & file, const std::string & key, int64_t n_layer);

// Keys llama.cpp reads without a default: a ModelFormatError naming the first one missing.
void require_keys(const ModelFile & file, std::initializer_list<std::string> keys);

// A file whose graph in llama.cpp asserts that RoPE turns whole heads (llama, qwen2, qwen3).
void require_full_rotary(const ModelFile & file, const Hparams & hp);

// rope_factors_long / rope_factors_short [n_rot / 2], when the file has them; a pair of them.
void bind_longrope_factors(const ModelFile & file, const Hparams & hp, ModelWeights & w);
// LongRoPE picks its long factors when the context (padded to 256, as llama.cpp pads
// it) exceeds the training context, its short ones otherwise; no-op without them.
void choose_rope_factors(const Hparams & hp, int64_t n_ctx, ModelWeights & w);

}  // namespace ggspec
