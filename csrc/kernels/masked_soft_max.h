#pragma once
// Attention's softmax(kq * scale + mask), row by row, with ggml_soft_max_ext's
// bits, computed only over the keys each row's mask leaves.
#include "ggml.h"
#include "kernels/row_matmul.h"

namespace ggspec {

// kq [n_kv, n, heads] F32, mask [n_kv, n] F32 (0 or -inf, shared by the heads).
// On the kernel paths, where a probe at first use found it bit-identical, a
// custom op; else (and on path off) ggml_soft_max_ext itself.
bool masked_soft_max_usable();  // this CPU runs the op and its probe passed

ggml_tensor * masked_soft_max(ggml_context * ctx, ggml_tensor * kq, ggml_tensor * mask, float scale, RowKernels path);

}  // namespace ggspec
