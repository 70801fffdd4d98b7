// phi3 (Phi-3, Phi-3.5, Phi-4-mini): the llama block with a fused qkv
// projection and a fused gate-up FFN, NeoX-style RoPE, possibly partial
// (rope.dimension_count below the head size), LongRoPE's long and short
// factors, and q scaled before the softmax rather than the scores, as
// llama.cpp's src/models/phi3.cpp computes it. llama.cpp turns Phi's sliding
// window off (its converters set it wrongly), and so does ggspec.
#include <cmath>

#include "model_file.h"
#include "models/llama.h"

namespace ggspec {

static void load_phi3(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, "phi3");
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    hp.q_scale = 1.0f / std::sqrt((float) hp.head_dim);
    hp.kq_scale = 1.0f;
    bind_embeddings(file, hp, w);
    bind_layers(file, hp, LayerOptions{/*qk_norm=*/false, /*post_norms=*/false, /*fused_gate_up=*/true}, w);
    bind_longrope_factors(file, hp, w);
}

extern const Architecture kPhi3 = {"phi3", load_phi3, build_llama_trunk};

}  // namespace ggspec
