#pragma once
// Attention as one op on the kernel paths: for each group of one sequence's
// rows and each head, only the keys their masks leave, with the bits of the
// chain of ops it replaces (the K·q product, the masked softmax, the V·p
// product). Every forward of the kernel paths runs it, a decode step and a
// verify of one sequence as well as a batch of several.
//
// That chain, over the region's keys, gives the same bits whatever lies
// outside them: the masked keys' probabilities are exact zeros, which add
// nothing to the F16 dot's lanes, and the region starts at a multiple of 64,
// so every key keeps its lane and its softmax block. This op therefore runs
// the same steps over each row's keys alone, widened to whole 32-key steps,
// and a row costs what it would cost alone however many regions the batch's
// view spans; the unfused chain pays for the whole view, row by row.
//
// A group's scores, probabilities and outputs stay with the thread that
// computes them. The chain splits each product's keys or value rows between
// the threads, so the softmax and the V·p product read half of every row
// from the other core, and it takes two graph nodes more a layer (SmolLM2's
// decode step 3-5% faster; DEVELOPERS.md).
#include "ggml.h"
#include "kernels/row_matmul.h"

namespace ggspec {

// q [hd, n_head, n] F32; k: the cached keys as attention reads them, F16 [hd,
// n_kv, n_head_kv] (a permuted view); v: the transposed values, F16 [n_kv, hd,
// n_head_kv]; mask F32 [n_kv, n]; regions I32 [2 * n]: each row's sequence's
// region of the view, [lo, hi) (rows of one sequence adjacent, their regions
// starting at multiples of 64). Returns the heads' outputs [hd * n_head, n],
// or null when this CPU, path or layout has no such op (the caller then runs
// the unfused chain). A probe at first use compares it with that chain.
ggml_tensor * fused_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                              ggml_tensor * mask, ggml_tensor * regions, float scale, RowKernels path);
bool fused_attention_usable();  // this CPU runs the op and its probe passed

}  // namespace ggspec
