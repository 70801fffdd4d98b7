#pragma once
// The 256-value superblock types (Q2_K..Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S,
// IQ4_XS) decoded once per weight row for the multi-row kernels: k_dot_rows
// (ggml's vec_dot order) and, for Q4_K, Q5_K and Q6_K, the block order.
#include <cstdint>
#include <cstring>

#include "ggml.h"
#include "kernels/dot_rows.h"
#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

namespace ggspec {
namespace k_blocks {

constexpr int kQK = 256;           // values per block
constexpr int kChunks = kQK / 32;  // 32-value chunks per block: one zmm of 16-bit values each

// How a block is decoded: each value times its sub-block scale as 16 bits
// (Q6_K: its unsigned quant 0..63, the -32 offset goes through sub16), for
// vpdpwssd or vpmaddwd; or, for the types whose quants are unsigned (Q2_K,
// Q4_K, Q5_K, Q6_K), the quants as bytes, with each chunk's scales beside them
// for the AVX2 path's vpmaddubsw and vpmaddwd (ggml's own two steps), or with
// one scale per 16 values for the block order.
enum class BlockForm : uint8_t { words, bytes, block_order };

// One weight row's block in its form, and what the float steps need.
struct alignas(64) WeightBlock {
    union {
        int16_t w[kQK];
        struct {
            uint8_t q[kQK];
            union {
                int16_t scales[kChunks][16];   // bytes: per 32-value chunk, lanes 0..7 scale values 0..15, 8..15 the rest
                int32_t scale16[2 * kChunks];  // block_order: the same, one per 16 values
            };
        } bytes;
    };
    int16_t sub16[16];  // Q6_K: the scales of its 16-value sub-blocks; Q2_K: their mins
    int16_t mins[8];    // Q4_K, Q5_K: the 8 sub-block mins
    float d;
    float dmin;
    BlockForm form;
};

// The types whose quants are unsigned bytes (Q2_K, Q4_K, Q5_K, Q6_K): those
// that decode to the byte form.
bool unsigned_quants(ggml_type t);

// IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S code their values through lattice grids.
// ggml's dot multiplies the grid values by their signs and by 2 ls + 1 (the
// sub-block scale) in integers, and the float sum by d and then by a constant;
// its dequantizer gives value x (2 ls + 1) x that constant, times d.
struct GridCode {
    float unit;    // 1 / the constant
    float factor;  // the constant, as ggml's dot applies it
};
GridCode grid_code(ggml_type type);
bool grid_coded(ggml_type type);

// The 6-bit scales and mins of Q4_K/Q5_K, unpacked as ggml's vec_dot unpacks
// them: the 8 scales in the bytes of words 0-1, the 8 mins in words 2-3.
inline void unpack_scales_mins(const uint8_t * packed, uint32_t (&words)[4]) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    std::memcpy(words, packed, 12);
    words[3] = ((words[2] >> 4) & kmask2) | (((words[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = words[1] & kmask1;
    words[1] = (words[2] & kmask2) | (((words[0] >> 6) & kmask3) << 4);
    words[2] = uaux;
    words[0] &= kmask1;
}

// Q4_K's (Q5 false) or Q5_K's 8 chunks of 32 quants as unsigned bytes, in
// order. The low nibbles of 32 bytes are chunk 2j, the high ones 2j + 1;
// Q5_K's bit 2j (2j + 1) of each qh byte is the fifth bit.
template <bool Q5>
__attribute__((always_inline)) GGSPEC_AVX2 inline void q45_k_quants(const uint8_t * block, __m256i (&quants)[kChunks]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const uint8_t * qs = block + (Q5 ? 48 : 16);
    const __m256i high = Q5 ? _mm256_loadu_si256((const __m256i *) (block + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *) (qs + 32 * j));
        __m256i lo = _mm256_and_si256(bits, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if constexpr (Q5) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * j), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * j + 1), one), 4));
        }
        quants[2 * j] = lo, quants[2 * j + 1] = hi;
    }
}

// Q6_K's 8 chunks of 32 quants (0..63, before its -32), in order. Chunk c's
// first 16 values take scale 2c, the rest 2c + 1.
__attribute__((always_inline)) GGSPEC_AVX2 inline void q6_k_quants(const uint8_t * block, __m256i (&quants)[kChunks]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
        const uint8_t * ql = block + 64 * half;
        const __m256i bits1 = _mm256_loadu_si256((const __m256i *) ql);
        const __m256i bits2 = _mm256_loadu_si256((const __m256i *) (ql + 32));
        const __m256i high = _mm256_loadu_si256((const __m256i *) (block + 128 + 32 * half));
        quants[4 * half] = _mm256_or_si256(_mm256_and_si256(bits1, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(high, m3), 4));
        quants[4 * half + 1] = _mm256_or_si256(_mm256_and_si256(bits2, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), m3), 4));
        quants[4 * half + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), m3), 4));
        quants[4 * half + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), m3), 4));
    }
}

// A row's n_blocks blocks of type `type` into out[0..n_blocks), in `form`.
GGSPEC_AVX2 void decode_row(ggml_type type, const uint8_t * row, int64_t n_blocks, BlockForm form, WeightBlock * out);

}  // namespace k_blocks
}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
