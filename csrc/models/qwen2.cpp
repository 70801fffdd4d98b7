// qwen2 (Qwen2, Qwen2.5): the llama block with biases on the q, k and v
// projections (bound where the file has them, as for every architecture) and
// NeoX-style RoPE; no q/k norms.
#include "model_file.h"
#include "models/llama.h"

namespace ggspec {

static void load_qwen2(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    hp = read_common_hparams(file, "qwen2");
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    require_full_rotary(file, hp);
    bind_embeddings(file, hp, w);
    bind_layers(file, hp, LayerOptions{}, w);
}

extern const Architecture kQwen2 = {"qwen2", load_qwen2, build_llama_trunk};

}  // namespace ggspec
