// llama (SmolLM2, Llama 2/3/3.1/3.2): pre-norm blocks, RoPE on adjacent pairs
// (divided per pair by rope_freqs.weight where the file has it, as Llama 3.1's
// frequency scaling is stored, or by LongRoPE factors), SwiGLU.
// qwen3 shares this block and adds per-head q/k norms (see qwen3.cpp).
#include "models/llama.h"

#include "model_file.h"
#include "models/layers.h"

namespace ggspec {

ggml_tensor * build_llama_trunk(ForwardGraph & g) {
    ggml_tensor * x = embed_tokens(g);
    for (int64_t il = 0; il < g.hp.n_layer; ++il) {
        const LayerWeights & l = g.w.layers[il];
        g.layer_inputs.push_back(x);
        x = ggml_add(g.ctx, x, self_attention(g, il, rms_norm(g, x, l.attn_norm)));
        x = ggml_add(g.ctx, x, gated_ffn(g, l, rms_norm(g, x, l.ffn_norm), FfnActivation::silu));
    }
    return rms_norm(g, x, g.w.output_norm);
}

static void load_llama(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, "llama");
    hp.rope_type = GGML_ROPE_TYPE_NORMAL;
    require_full_rotary(file, hp);
    bind_embeddings(file, hp, w);
    bind_layers(file, hp, LayerOptions{}, w);
    // As llama.cpp: a LongRoPE file's two sets of factors, any other's rope_freqs.
    if (hp.rope_scaling == Hparams::RopeScaling::longrope) {
        bind_longrope_factors(file, hp, w);
    } else {
        w.rope_freqs = file.tensor_or_null("rope_freqs.weight", {hp.n_rot / 2});
    }
}

extern const Architecture kLlama = {"llama", load_llama, build_llama_trunk};

}  // namespace ggspec
