// qwen3: the llama block with per-head RMSNorm of q and k before RoPE, and
// NeoX-style RoPE (rotating halves instead of adjacent pairs).
#include "model_file.h"
#include "models/llama.h"

namespace ggspec {

static void load_qwen3(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, "qwen3");
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    require_full_rotary(file, hp);
    bind_embeddings(file, hp, w);
    bind_layers(file, hp, LayerOptions{/*qk_norm=*/true, /*post_norms=*/false}, w);
}

extern const Architecture kQwen3 = {"qwen3", load_qwen3, build_llama_trunk};

}  // namespace ggspec
