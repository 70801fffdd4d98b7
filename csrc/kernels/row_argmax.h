#pragma once
// The greedy pick of each logits row, with ggml_argmax's index.
#include "ggml.h"
#include "kernels/row_matmul.h"

namespace ggspec {

bool row_argmax_usable();  // this CPU runs the op and its probe at first use passed

// logits F32 [n_vocab, n] contiguous -> I32 [n]. On the kernel paths a custom
// op that splits the rows between threads and vectorizes each; else (and on
// path off, or where the probe failed) ggml_argmax, which runs on one thread with a scalar loop.
ggml_tensor * row_argmax(ggml_context * ctx, ggml_tensor * logits, RowKernels path);

}  // namespace ggspec
