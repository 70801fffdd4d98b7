#pragma once
// The multi-row product for F16 and BF16 weights with activations of the same
// type (their vec_dot_type), each output with the bits of ggml's one-row x86
// vec_dot (ggml_vec_dot_f16 / ggml_vec_dot_bf16, AVX2 path). Both dots run 32
// values a step into four 8-lane FMA accumulators (accumulator j takes values
// 8j..8j+7 of every step), add them as (a0 + a2) + (a1 + a3), sum the 8 lanes
// in a fixed order (F16: low half + high half, then two hadds; BF16: ggml's
// hsum_float_8 order), and add the last n % 32 products one by one in double.
// This kernel converts each weight and activation row to float once and runs
// each accumulator's FMAs for a tile of weight rows and activation rows at a
// time: every output's chain of FMAs stays the same, so the bits do. With
// AVX-512 one 16-lane FMA runs two activation rows' 8-lane accumulators.
#include <cstdint>

#include "ggml.h"
#include "kernels/dot_rows.h"

namespace ggspec {

inline bool half_dot_rows_handles(ggml_type t) { return t == GGML_TYPE_F16 || t == GGML_TYPE_BF16; }

// Weight rows [w_begin, w_end) of job (n_blocks: the row length, blocks of one
// value) against every activation row (x86 builds only); avx512: the CPU runs
// AVX512F (the vnni path).
void half_dot_rows(const DotRowsJob & job, int64_t w_begin, int64_t w_end, bool avx512);

}  // namespace ggspec
