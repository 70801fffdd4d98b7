#pragma once
// Attention's softmax(kq * scale + mask), row by row, with ggml_soft_max_ext's
// bits, computed only over the keys each row's mask leaves.
#include <cstdint>

#include "ggml.h"
#include "kernels/row_matmul.h"
#include "kernels/x86_target.h"

namespace ggspec {

// kq [n_kv, n, heads] F32, mask [n_kv, n] F32 (0 or -inf, shared by the heads).
// On the kernel paths, where a probe at first use found it bit-identical, a
// custom op; else (and on path off) ggml_soft_max_ext itself.
bool masked_soft_max_usable();  // this CPU runs the op and its probe passed

ggml_tensor * masked_soft_max(ggml_context * ctx, ggml_tensor * kq, ggml_tensor * mask, float scale, RowKernels path);

#if GGSPEC_X86_KERNEL
// One row of the op: y[0, n) = softmax(kq * scale + mask) with ggml_soft_max_ext's
// bits over a row of n keys, computed over the keys the mask leaves. A part of a
// longer row gives that row's values there when it starts at a multiple of 16
// and holds every key the mask leaves.
GGSPEC_AVX2 void soft_max_row(const float * kq, const float * mask, float * y, int64_t n, float scale);
#endif

}  // namespace ggspec
