#include "kernels/quantize_q8_k.h"

#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

#include <cstring>

namespace ggspec {
namespace {

constexpr int kQK = 256;
constexpr int kBlockBytes = 4 + kQK + 2 * (kQK / 16);  // d (f32), qs, bsums (i16)

}  // namespace

GGSPEC_AVX2 void quantize_q8_k(const float * x, void * out, int64_t k) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < k / kQK; ++i, x += kQK) {
        uint8_t * block = (uint8_t *) out + i * kBlockBytes;
        __m256 amax = _mm256_setzero_ps();
        for (int j = 0; j < kQK; j += 8) {  // a NaN never wins: max_ps returns its second operand
            amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), magnitude), amax);
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, amax);
        float top = 0.0f;
        for (float l : lanes) top = l > top ? l : top;
        if (top == 0.0f) {  // ggml leaves bsums as they were; they only ever meet d = 0
            std::memset(block, 0, kBlockBytes);
            continue;
        }
        int first = 0;  // the first value of that magnitude, as ggml's strict > keeps it
        while (!(__builtin_fabsf(x[first]) == top)) ++first;
        const float iscale = -127.f / x[first];
        const __m256 scale = _mm256_set1_ps(iscale), round = _mm256_set1_ps(12582912.f);
        int8_t * qs = (int8_t *) (block + 4);
        for (int j = 0; j < kQK; j += 16) {
            __m256i v[2];
            for (int h = 0; h < 2; ++h) {
                const __m256 t = _mm256_add_ps(_mm256_mul_ps(scale, _mm256_loadu_ps(x + j + 8 * h)), round);
                const __m256i bits = _mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x007fffff));
                v[h] = _mm256_min_epi32(_mm256_sub_epi32(bits, _mm256_set1_epi32(0x00400000)), _mm256_set1_epi32(127));
            }
            const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xD8);
            const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
            _mm_storeu_si128((__m128i *) (qs + j), bytes);
            int16_t sum = 0;
            for (int b = 0; b < 16; ++b) sum = (int16_t) (sum + qs[j + b]);
            std::memcpy(block + 4 + kQK + 2 * (j / 16), &sum, 2);
        }
        const float d = 1 / iscale;
        std::memcpy(block, &d, 4);
    }
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
