#pragma once
// GeGLU's gelu(gate) * up with ggml_geglu_split's bits, eight values at a time.
#include "ggml.h"
#include "kernels/row_matmul.h"

namespace ggspec {

bool geglu_usable();  // this CPU runs the op and its probe at first use passed

// gate, up F32 [n, rows] contiguous -> F32 [n, rows]. On the kernel paths a
// custom op that splits the values between threads and looks up eight of
// ggml's tabled GELU values at once; else (on path off, or where the probe
// failed) ggml_geglu_split, one value at a time and whole rows per thread (a
// decode step's single row on one thread).
ggml_tensor * geglu(ggml_context * ctx, ggml_tensor * gate, ggml_tensor * up, RowKernels path);

}  // namespace ggspec
