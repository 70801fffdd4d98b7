#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/q8_dot_rows.h"

namespace ggspec {

float q8_block_order_dot(ggml_type weight_type, const uint8_t * weights, const uint8_t * acts, int64_t n_blocks) {
    const bool min = q8_has_min(weight_type);
    const size_t weight_bytes = ggml_type_size(weight_type), act_bytes = min ? 36 : 34;
    const ggml_to_float_t to_float = ggml_get_type_traits(weight_type)->to_float;
    std::vector<uint8_t> unit(weight_bytes);  // a block with d = 1 and m = 0: its integer values
    float values[kQ8Block];
    const ggml_fp16_t one = ggml_fp32_to_fp16(1.0f), zero = ggml_fp32_to_fp16(0.0f);
    float acc = 0.0f, mins = 0.0f;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t * w = weights + b * weight_bytes;
        const uint8_t * a = acts + b * act_bytes;
        std::memcpy(unit.data(), w, weight_bytes);
        std::memcpy(unit.data(), &one, 2);
        if (min) std::memcpy(unit.data() + 2, &zero, 2);
        to_float(unit.data(), values, kQ8Block);
        const int8_t * y = (const int8_t *) (a + (min ? 4 : 2));
        int32_t dot = 0;
        for (int j = 0; j < kQ8Block; ++j) dot += (int32_t) values[j] * y[j];
        ggml_fp16_t dw, da;
        std::memcpy(&dw, w, 2);
        std::memcpy(&da, a, 2);
        acc = std::fma(ggml_fp16_to_fp32(dw) * ggml_fp16_to_fp32(da), (float) dot, acc);
        if (min) {
            ggml_fp16_t mw, sa;
            std::memcpy(&mw, w + 2, 2);
            std::memcpy(&sa, a + 2, 2);
            mins = std::fma(ggml_fp16_to_fp32(mw), ggml_fp16_to_fp32(sa), mins);
        }
    }
    return min ? acc + mins : acc;
}

}  // namespace ggspec
