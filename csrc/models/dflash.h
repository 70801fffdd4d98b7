// dflash: llama.cpp's block drafter (DFlash), a small non-causal transformer
// bound to one target. Two graphs:
//   inject (passes A+B): the target's residual rows entering its
//     dflash.target_layers, concatenated, -> g = norm(fc @ rows); each layer's
//     K = rope_neox(k_norm(attn_k @ g)) at the target's positions and
//     V = attn_v @ g are written to the drafter's KV cache. No Q, no attention.
//   block (pass C): [anchor, MASK x n] through the layers, every row attending
//     over the injected context and the whole block; ends after the final norm
//     (the target's LM head, or the drafter's own, follows).
// DFlash2 (a file with selector_hidden) adds a grouped dynamic depthwise conv
// around every attention and FFN sublayer (causal within the block), and ends
// pass C in a candidate lattice instead of logits: the top-k candidates of
// each MASK row with their scores, and pair scores <A[pred] * (P h), B[cand]>
// between consecutive rows' candidates (the greedy walk runs on the host).
// DSpark (a file with markov_w1) adds a Markov head: each predicting row's
// logits are biased by markov_w2 @ markov_w1[prev], prev being the row before's
// greedy pick (the anchor for the first), chained in the graph as llama.cpp
// does; an optional confidence head scores each row sigmoid(conf_proj @
// [h; markov_w1[prev]] + b). Its block is anchor-first (sample_from_anchor):
// the anchor's own row predicts the next token, so a block of n rows drafts n.
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
    // DFlash2 (0: absent)
    int64_t conv_kernel = 0;
    int64_t conv_group = 0;              // channels per dynamic-weight group
    int64_t selector_rank = 0;
    int64_t selector_top_k = 0;
    float logit_scale = 0.0f;            // applied to the unary scores only (0 = off)
    float final_softcap = 0.0f;
    // DSpark (false: absent)
    bool dspark = false;
    bool sample_from_anchor = true;      // dflash.sample_from_anchor: the anchor's row predicts too
    // attribution switches (GGSPEC_DFLASH_CONV=0 / GGSPEC_DFLASH_SELECTOR=0): the weights were trained with both
    bool use_conv = true;
    bool use_selector = true;

    bool dflash2() const { return selector_top_k > 0; }
    bool convolves() const { return dflash2() && use_conv; }
    bool selects() const { return dflash2() && use_selector; }
    // The block's first row that predicts a token (the rows before it draft nothing).
    int64_t first_draft_row() const { return dspark && sample_from_anchor ? 0 : 1; }
    // The most tokens one block drafts: its trained size, less a non-predicting anchor row.
    int64_t max_draft() const { return block_size - first_draft_row(); }
};

struct DFlashConvWeights {
    ggml_tensor * base = nullptr;  // [n_embd, kernel, 2]: side 0 wraps the sublayer's input, side 1 its output
    ggml_tensor * proj = nullptr;  // [n_embd, 2 * kernel * groups]: the per-row dynamic part
};

struct DFlashWeights {
    ggml_tensor * fc = nullptr;        // [n_taps * n_embd, n_embd]
    ggml_tensor * enc_norm = nullptr;  // enc.output_norm
    std::vector<DFlashConvWeights> attn_conv, ffn_conv;  // per layer (DFlash2)
    ggml_tensor * predecessor = nullptr;  // [rank, n_vocab] codebook A
    ggml_tensor * successor = nullptr;    // [rank, n_vocab] codebook B
    ggml_tensor * hidden_proj = nullptr;  // [n_embd, rank] P
    ggml_tensor * d2t = nullptr;          // I64 [head rows]: a reduced head's row -> target token id
    // The codebook rows of the head's candidates: the codebooks themselves, or
    // with d2t their rows for the head's tokens (the lattice then works in head rows).
    ggml_tensor * candidate_predecessor = nullptr;
    ggml_tensor * candidate_successor = nullptr;
    // DSpark
    ggml_tensor * markov_w1 = nullptr;   // [rank, n_vocab]: a target token's Markov code
    ggml_tensor * markov_w2 = nullptr;   // [rank, head rows]: a code's bias over the head's rows
    ggml_tensor * markov_chain = nullptr;  // markov_w1's rows of the head's tokens (markov_w1 without d2t)
    ggml_tensor * conf_proj = nullptr;   // [n_embd + rank, 1], or none
    ggml_tensor * conf_bias = nullptr;   // [1], or none
};

// Reads a drafter file. Its token_embd / output may be absent (n_vocab 0):
// the binding borrows the target's.
void load_dflash(const ModelFile & file, Hparams & hp, ModelWeights & w, DFlashParams & d, DFlashWeights & dw);

ggml_tensor * build_dflash_inject(ForwardGraph & g, const DFlashWeights & dw);
// Pass C; a selecting DFlash2 drafter's lattice (ids, scores, pairs) goes to
// g.outputs, in that order; a DSpark drafter's predicting rows (top-k ids and
// biased logits, g.top_k of each, then each row's confidence when it has the head).
ggml_tensor * build_dflash_block(ForwardGraph & g, const DFlashParams & d, const DFlashWeights & dw);

}  // namespace ggspec
