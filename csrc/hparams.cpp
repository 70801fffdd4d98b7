#include "hparams.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <utility>

#include "errors.h"
#include "model_file.h"

namespace ggspec {

namespace {

// A per-layer key stored either as one value or as an array that must be uniform.
int64_t uniform_int(const ModelFile & f, const std::string & key) {
    const std::vector<int64_t> v = f.get_int_array(key);
    if (v.empty() || std::any_of(v.begin(), v.end(), [&](int64_t x) { return x != v[0]; })) {
        throw ModelFormatError("GGUF key '" + key + "' varies per layer, which ggspec does not support");
    }
    return v[0];
}

void require_positive(const std::string & key, int64_t v) {
    if (v <= 0) throw ModelFormatError("GGUF key '" + key + "' must be positive, got " + std::to_string(v));
}

// A context length ggml's RoPE takes as an int (YaRN computes with it).
void require_context(const std::string & key, int64_t v) {
    require_positive(key, v);
    if (v > INT32_MAX) throw ModelFormatError("GGUF key '" + key + "' is " + std::to_string(v) + ", past 2^31 - 1");
}

// RoPE scaling as llama.cpp reads it (llama_model_base::load_hparams) and its
// context applies it: the type defaults to linear, whose freq_scale is
// 1 / rope.scaling.factor (or the old rope.scale_linear; 0: none); "none" never
// scales; YaRN mixes in extrapolation (ext_factor 1) and scales magnitudes by
// attn_factor = mscale(factor) / (1 + 0.1 ln factor), which ggml's rope then
// multiplies by its own (1 + 0.1 ln factor); rope.scaling.attn_factor multiplies
// every type's. The YaRN keys llama.cpp reads only for other architectures
// (yarn_ext_factor, yarn_beta_*) are left alone here too (layers.cpp: kYarnBeta*).
void read_rope_scaling(const ModelFile & f, Hparams & hp) {
    using Scaling = Hparams::RopeScaling;
    const std::string scaling_key = hp.key("rope.scaling.type");
    const std::string scaling = f.has_key(scaling_key) ? f.get_str(scaling_key) : "linear";
    const std::pair<const char *, Scaling> kinds[] = {
        {"none", Scaling::none}, {"linear", Scaling::linear}, {"yarn", Scaling::yarn}, {"longrope", Scaling::longrope}};
    const auto kind = std::find_if(std::begin(kinds), std::end(kinds), [&](const auto & k) { return scaling == k.first; });
    if (kind == std::end(kinds)) {
        throw ModelFormatError("'" + f.path() + "' uses RoPE scaling '" + scaling + "' (" + scaling_key +
                               "), which ggspec does not run (supported: none, linear, yarn, longrope)");
    }
    hp.rope_scaling = kind->second;
    const std::string factor_key = f.has_key(hp.key("rope.scaling.factor")) ? hp.key("rope.scaling.factor")
                                                                            : hp.key("rope.scale_linear");
    const double rope_factor = finite_float(f, factor_key, 0.0, 0.0, true);
    hp.rope_freq_scale = rope_factor == 0.0 || hp.rope_scaling == Scaling::none ? 1.0f : 1.0f / (float) rope_factor;
    // 0, as absent, means the training context (llama_context's n_ctx_orig_yarn)
    const std::string orig_key = hp.key("rope.scaling.original_context_length");
    hp.n_ctx_orig = f.get_int(orig_key, 0);
    if (hp.n_ctx_orig == 0) hp.n_ctx_orig = hp.n_ctx_train;
    require_context(orig_key, hp.n_ctx_orig);
    hp.rope_attn_factor = 1.0f;
    if (hp.rope_ext_factor() != 0.0f) {
        const float factor = 1.0f / hp.rope_freq_scale;
        hp.rope_attn_factor = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
        hp.rope_attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    hp.rope_attn_factor *= finite_float(f, hp.key("rope.scaling.attn_factor"), 1.0, 0.0, false);
}

// As llama.cpp's create_tensor_qkv: a fused attn_qkv with its fused bias or the
// three separate ones, or separate q/k/v weights, each with an optional bias.
void bind_qkv(const ModelFile & f, const std::string & p, int64_t n_embd, int64_t n_q, int64_t n_kv,
              LayerWeights & l) {
    l.wqkv = f.tensor_or_null(p + "attn_qkv.weight", {n_embd, n_q + 2 * n_kv});
    if (!l.wqkv) {
        l.wq = f.tensor(p + "attn_q.weight", {n_embd, n_q});
        l.wk = f.tensor(p + "attn_k.weight", {n_embd, n_kv});
        l.wv = f.tensor(p + "attn_v.weight", {n_embd, n_kv});
    }
    l.bqkv = l.wqkv ? f.tensor_or_null(p + "attn_qkv.bias", {n_q + 2 * n_kv}) : nullptr;
    if (!l.bqkv) {
        l.bq = f.tensor_or_null(p + "attn_q.bias", {n_q});
        l.bk = f.tensor_or_null(p + "attn_k.bias", {n_kv});
        l.bv = f.tensor_or_null(p + "attn_v.bias", {n_kv});
    }
    // llama.cpp adds separate biases to a fused product only when all three are there.
    if (l.wqkv && (l.bq || l.bk || l.bv) && !(l.bq && l.bk && l.bv)) {
        throw ModelFormatError("'" + f.path() + "' has a fused " + p + "attn_qkv.weight with only some of the "
                               "attn_q/attn_k/attn_v biases; llama.cpp would ignore them");
    }
}

// llama.cpp's LLAMA_MAX_EXPERTS: the most experts its graphs (and files) have.
constexpr int64_t kMaxExperts = 1024;

// The expert counts and widths, with llama.cpp's defaults for the widths: an
// expert n_ff / n_expert_used, the shared expert n_ff.
void read_expert_hparams(const ModelFile & f, Hparams & hp) {
    const std::string count_key = hp.key("expert_count"), used_key = hp.key("expert_used_count");
    hp.n_expert = f.get_int(count_key, 0);
    hp.n_expert_used = f.has_key(used_key) ? uniform_int(f, used_key) : 0;
    if (hp.n_expert <= 0 || hp.n_expert > kMaxExperts) {
        throw ModelFormatError("GGUF key '" + count_key + "' must be in 1.." + std::to_string(kMaxExperts) +
                               " for a " + hp.arch + " file, got " + std::to_string(hp.n_expert));
    }
    if (hp.n_expert_used <= 0 || hp.n_expert_used > hp.n_expert) {
        throw ModelFormatError("GGUF key '" + used_key + "' must be in 1.." + std::to_string(hp.n_expert) +
                               " (the expert count), got " + std::to_string(hp.n_expert_used));
    }
    const std::string exp_key = hp.key("expert_feed_forward_length");
    const std::string shexp_key = hp.key("expert_shared_feed_forward_length");
    hp.n_ff_exp = f.has_key(exp_key) ? uniform_int(f, exp_key) : hp.n_ff / hp.n_expert_used;
    hp.n_ff_shexp = f.has_key(shexp_key) ? uniform_int(f, shexp_key) : hp.n_ff;
    require_positive(exp_key, hp.n_ff_exp);
    require_positive(shexp_key, hp.n_ff_shexp);
}

}  // namespace

// Checked here, before ggml's asserts (an abort) or NaN logits can see them.
float finite_float(const ModelFile & f, const std::string & key, double fallback, double min, bool min_allowed) {
    const double v = f.get_float(key, fallback);
    if (!std::isfinite((float) v) || v < min || (v == min && !min_allowed)) {
        throw ModelFormatError("GGUF key '" + key + "' is " + std::to_string(v) + " in '" + f.path() +
                               "'; it must be a finite number " + (min_allowed ? ">= " : "> ") + std::to_string(min));
    }
    return (float) v;
}

Hparams read_common_hparams(const ModelFile & f, const std::string & arch, bool moe, bool per_layer) {
    Hparams hp;
    hp.arch = arch;
    hp.n_embd = f.get_int(hp.key("embedding_length"));
    hp.n_layer = f.get_int(hp.key("block_count"));
    require_positive(hp.key("block_count"), hp.n_layer);
    if (hp.n_layer > 4096) {  // before layer_ints sizes anything by it
        throw ModelFormatError("implausible " + hp.key("block_count") + " " + std::to_string(hp.n_layer));
    }
    auto layer_int = [&](const std::string & key) {
        return per_layer ? layer_ints(f, key, hp.n_layer)[0] : uniform_int(f, key);
    };
    hp.n_ff = layer_int(hp.key("feed_forward_length"));
    hp.n_head = uniform_int(f, hp.key("attention.head_count"));
    hp.n_head_kv = f.has_key(hp.key("attention.head_count_kv")) ? layer_int(hp.key("attention.head_count_kv"))
                                                                 : hp.n_head;
    hp.n_ctx_train = f.get_int(hp.key("context_length"), 2048);
    require_context(hp.key("context_length"), hp.n_ctx_train);
    for (auto [k, v] : {std::pair<const char *, int64_t>{"embedding_length", hp.n_embd},
                        {"feed_forward_length", hp.n_ff},
                        {"attention.head_count", hp.n_head}, {"attention.head_count_kv", hp.n_head_kv}}) {
        require_positive(hp.key(k), v);
    }
    if (hp.n_head > 4096 || hp.n_head % hp.n_head_kv != 0) {
        throw ModelFormatError("implausible attention shape in '" + f.path() + "': " + std::to_string(hp.n_head) +
                               " heads over " + std::to_string(hp.n_head_kv) + " KV heads, " +
                               std::to_string(hp.n_layer) + " layers");
    }
    const int64_t head_k = f.get_int(hp.key("attention.key_length"), hp.n_embd / hp.n_head);
    const int64_t head_v = f.get_int(hp.key("attention.value_length"), head_k);
    if (head_k != head_v) {
        throw ModelFormatError("key and value head sizes differ (" + std::to_string(head_k) + " vs " +
                               std::to_string(head_v) + "), which ggspec does not support");
    }
    require_positive(hp.key("attention.key_length"), head_k);
    hp.head_dim = head_k;
    hp.n_rot = f.get_int(hp.key("rope.dimension_count"), hp.head_dim);
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
        throw ModelFormatError("rope.dimension_count " + std::to_string(hp.n_rot) + " does not fit head size " +
                               std::to_string(hp.head_dim));
    }
    hp.rms_eps = finite_float(f, hp.key("attention.layer_norm_rms_epsilon"), 1e-5, 0.0, true);
    hp.rope_base = finite_float(f, hp.key("rope.freq_base"), 10000.0, 0.0, false);
    read_rope_scaling(f, hp);
    if (moe) {
        read_expert_hparams(f, hp);
    } else if (f.get_int(hp.key("expert_count"), 0) > 0) {
        throw ModelFormatError("'" + f.path() + "' is a mixture of experts (" + hp.key("expert_count") + " " +
                               std::to_string(f.get_int(hp.key("expert_count"))) +
                               "), which ggspec does not run for " + arch);
    }
    hp.kq_scale = 1.0f / std::sqrt((float) hp.head_dim);
    hp.is_swa.assign(hp.n_layer, false);
    // A drafter may borrow its target's embeddings: then its loader sets n_vocab.
    const ggml_tensor * embd = f.find_tensor("token_embd.weight");
    hp.n_vocab = embd ? embd->ne[1] : 0;
    return hp;
}

void bind_embeddings(const ModelFile & f, const Hparams & hp, ModelWeights & w) {
    w.tok_embd = f.tensor("token_embd.weight", {hp.n_embd, hp.n_vocab});
    w.output_norm = f.tensor("output_norm.weight", {hp.n_embd});
    w.output = f.tensor_or_null("output.weight", {hp.n_embd, hp.n_vocab});
    if (!w.output) w.output = w.tok_embd;
}

void bind_layers(const ModelFile & f, const Hparams & hp, const LayerOptions & opt, ModelWeights & w) {
    const int64_t n_q = hp.head_dim * hp.n_head;
    const int64_t n_kv = hp.n_embd_kv();
    w.layers.resize(hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        l.attn_norm = f.tensor(p + "attn_norm.weight", {hp.n_embd});
        bind_qkv(f, p, hp.n_embd, n_q, n_kv, l);
        l.wo = f.tensor(p + "attn_output.weight", {n_q, hp.n_embd});
        l.ffn_norm = f.tensor(p + "ffn_norm.weight", {hp.n_embd});
        if (opt.fused_gate_up) {
            l.ffn_up = f.tensor(p + "ffn_up.weight", {hp.n_embd, 2 * hp.n_ff});
        } else {
            l.ffn_gate = f.tensor(p + "ffn_gate.weight", {hp.n_embd, hp.n_ff});
            l.ffn_up = f.tensor(p + "ffn_up.weight", {hp.n_embd, hp.n_ff});
        }
        l.ffn_down = f.tensor(p + "ffn_down.weight", {hp.n_ff, hp.n_embd});
        if (opt.qk_norm) {
            l.q_norm = f.tensor(p + "attn_q_norm.weight", {hp.head_dim});
            l.k_norm = f.tensor(p + "attn_k_norm.weight", {hp.head_dim});
        }
        if (opt.post_norms) {
            l.attn_post_norm = f.tensor(p + "post_attention_norm.weight", {hp.n_embd});
            l.ffn_post_norm = f.tensor(p + "post_ffw_norm.weight", {hp.n_embd});
        }
    }
}

void bind_routed_experts(const ModelFile & f, const Hparams & hp, const std::string & p, ExpertWeights & x) {
    const int64_t e = hp.n_embd, n_ff = hp.n_ff_exp, n_exp = hp.n_expert;
    x.router = f.tensor(p + "ffn_gate_inp.weight", {e, n_exp}, TensorRole::matrix);
    x.gate_up = f.tensor_or_null(p + "ffn_gate_up_exps.weight", {e, 2 * n_ff, n_exp}, TensorRole::matrix);
    if (!x.gate_up) {
        x.gate = f.tensor(p + "ffn_gate_exps.weight", {e, n_ff, n_exp}, TensorRole::matrix);
        x.up = f.tensor(p + "ffn_up_exps.weight", {e, n_ff, n_exp}, TensorRole::matrix);
    }
    x.down = f.tensor(p + "ffn_down_exps.weight", {n_ff, e, n_exp}, TensorRole::matrix);
    x.down_scale = f.tensor_or_null(p + "ffn_down_exps.scale", {n_exp});
}

void bind_experts(const ModelFile & f, const Hparams & hp, const std::string & p, LayerWeights & l) {
    const int64_t e = hp.n_embd;
    ExpertWeights & x = l.experts;
    bind_routed_experts(f, hp, p, x);
    // llama.cpp multiplies it as a one-column matrix; its converter writes it F32
    x.shared_gate = f.tensor(p + "ffn_gate_inp_shexp.weight", {e}, TensorRole::matrix);
    l.ffn_gate = f.tensor(p + "ffn_gate_shexp.weight", {e, hp.n_ff_shexp});
    l.ffn_up = f.tensor(p + "ffn_up_shexp.weight", {e, hp.n_ff_shexp});
    l.ffn_down = f.tensor(p + "ffn_down_shexp.weight", {hp.n_ff_shexp, e});
}

void read_swa_layers(const ModelFile & f, Hparams & hp, int64_t period, bool window_required, float swa_base) {
    const std::string window_key = hp.key("attention.sliding_window");
    hp.n_swa = window_required ? f.get_int(window_key) : f.get_int(window_key, 0);
    if (hp.n_swa < 0 || (window_required && hp.n_swa == 0)) {
        throw ModelFormatError("GGUF key '" + window_key + "' must be positive, got " + std::to_string(hp.n_swa));
    }
    if (hp.n_swa == 0) return;
    const std::string pattern_key = hp.key("attention.sliding_window_pattern");
    if (f.is_array(pattern_key)) {
        const std::vector<int64_t> flags = f.get_int_array(pattern_key);
        if ((int64_t) flags.size() != hp.n_layer) {
            throw ModelFormatError("'" + pattern_key + "' has " + std::to_string(flags.size()) + " entries for " +
                                   std::to_string(hp.n_layer) + " layers");
        }
        for (int64_t il = 0; il < hp.n_layer; ++il) hp.is_swa[il] = flags[il] != 0;
    } else {
        period = f.get_int(pattern_key, period);
        for (int64_t il = 0; il < hp.n_layer; ++il) hp.is_swa[il] = period == 0 || il % period < period - 1;
    }
    hp.rope_base_swa = finite_float(f, hp.key("rope.freq_base_swa"), swa_base, 0.0, false);
    hp.rope_freq_scale_swa = 1.0f;
}

std::vector<int64_t> layer_ints(const ModelFile & f, const std::string & key, int64_t n_layer) {
    std::vector<int64_t> v = f.get_int_array(key);
    if (!f.is_array(key)) v.assign((size_t) n_layer, v[0]);
    if ((int64_t) v.size() != n_layer) {
        throw ModelFormatError("'" + key + "' in '" + f.path() + "' has " + std::to_string(v.size()) + " entries for " +
                               std::to_string(n_layer) + " layers");
    }
    return v;
}

void require_keys(const ModelFile & f, std::initializer_list<std::string> keys) {
    for (const std::string & key : keys) {
        if (!f.has_key(key)) throw ModelFormatError("GGUF '" + f.path() + "' lacks '" + key + "'");
    }
}

void require_full_rotary(const ModelFile & f, const Hparams & hp) {
    if (hp.n_rot != hp.head_dim) {
        throw ModelFormatError(hp.key("rope.dimension_count") + " " + std::to_string(hp.n_rot) + " in '" + f.path() +
                               "' differs from the head size " + std::to_string(hp.head_dim) + "; a " + hp.arch +
                               " file rotates whole heads (llama.cpp asserts it)");
    }
}

void bind_longrope_factors(const ModelFile & f, const Hparams & hp, ModelWeights & w) {
    w.rope_long = f.tensor_or_null("rope_factors_long.weight", {hp.n_rot / 2});
    w.rope_short = f.tensor_or_null("rope_factors_short.weight", {hp.n_rot / 2});
    if (!w.rope_long != !w.rope_short) {
        throw ModelFormatError("'" + f.path() + "' has only one of rope_factors_long and rope_factors_short");
    }
}

void choose_rope_factors(const Hparams & hp, int64_t n_ctx, ModelWeights & w) {
    if (!w.rope_long) return;
    const int64_t padded = (n_ctx + 255) / 256 * 256;
    w.rope_freqs = padded > hp.n_ctx_orig ? w.rope_long : w.rope_short;
}

}  // namespace ggspec
