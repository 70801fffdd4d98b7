#pragma once
// Multi-row products of quantized weights with Q8_0/Q8_1 activations, for the
// 32-value block types. The integer part of a dot is exact whatever
// instructions compute it, so these kernels decode a weight block once and
// reuse it across many activation rows; the float steps keep one fixed order
// at every row count, so that a verify's or a prefill chunk's rows get a
// decode step's bits. Two orders:
//
// vec_dot's (paths avx2 and vnni): ggml's one-row x86 vec_dot for the type
// (ggml_vec_dot_{q8_0,q5_0,q4_0,iq4_nl}_q8_0 and ggml_vec_dot_q{4,5}_1_q8_1,
// AVX2 path), bit for bit, so equal to ggml_mul_mat and to llama.cpp: per
// block, the exact integer dot of each 4-value group into 8 lanes, d = d_w *
// d_a, one FMA per lane, then ggml's hsum_float_8 (Q4_1 and Q5_1 add their min
// terms, summed block by block).
//
// The block order (path vnni-block), q8_block_order_dot below: per block the
// exact integer dot of all 32 values, acc = fma(d_w * d_a, dot, acc), and for
// Q4_1 and Q5_1 mins = fma(m_w, s_a, mins), acc + mins last. One FMA per block
// where vec_dot's order takes a cvt and an FMA per lane, on the pipes dpbusd
// runs on. Its sums are the more exact, but they differ from ggml's in the
// last bits, and a quantized activation that rounds the other way carries the
// difference on: outputs are not llama.cpp's.
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
// kernels in vec_dot's order run the first blocks and then the second ones
// through the same accumulators: each set's FMAs keep their order.
constexpr bool q8_blocks_paired(ggml_type t) { return t == GGML_TYPE_IQ4_NL; }

// Q4_1 and Q5_1 pair with Q8_1 activations, whose sums s meet their mins m.
constexpr bool q8_has_min(ggml_type t) { return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1; }

// Weight rows [w_begin, w_end) against every activation row, in vec_dot's
// order: on AVX512-VNNI (dpbusd on weights as unsigned bytes, decoded once for
// a prefill chunk's activation rows or in registers for a verify's), or on AVX2
// (ggml's sign trick on weights decoded once); or in the block order on
// AVX512-VNNI, one activation row included. x86 builds only: elsewhere
// row_kernels_cpu() keeps every path but off.
void q8_dot_rows_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end);
void q8_dot_rows_avx2(const DotRowsJob & job, int64_t w_begin, int64_t w_end);
void q8_block_order_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end);

// The block order's dot of one weight row and one activation row (in Q8_0, or
// Q8_1 for Q4_1 and Q5_1), in portable scalar code: what q8_block_order_vnni
// is probed against.
float q8_block_order_dot(ggml_type weight_type, const uint8_t * weights, const uint8_t * acts, int64_t n_blocks);

}  // namespace ggspec
