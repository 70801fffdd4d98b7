#include "kernels/k_block_order.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace ggspec {

namespace {

constexpr int kQK = 256;

// The block's dot with y when its d and dmin (F16, at d_at and d_at + 2) are
// set to d and dmin: ggml's dequantizer then gives exact small integers.
int32_t integer_dot(ggml_type type, const uint8_t * block, size_t d_at, float d, float dmin, const int8_t * y,
                    std::vector<uint8_t> & unit) {
    std::memcpy(unit.data(), block, unit.size());
    const ggml_fp16_t hd = ggml_fp32_to_fp16(d), hmin = ggml_fp32_to_fp16(dmin);
    std::memcpy(unit.data() + d_at, &hd, 2);
    if (type != GGML_TYPE_Q6_K) std::memcpy(unit.data() + d_at + 2, &hmin, 2);
    float values[kQK];
    ggml_get_type_traits(type)->to_float(unit.data(), values, kQK);
    int32_t dot = 0;
    for (int i = 0; i < kQK; ++i) dot += (int32_t) values[i] * y[i];
    return dot;
}

}  // namespace

float k_block_order_dot(ggml_type weight_type, const uint8_t * weights, const uint8_t * acts, int64_t n_blocks) {
    const bool mins = weight_type != GGML_TYPE_Q6_K;
    const size_t weight_bytes = ggml_type_size(weight_type), d_at = mins ? 0 : 208;  // Q6_K: d after ql, qh, scales
    std::vector<uint8_t> unit(weight_bytes);
    float acc = 0.0f, min_acc = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t * w = weights + b * weight_bytes;
        const uint8_t * a = acts + b * kQ8KBytes;
        float d_a;
        std::memcpy(&d_a, a, 4);
        const auto * y = (const int8_t *) (a + 4);
        ggml_fp16_t d_w;
        std::memcpy(&d_w, w + d_at, 2);
        // d = 1, dmin = 0: each value is its scale times its quant (Q6_K: less 32)
        const int32_t s1 = integer_dot(weight_type, w, d_at, 1.0f, 0.0f, y, unit);
        acc = std::fma(d_a * ggml_fp16_to_fp32(d_w), (float) s1, acc);
        if (mins) {  // d = 0, dmin = 1: each value is minus its sub-block's min
            const int32_t s2 = -integer_dot(weight_type, w, d_at, 0.0f, 1.0f, y, unit);
            ggml_fp16_t dmin_w;
            std::memcpy(&dmin_w, w + 2, 2);
            min_acc = std::fma(d_a * ggml_fp16_to_fp32(dmin_w), (float) s2, min_acc);
        }
    }
    return mins ? acc - min_acc : acc;
}

}  // namespace ggspec
