#pragma once
// The block order (path vnni-block) for Q4_K, Q5_K and Q6_K against Q8_K
// activations: per 256-value block two exact integers,
//   S1 = sum over sub-blocks of scale x (the quants . the activations)
//        (Q6_K: its quants less 32, whose 32 goes through the activations' sums of 16),
//   S2 = sum over sub-blocks of min x (the activations' sum over the sub-block) (Q4_K, Q5_K),
// then acc = fma(d_a * d_w, S1, acc) and mins = fma(d_a * dmin_w, S2, mins),
// and the output acc - mins (Q6_K: acc). ggml's vec_dot keeps 8 lanes of
// partial sums, each converted and added by its own FMA; here a block's
// integers are whole before their one FMA, so a kernel may form them in any
// order and put a row in each lane. The sums differ from ggml's in the last
// bits, like the 32-value block order (q8_dot_rows.h).
#include <cstdint>

#include "ggml.h"
#include "kernels/dot_rows.h"

namespace ggspec {

constexpr size_t kQ8KBytes = 292;  // q8_K {d (f32), qs[256], bsums[16] (i16)}

inline bool k_block_order_handles(ggml_type t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

// The block order's dot of one weight row and one Q8_K activation row, in
// portable scalar code from ggml's own dequantizer: what k_block_order_vnni is
// probed against.
float k_block_order_dot(ggml_type weight_type, const uint8_t * weights, const uint8_t * acts, int64_t n_blocks);

// Weight rows [w_begin, w_end) of job against every activation row, in the
// block order on AVX512-VNNI (x86 builds only, like the other kernels).
void k_block_order_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end);

}  // namespace ggspec
