#pragma once
// The multi-row product for the 256-value superblock types (Q2_K..Q6_K, IQ2_XXS,
// IQ2_XS, IQ3_XXS, IQ3_S, IQ4_XS) with Q8_K activations, each output with the
// bits of ggml's one-row x86 vec_dot (ggml_vec_dot_*_q8_K, AVX2 path). Those
// dots form, per block, eight exact integer lanes (lane k: the values 4k..4k+3
// of every 32-value chunk, times their sub-block scale, summed over the chunks;
// Q6_K then subtracts 32 x its scales times the activation sums of chunk k),
// convert them to float, and add them into 8 float lanes with one FMA each by
// d = d_a * d_w; the result is ggml's hsum_float_8 of the lanes plus the min
// term (Q4_K: 4 lanes of FMAs, summed pairwise; Q5_K: one float; Q2_K: its mins
// go into the same 8 lanes, one FMA before the block's), times a constant for
// the grid-coded IQ types. Integers are exact however they are computed, so
// this kernel decodes each weight row once into scale-multiplied 16-bit values
// and reuses them across activation rows with AVX512-VNNI's vpdpwssd (or AVX2's
// vpmaddwd), while every float step keeps ggml's order.
#include <cstdint>

#include "ggml.h"
#include "kernels/dot_rows.h"

namespace ggspec {

// The weight types this kernel decodes.
inline bool k_dot_rows_handles(ggml_type t) {
    switch (t) {
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S:
        case GGML_TYPE_IQ4_XS: return true;
        default: return false;
    }
}

// Weight rows [w_begin, w_end) of job (n_blocks: blocks of 256; Q8_K activations)
// against every activation row, on the AVX512-VNNI path or the AVX2 one (x86
// builds only: elsewhere row_kernels_cpu() keeps every path but off).
void k_dot_rows(const DotRowsJob & job, int64_t w_begin, int64_t w_end, bool vnni);

}  // namespace ggspec
