#pragma once
// RMS norm times its weight, ggml_mul(ggml_rms_norm(x, eps), weight), with
// ggml's bits and several rows' sums of squares at once.
#include "ggml.h"
#include "kernels/row_matmul.h"

namespace ggspec {

bool rms_norm_usable();  // this CPU runs the op and its probe at first use passed

// x F32 with contiguous values (its rows at any strides), weight F32 [x->ne[0]]
// contiguous. On the kernel paths a custom op, each thread a contiguous share
// of the rows; else (on path off, other shapes, or where the probe failed)
// ggml's norm and mul, whose norm deals rows one at a time and sums each
// row's squares alone.
ggml_tensor * rms_norm_mul(ggml_context * ctx, ggml_tensor * x, ggml_tensor * weight, float eps, RowKernels path);

}  // namespace ggspec
