#pragma once
// A multi-row product of quantized weights with Q8_0/Q8_1 activations whose
// every output has the same bits as ggml's one-row x86 vec_dot for that weight
// type (ggml_vec_dot_{q8_0,q5_0,q4_0}_q8_0 and ggml_vec_dot_q4_1_q8_1, AVX2 path).
// Those dots share one float recipe: per block of 32, the exact integer dot of
// each 4-value group into 8 lanes, d = d_w * d_a, one FMA per lane, then ggml's
// hsum_float_8 (Q4_1 adds its min terms, summed block by block). Integers are
// exact whatever instructions compute them, so this kernel may decode a weight
// block once and reuse it across many activation rows (AVX512-VNNI), which a
// one-dot-at-a-time vec_dot cannot; the float steps keep ggml's order, so the
// result is batch-invariant and equal to ggml_mul_mat.
#include <cstddef>
#include <cstdint>

#include "ggml.h"

namespace ggspec {

struct Q8DotRows {
    ggml_type weight_type;  // GGML_TYPE_Q8_0, Q5_0, Q4_0 or Q4_1
    const void * weights;   // rows row_bytes apart
    size_t row_bytes;
    const void * acts;      // Q8_0 rows (Q8_1 for Q4_1), ggml's own quantization, act_bytes apart
    size_t act_bytes;
    int64_t n_blocks;       // blocks of 32 per row
    int64_t n_acts;
    float * dst;            // dst[a * dst_stride + w]
    int64_t dst_stride;
};

// The weight types the kernel decodes.
bool q8_dot_rows_handles(ggml_type weight_type);

// True when this CPU runs the kernel (AVX512F/BW/VL/VNNI, F16C).
bool q8_dot_rows_supported();

// Weight rows [w_begin, w_end) against every activation row.
void q8_dot_rows(const Q8DotRows & job, int64_t w_begin, int64_t w_end);

}  // namespace ggspec
