// ggml_mul_mat, or ggspec's own multi-row CPU kernel where that kernel gives the
// same bits (see q8_dot_rows.h) and is faster: for a verify's many rows through a
// quantized matrix.
#pragma once
#include "ggml.h"

namespace ggspec {

// The rows of x from which the multi-row kernel beats ggml's one-dot-at-a-time
// path; below it the two give the same bits anyway.
constexpr int64_t kRowKernelMinRows = 2;

// Whether this process can use the kernel for weights of this type: the CPU runs
// it, and a probe at first use found it bit-identical to ggml's vec_dot.
bool row_kernel_usable(ggml_type weight_type);

// w [k, n] (weights in host memory), x [k, rows] F32 -> [n, rows] F32, equal bit
// for bit to ggml_mul_mat(ctx, w, x). Uses the kernel when allowed and usable.
ggml_tensor * row_mul_mat(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, bool allow_kernel);

}  // namespace ggspec
