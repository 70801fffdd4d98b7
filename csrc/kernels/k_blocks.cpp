#include "kernels/k_blocks.h"

#if GGSPEC_X86_KERNEL

#include <cstring>

namespace ggspec {
namespace k_blocks {

bool unsigned_quants(ggml_type t) {
    return t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

namespace {

// Chunk c's 32 quants (signed bytes; in byte form unsigned) and their scales
// (the first 16 values' scale_lo, the rest's scale_hi), in the block's form.
GGSPEC_AVX2 void put_chunk(WeightBlock & out, int c, __m256i quants, int16_t scale_lo, int16_t scale_hi) {
    if (out.form == BlockForm::block_order) {
        _mm256_store_si256((__m256i *) (out.bytes.q + 32 * c), quants);
        out.bytes.scale16[2 * c] = scale_lo, out.bytes.scale16[2 * c + 1] = scale_hi;
        return;
    }
    if (out.form == BlockForm::bytes) {
        _mm256_store_si256((__m256i *) (out.bytes.q + 32 * c), quants);
        _mm256_store_si256((__m256i *) out.bytes.scales[c],
                           _mm256_set_m128i(_mm_set1_epi16(scale_hi), _mm_set1_epi16(scale_lo)));
        return;
    }
    const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(quants));
    const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(quants, 1));
    _mm256_store_si256((__m256i *) (out.w + 32 * c), _mm256_mullo_epi16(lo, _mm256_set1_epi16(scale_lo)));
    _mm256_store_si256((__m256i *) (out.w + 32 * c + 16), _mm256_mullo_epi16(hi, _mm256_set1_epi16(scale_hi)));
}

// Block layouts (ggml-common.h): q2_K {scales[16], qs[64], d, dmin}, q3_K
// {hmask[32], qs[64], scales[12], d}, q4_K {d, dmin, scales[12], qs[128]}, q5_K
// {d, dmin, scales[12], qh[32], qs[128]}, q6_K {ql[128], qh[64], scales[16], d},
// iq4_xs {d, scales_h (u16), scales_l[4], qs[128]}. Chunk c of a block holds
// values 32c..32c+31, which meet the activation values at the same places.
GGSPEC_AVX2 void decode_q2_k(const uint8_t * block, WeightBlock & out) {
    const uint8_t * scales = block;  // low nibble: scale, high nibble: min, per 16 values
    out.d = _cvtsh_ss(load_u16(block + 80));
    out.dmin = _cvtsh_ss(load_u16(block + 82));
    for (int i = 0; i < 16; ++i) out.sub16[i] = scales[i] >> 4;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int j = 0; j < 2; ++j) {  // 32 bytes: bits 2i..2i+1 of each are chunk 4j + i
        const __m256i bits = _mm256_loadu_si256((const __m256i *) (block + 16 + 32 * j));
        for (int i = 0; i < 4; ++i) {
            const int c = 4 * j + i;
            put_chunk(out, c, _mm256_and_si256(_mm256_srli_epi16(bits, 2 * i), m3), scales[2 * c] & 15,
                      scales[2 * c + 1] & 15);
        }
    }
}

GGSPEC_AVX2 void decode_q3_k(const uint8_t * block, WeightBlock & out) {
    out.d = _cvtsh_ss(load_u16(block + 108));
    uint32_t aux[3];  // 16 six-bit scales, offset by 32, as ggml unpacks them
    std::memcpy(aux, block + 96, 12);
    constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    const uint32_t packed[4] = {(aux[0] & kmask2) | (((aux[2] >> 0) & kmask1) << 4),
                                (aux[1] & kmask2) | (((aux[2] >> 2) & kmask1) << 4),
                                ((aux[0] >> 4) & kmask2) | (((aux[2] >> 4) & kmask1) << 4),
                                ((aux[1] >> 4) & kmask2) | (((aux[2] >> 6) & kmask1) << 4)};
    uint8_t scales[16];
    std::memcpy(scales, packed, 16);
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    const __m256i hmask = _mm256_loadu_si256((const __m256i *) block);
    for (int j = 0; j < 2; ++j) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *) (block + 32 + 32 * j));
        for (int i = 0; i < 4; ++i) {  // value = low 2 bits + 4 * (bit c of hmask) - 4
            const int c = 4 * j + i;
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * i), m3);
            const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, c), one);
            const __m256i q = _mm256_sub_epi8(_mm256_add_epi8(low, _mm256_slli_epi16(high, 2)), four);
            put_chunk(out, c, q, (int8_t) (scales[2 * c] - 32), (int8_t) (scales[2 * c + 1] - 32));
        }
    }
}

// Q4_K and Q5_K: 6-bit scales and mins per 32 values.
template <bool Q5>
GGSPEC_AVX2 void decode_q45_k(const uint8_t * block, WeightBlock & out) {
    uint32_t words[4];
    uint8_t scales[8], mins[8];
    out.d = _cvtsh_ss(load_u16(block));
    out.dmin = _cvtsh_ss(load_u16(block + 2));
    unpack_scales_mins(block + 4, words);
    std::memcpy(scales, words, 8);
    std::memcpy(mins, words + 2, 8);
    for (int i = 0; i < 8; ++i) out.mins[i] = mins[i];
    __m256i quants[kChunks];
    q45_k_quants<Q5>(block, quants);
    for (int c = 0; c < kChunks; ++c) put_chunk(out, c, quants[c], scales[c], scales[c]);
}

GGSPEC_AVX2 void decode_q6_k(const uint8_t * block, WeightBlock & out) {
    const int8_t * scales = (const int8_t *) (block + 192);
    out.d = _cvtsh_ss(load_u16(block + 208));
    for (int i = 0; i < 16; ++i) out.sub16[i] = scales[i];
    __m256i quants[kChunks];
    q6_k_quants(block, quants);
    for (int c = 0; c < kChunks; ++c) put_chunk(out, c, quants[c], scales[2 * c], scales[2 * c + 1]);
}

GGSPEC_AVX2 void decode_iq4_xs(const uint8_t * block, WeightBlock & out) {
    out.d = _cvtsh_ss(load_u16(block));
    const uint16_t scales_h = load_u16(block + 2);
    const __m128i values = _mm_loadu_si128((const __m128i *) iq4_values());
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int c = 0; c < 8; ++c) {  // 16 bytes a chunk: low nibbles are values 0..15, high ones 16..31
        const int scale = (((block[4 + c / 2] >> (4 * (c % 2))) & 15) | (((scales_h >> (2 * c)) & 3) << 4)) - 32;
        const __m128i bits = _mm_loadu_si128((const __m128i *) (block + 8 + 16 * c));
        const __m256i q = _mm256_set_m128i(_mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(bits, 4), m4)),
                                           _mm_shuffle_epi8(values, _mm_and_si128(bits, m4)));
        put_chunk(out, c, q, (int16_t) scale, (int16_t) scale);
    }
}

}  // namespace

GridCode grid_code(ggml_type type) {
    switch (type) {
        case GGML_TYPE_IQ2_XXS:
        case GGML_TYPE_IQ2_XS: return {8.0f, 0.125f};
        case GGML_TYPE_IQ3_XXS: return {4.0f, 0.25f};
        default: return {1.0f, 1.0f};  // IQ3_S
    }
}

bool grid_coded(ggml_type type) {
    return type == GGML_TYPE_IQ2_XXS || type == GGML_TYPE_IQ2_XS || type == GGML_TYPE_IQ3_XXS ||
           type == GGML_TYPE_IQ3_S;
}

namespace {

// The integers, from ggml's own dequantizer with d (the first two bytes of
// every one of these blocks) set to 1: exact, all small multiples of 2^-3.
GGSPEC_AVX2 void decode_grid(ggml_type type, const uint8_t * block, WeightBlock & out) {
    const size_t bytes = ggml_type_size(type);
    uint8_t unit_d[128];
    std::memcpy(unit_d, block, bytes);
    unit_d[0] = 0x00, unit_d[1] = 0x3C;  // 1.0 in F16
    float values[kQK];
    ggml_get_type_traits(type)->to_float(unit_d, values, kQK);
    const float unit = grid_code(type).unit;
    for (int i = 0; i < kQK; ++i) out.w[i] = (int16_t) (values[i] * unit);
    out.d = _cvtsh_ss(load_u16(block));
}

GGSPEC_AVX2 void decode_block(ggml_type type, const uint8_t * block, WeightBlock & out) {
    if (grid_coded(type)) return decode_grid(type, block, out);
    switch (type) {
        case GGML_TYPE_Q2_K: return decode_q2_k(block, out);
        case GGML_TYPE_Q3_K: return decode_q3_k(block, out);
        case GGML_TYPE_Q4_K: return decode_q45_k<false>(block, out);
        case GGML_TYPE_Q5_K: return decode_q45_k<true>(block, out);
        case GGML_TYPE_Q6_K: return decode_q6_k(block, out);
        default: return decode_iq4_xs(block, out);
    }
}

}  // namespace

GGSPEC_AVX2 void decode_row(ggml_type type, const uint8_t * row, int64_t n_blocks, BlockForm form, WeightBlock * out) {
    const size_t block_bytes = ggml_type_size(type);
    for (int64_t b = 0; b < n_blocks; ++b) {
        out[b].form = form;
        decode_block(type, row + b * block_bytes, out[b]);
    }
}

}  // namespace k_blocks
}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
