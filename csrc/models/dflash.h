// dflash: llama.cpp's block drafter (DFlash), a small non-causal transformer
// bound to one target. Two graphs:
//   inject (passes A+B): the target's residual rows entering its
//     dflash.target_layers, concatenated, -> g = norm(fc @ rows); each layer's
//     K = rope_neox(k_norm(attn_k @ g)) at the target's positions and
//     V = attn_v @ g are written to the drafter's KV cache. No Q, no attention.
//   block (pass C): [anchor, MASK x n] through the layers, every row attending
//     over the injected context and the whole block; ends after the final norm
//     (the target's LM head, or the drafter's own, follows).
#pragma once
#include <cstdint>
#include <vector>

#include "models/forward_graph.h"

namespace ggspec {

class ModelFile;

struct DFlashParams {
    std::vector<int64_t> target_layers;  // the target layers whose inputs are tapped
    int64_t block_size = 16;             // the trained block; a draft is at most block_size - 1 tokens
    int32_t mask_token = -1;
    float value_scale = 0.0f;            // 0 = off
    bool gelu = false;                   // hidden_activation gelu (ggml's tanh form) instead of silu
    bool causal = false;                 // dflash.attention.causal
};

struct DFlashWeights {
    ggml_tensor * fc = nullptr;        // [n_taps * n_embd, n_embd]
    ggml_tensor * enc_norm = nullptr;  // enc.output_norm
};

// Reads a drafter file. Its token_embd / output may be absent (n_vocab 0):
// the binding borrows the target's.
void load_dflash(const ModelFile & file, Hparams & hp, ModelWeights & w, DFlashParams & d, DFlashWeights & dw);

ggml_tensor * build_dflash_inject(ForwardGraph & g, const DFlashWeights & dw);
ggml_tensor * build_dflash_block(ForwardGraph & g, const DFlashParams & d);

}  // namespace ggspec
