#pragma once
// A multi-row product of quantized weights with Q8_0/Q8_1 activations whose
// every output has the same bits as ggml's one-row x86 vec_dot for that weight
// type (ggml_vec_dot_{q8_0,q5_0,q4_0,iq4_nl}_q8_0 and ggml_vec_dot_q{4,5}_1_q8_1, AVX2 path).
// Those dots share one float recipe: per block of 32, the exact integer dot of
// each 4-value group into 8 lanes, d = d_w * d_a, one FMA per lane, then ggml's
// hsum_float_8 (Q4_1 and Q5_1 add their min terms, summed block by block). Integers are
// exact whatever instructions compute them, so these kernels may decode a
// weight block once and reuse it across many activation rows, which a
// one-dot-at-a-time vec_dot cannot; the float steps keep ggml's order, so the
// result is batch-invariant and equal to ggml_mul_mat.
#include "kernels/dot_rows.h"

namespace ggspec {

constexpr int kQ8Block = 32;  // values per block, for every handled type

// The weight types these kernels decode.
inline bool q8_dot_rows_handles(ggml_type t) {
    return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 ||
           t == GGML_TYPE_Q5_1 || t == GGML_TYPE_IQ4_NL;
}

// IQ4_NL's dot takes its blocks in pairs, the first of each pair into one set
// of lanes and the second into another, adds the two lane by lane before the
// final sum, and adds a last unpaired block after it with one scalar FMA. The
// kernels run the first blocks and then the second ones through the same
// accumulators: each set's FMAs keep their order.
constexpr bool q8_blocks_paired(ggml_type t) { return t == GGML_TYPE_IQ4_NL; }

// Q4_1 and Q5_1 pair with Q8_1 activations, whose sums s meet their mins m.
constexpr bool q8_has_min(ggml_type t) { return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1; }

// Weight rows [w_begin, w_end) against every activation row: on AVX512-VNNI
// (dpbusd on weights as unsigned bytes, decoded once for a prefill chunk's
// activation rows or in registers for a verify's), or on AVX2 (ggml's sign
// trick on weights decoded once). x86 builds only: elsewhere row_kernels_cpu()
// keeps every path but off.
void q8_dot_rows_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end);
void q8_dot_rows_avx2(const DotRowsJob & job, int64_t w_begin, int64_t w_end);

}  // namespace ggspec
