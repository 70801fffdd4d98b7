#pragma once
// One activation row (a decode step) against many weight rows: ggml's own
// vec_dot per row, so every output has vec_dot's bits by construction, with
// the weight stream fetched ahead in software. vec_dot alone leaves the core
// with too few weight lines in flight: a decode step's products run at about
// half the bandwidth a plain read of the same bytes gets (Gemma 3's Q8_0 LM
// head, 178 MB on 2 threads: 12.7 ms, against 7 ms for the read).
// Rows of halves are not fetched ahead: the hardware prefetcher keeps up there.
#include "kernels/dot_rows.h"

namespace ggspec {

// Weight rows [w_begin, w_end) against the job's single activation row.
void one_row_dot(const DotRowsJob & job, int64_t w_begin, int64_t w_end);

}  // namespace ggspec
