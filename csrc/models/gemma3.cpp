// gemma3 (Gemma 3 270M and up): scaled embeddings, q/k norms, post-attention
// and post-FFN norms, GeGLU, and interleaved sliding-window layers. Constants
// that the GGUF does not carry follow llama.cpp's src/models/gemma3.cpp.
#include <cmath>

#include "model_file.h"
#include "models/layers.h"

namespace ggspec {

static void load_gemma3(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, "gemma3");
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    hp.embd_scale = std::sqrt((float) hp.n_embd);
    read_swa_layers(file, hp, 6, false, 10000.0f);  // every sixth layer attends globally
    hp.final_softcap = finite_float(file, hp.key("final_logit_softcapping"), 0.0, 0.0, true);
    // The 27B scales queries by n_embd / n_head; every other size by the head size.
    const float q_dim = hp.n_layer == 62 ? (float) (hp.n_embd / hp.n_head) : (float) hp.head_dim;
    hp.q_scale = 1.0f / std::sqrt(q_dim);
    hp.kq_scale = 1.0f;
    bind_embeddings(file, hp, w);
    bind_layers(file, hp, LayerOptions{/*qk_norm=*/true, /*post_norms=*/true}, w);
}

static ggml_tensor * build_gemma3_trunk(ForwardGraph & g) {
    ggml_tensor * x = embed_tokens(g);
    for (int64_t il = 0; il < g.hp.n_layer; ++il) {
        const LayerWeights & l = g.w.layers[il];
        g.layer_inputs.push_back(x);
        ggml_tensor * attn = self_attention(g, il, rms_norm(g, x, l.attn_norm));
        x = ggml_add(g.ctx, x, rms_norm(g, attn, l.attn_post_norm));
        ggml_tensor * ffn = gated_ffn(g, l, rms_norm(g, x, l.ffn_norm), FfnActivation::gelu);
        x = ggml_add(g.ctx, x, rms_norm(g, ffn, l.ffn_post_norm));
    }
    return rms_norm(g, x, g.w.output_norm);
}

extern const Architecture kGemma3 = {"gemma3", load_gemma3, build_gemma3_trunk};

}  // namespace ggspec
