#pragma once
// The transposed V cache's write: row r of src becomes column idx[r] of dst,
// converted to dst's type with ggml_set_rows' bits.
#include "ggml.h"
#include "kernels/row_matmul.h"

namespace ggspec {

// dst [n_slots, d] (F16, BF16 or F32), src F32 [d, n] contiguous, idx I64 [n].
// Returns dst as written, for the graph's order. On the kernel paths a custom
// op that converts each row once and writes each dst row from one thread;
// else (and on path off) ggml_set_rows over one-element rows, whose threads
// share cache lines and which pays its index arithmetic per element.
ggml_tensor * set_columns(ggml_context * ctx, ggml_tensor * dst, ggml_tensor * src, ggml_tensor * idx,
                          ggml_tensor * element_idx, RowKernels path);

}  // namespace ggspec
