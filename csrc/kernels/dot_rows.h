#pragma once
// What every multi-row kernel shares: the job (quantized weight rows against
// activation rows in the weights' vec_dot_type, each output equal to ggml's
// vec_dot), ggml's float helpers, and the loop over activation chunks and
// weight tiles.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ggml.h"

namespace ggspec {

struct DotRowsJob {
    ggml_type weight_type;
    const void * weights;  // rows row_bytes apart
    size_t row_bytes;
    const void * acts;     // rows in the weights' vec_dot_type, as ggml quantizes them, act_bytes apart
    size_t act_bytes;
    int64_t n_blocks;      // quant blocks per row (of 32 values, or 256 for the K-quants)
    int64_t n_acts;
    float * dst;           // dst[a * dst_stride + w]
    int64_t dst_stride;
};

constexpr int64_t kActChunk = 64;  // activation rows prepared at a time, so that they stay in L2

inline uint16_t load_u16(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// ggml's hsum_float_8 over 8 lanes, in its order.
inline float hsum8(const float * l) {
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    return (a0 + a2) + (a1 + a3);
}

// Weight rows [w_begin, w_end) against every activation row: activation rows in
// chunks of kActChunk, each prepared once (kernel.prepare(a0, a_end)); weight
// rows in tiles of TileW, each row decoded once into a tile slot
// (kernel.decode(w, slot)); then kernel.run<TileW>(w0, 0, a0, a_end) for a full
// tile, or kernel.run<1>(w, slot, a0, a_end) for each row of a partial one.
template <int TileW, class Kernel>
void run_tiles(Kernel & kernel, const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    for (int64_t a0 = 0; a0 < job.n_acts; a0 += kActChunk) {
        const int64_t a_end = std::min(job.n_acts, a0 + kActChunk);
        kernel.prepare(a0, a_end);
        for (int64_t w = w_begin; w < w_end; w += TileW) {
            const int64_t n_w = std::min<int64_t>(TileW, w_end - w);
            for (int64_t i = 0; i < n_w; ++i) kernel.decode(w + i, i);
            if (n_w == TileW) {
                kernel.template run<TileW>(w, 0, a0, a_end);
            } else {
                for (int64_t i = 0; i < n_w; ++i) kernel.template run<1>(w + i, i, a0, a_end);
            }
        }
    }
}

}  // namespace ggspec
