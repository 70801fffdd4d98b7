#include "kernels/one_row_dot.h"

#include <cmath>

namespace ggspec {
namespace {

// How far ahead of the row being multiplied the weight lines are requested:
// 4-8 KB gave the most on Gemma 3's LM head (2 KB 8.2 ms, 4 KB 8.1, 8 KB 7.8,
// none 12.7), beyond the hardware prefetcher's reach.
constexpr size_t kFetchAhead = 6144;
constexpr size_t kLine = 64;

}  // namespace

void one_row_dot(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    const ggml_vec_dot_t vec_dot = ggml_get_type_traits_cpu(job.weight_type)->vec_dot;
    const int k = (int) (job.n_blocks * ggml_blck_size(job.weight_type));
    const ActRows act = quantize_acts(job, 0, 1);
    const uint8_t * weights = (const uint8_t *) job.weights;
    const uintptr_t stream_end = (uintptr_t) (weights + w_end * job.row_bytes);
    uintptr_t fetched = (uintptr_t) (weights + w_begin * job.row_bytes) & ~(uintptr_t) (kLine - 1);
    for (int64_t w = w_begin; w < w_end; ++w) {
        const uint8_t * row = weights + w * job.row_bytes;
        const uintptr_t wanted = std::min(stream_end, (uintptr_t) (row + job.row_bytes) + kFetchAhead);
        for (; fetched < wanted; fetched += kLine) __builtin_prefetch((const void *) fetched);
        if (job.mask && job.mask[w] == -INFINITY) {
            job.dst[w] = 0.0f;  // the softmax's mask makes it -inf whatever it is
            continue;
        }
        vec_dot(k, job.dst + w, 0, row, 0, act.row(0), 0, 1);
    }
}

}  // namespace ggspec
