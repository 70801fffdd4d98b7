// qwen35moe (Qwen3.5/3.6 MoE, such as 35B-A3B): qwen35's hybrid trunk and NextN
// block with a mixture-of-experts FFN in every block (layers.h:
// mixture_of_experts), as llama.cpp's src/models/qwen35moe.cpp.
#include "models/qwen35.h"

namespace ggspec {

static void load_qwen35moe(const ModelFile & file, Hparams & hp, ModelWeights & w) {
    load_qwen35_family(file, "qwen35moe", true, hp, w);
}

extern const Architecture kQwen35Moe = {"qwen35moe", load_qwen35moe, build_qwen35_trunk, load_qwen35_nextn,
                                        build_qwen35_nextn};

}  // namespace ggspec
