#include "kernels/one_row_dot.h"

#include "kernels/half_dot_rows.h"

#include <cmath>

namespace ggspec {

namespace {

constexpr size_t kFetchAheadRowLimit = 2048;  // bytes

}  // namespace

void one_row_dot(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    const ggml_vec_dot_t vec_dot = ggml_get_type_traits_cpu(job.weight_type)->vec_dot;
    const int k = (int) (job.n_blocks * ggml_blck_size(job.weight_type));
    const ActRows act = quantize_acts(job, 0, 1);
    const uint8_t * weights = (const uint8_t *) job.weights;
    // Halves and wide rows stream fine on the hardware prefetcher alone: fetching
    // them ahead cost a decode step 10-15% (F16 rows of a 16-layer qwen35; the
    // Q8_0 rows of 4-8.5 KB in bench.gemma4's random-weight gemma4; 2 threads,
    // paired runs), where Q8_0 rows of 1.1 KB there and every row of Gemma 3
    // and SmolLM2 (at most 1.7 KB) gain from it.
    const bool fetch_ahead = !half_dot_rows_handles(job.weight_type) && job.row_bytes <= kFetchAheadRowLimit;
    WeightStream stream;
    stream.start(weights + w_begin * job.row_bytes, weights + w_end * job.row_bytes);
    for (int64_t w = w_begin; w < w_end; ++w) {
        const uint8_t * row = weights + w * job.row_bytes;
        if (fetch_ahead) {
            stream.next_tile(row + job.row_bytes, 1);
            stream.fetch(0);
        }
        if (job.mask && job.mask[w] == -INFINITY) {
            job.dst[w] = 0.0f;  // the softmax's mask makes it -inf whatever it is
            continue;
        }
        vec_dot(k, job.dst + w, 0, row, 0, act.row(0), 0, 1);
    }
}

}  // namespace ggspec
