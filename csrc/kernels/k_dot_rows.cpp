#include "kernels/k_dot_rows.h"

#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

#include <algorithm>
#include <cstring>
#include <vector>

namespace ggspec {
namespace {

constexpr int kQK = 256;           // values per block
constexpr int kChunks = kQK / 32;  // 32-value chunks per block: one zmm of 16-bit values each
constexpr int kTileW = 4;          // weight rows accumulated at once
constexpr int kTileA = 2;          // activation rows: 4 x 2 integer accumulators (two ymm each on AVX2)

// One weight row's block, in one of two forms: each value times its sub-block
// scale as 16 bits (Q6_K: its unsigned quant 0..63, the -32 offset goes through
// sub16), for vpdpwssd or vpmaddwd; or, on the AVX2 path for the types whose
// quants are unsigned (Q2_K, Q4_K, Q5_K, Q6_K), the quants as bytes for
// vpmaddubsw and each chunk's scales beside them for the vpmaddwd that follows,
// ggml's own two steps. And what the float steps need.
struct alignas(64) WeightBlock {
    union {
        int16_t w[kQK];
        struct {
            uint8_t q[kQK];
            int16_t scales[kChunks][16];  // per 32-value chunk: lanes 0..7 scale values 0..15, 8..15 the rest
        } bytes;
    };
    int16_t sub16[16];  // Q6_K: the scales of its 16-value sub-blocks; Q2_K: their mins
    int16_t mins[8];    // Q4_K, Q5_K: the 8 sub-block mins
    float d;
    float dmin;
    bool as_bytes;      // which form, set before decoding
};

// The AVX2 path's byte form, for these types.
bool unsigned_quants(ggml_type t) {
    return t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

// One activation row's Q8_K block, widened.
struct alignas(64) ActBlock {
    int16_t y[kQK];
    int8_t y8[kQK];     // the same, as Q8_K holds them
    int16_t bsums[16];  // sums of 16 values (Q8_K's own)
    int16_t sums32[8];  // sums of 32 values, as ggml's hadd of bsums
    float d;
};

// The 6-bit scales and mins of Q4_K/Q5_K, unpacked as ggml's vec_dot unpacks them.
void unpack_scales_mins(const uint8_t * packed, uint8_t scales[8], uint8_t mins[8]) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    std::memcpy(utmp, packed, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    std::memcpy(scales, utmp, 8);
    std::memcpy(mins, utmp + 2, 8);
}

// Chunk c's 32 quants (signed bytes; in byte form unsigned) and their scales
// (the first 16 values' scale_lo, the rest's scale_hi), in the block's form.
GGSPEC_AVX2 void put_chunk(WeightBlock & out, int c, __m256i quants, int16_t scale_lo, int16_t scale_hi) {
    if (out.as_bytes) {
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
GGSPEC_AVX2 void decode_q45_k(bool q5, const uint8_t * block, WeightBlock & out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    uint8_t scales[8], mins[8];
    out.d = _cvtsh_ss(load_u16(block));
    out.dmin = _cvtsh_ss(load_u16(block + 2));
    unpack_scales_mins(block + 4, scales, mins);
    for (int i = 0; i < 8; ++i) out.mins[i] = mins[i];
    const uint8_t * qs = block + (q5 ? 48 : 16);
    const __m256i high = q5 ? _mm256_loadu_si256((const __m256i *) (block + 16)) : _mm256_setzero_si256();
    const __m256i one = _mm256_set1_epi8(1);
    for (int j = 0; j < 4; ++j) {  // 32 bytes: the low nibbles are sub-block 2j, the high ones 2j + 1
        const __m256i bits = _mm256_loadu_si256((const __m256i *) (qs + 32 * j));
        __m256i lo = _mm256_and_si256(bits, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if (q5) {  // bit s of each qh byte is the fifth bit of sub-block s's value
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * j), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * j + 1), one), 4));
        }
        put_chunk(out, 2 * j, lo, scales[2 * j], scales[2 * j]);
        put_chunk(out, 2 * j + 1, hi, scales[2 * j + 1], scales[2 * j + 1]);
    }
}

GGSPEC_AVX2 void decode_q6_k(const uint8_t * block, WeightBlock & out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const int8_t * scales = (const int8_t *) (block + 192);
    out.d = _cvtsh_ss(load_u16(block + 208));
    for (int i = 0; i < 16; ++i) out.sub16[i] = scales[i];
    for (int half = 0; half < 2; ++half) {
        const uint8_t * ql = block + 64 * half;
        const __m256i bits1 = _mm256_loadu_si256((const __m256i *) ql);
        const __m256i bits2 = _mm256_loadu_si256((const __m256i *) (ql + 32));
        const __m256i high = _mm256_loadu_si256((const __m256i *) (block + 128 + 32 * half));
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(bits1, m4), _mm256_slli_epi16(_mm256_and_si256(high, m3), 4)),
            _mm256_or_si256(_mm256_and_si256(bits2, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), m3), 4)),
        };
        for (int i = 0; i < 4; ++i) {
            const int chunk = 4 * half + i;  // values 32 chunk.., scales 2 chunk and 2 chunk + 1
            put_chunk(out, chunk, q[i], scales[2 * chunk], scales[2 * chunk + 1]);
        }
    }
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

// IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S code their values through lattice grids.
// ggml's dot multiplies the grid values by their signs and by 2 ls + 1 (the
// sub-block scale) in integers, and the float sum by d and then by a constant;
// its dequantizer gives value x (2 ls + 1) x that constant, times d.
struct GridCode {
    float unit;    // 1 / the constant
    float factor;  // the constant, as ggml's dot applies it
};

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
        case GGML_TYPE_Q4_K: return decode_q45_k(false, block, out);
        case GGML_TYPE_Q5_K: return decode_q45_k(true, block, out);
        case GGML_TYPE_Q6_K: return decode_q6_k(block, out);
        default: return decode_iq4_xs(block, out);
    }
}

// q8_K {d (f32), qs[256], bsums[16] (i16)}
GGSPEC_AVX2 void pack_activations(const DotRowsJob & job, const ActRows & acts, Buffer<ActBlock> & packed) {
    const int64_t a_begin = acts.first, a_end = acts.end;
    packed.resize((size_t) ((a_end - a_begin) * job.n_blocks));
    for (int64_t a = a_begin; a < a_end; ++a) {
        const uint8_t * row = acts.row(a);
        for (int64_t b = 0; b < job.n_blocks; ++b) {
            const uint8_t * block = row + b * 292;
            ActBlock & out = packed[(size_t) ((a - a_begin) * job.n_blocks + b)];
            std::memcpy(&out.d, block, 4);
            std::memcpy(out.y8, block + 4, kQK);
            for (int i = 0; i < kQK / 16; ++i) {
                const __m128i y = _mm_loadu_si128((const __m128i *) (block + 4 + 16 * i));
                _mm256_store_si256((__m256i *) (out.y + 16 * i), _mm256_cvtepi8_epi16(y));
            }
            std::memcpy(out.bsums, block + 260, 32);
            for (int j = 0; j < 8; ++j) out.sums32[j] = (int16_t) (out.bsums[2 * j] + out.bsums[2 * j + 1]);
        }
    }
}

// The float accumulators of one (weight row, activation row) output.
struct Accumulators {
    __m256 lanes{};
    __m128 min_lanes{};  // Q4_K's 4 min lanes
    float min_sum = 0.0f;  // Q5_K's one min float
};


// What a block's float steps depend on: Q6_K's, Q2_K's, Q4_K's and Q5_K's
// own, and one kind for the rest (GGML_TYPE_COUNT). The tiles take it as a
// template argument: with the type a run-time value, every block of every
// output branched on it and kept its accumulators in memory.
constexpr ggml_type block_kind(ggml_type type) {
    switch (type) {
        case GGML_TYPE_Q2_K:
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K:
        case GGML_TYPE_Q6_K: return type;
        default: return GGML_TYPE_COUNT;
    }
}

// One block's float steps, as ggml's vec_dot takes them, from its 8 integer lanes.
// Inlined into the tiles: a call per block and output costs more than its float steps.
template <ggml_type Kind>
__attribute__((always_inline)) GGSPEC_AVX2 inline void add_block(const WeightBlock & wb, const ActBlock & ab, __m256i sumi,
                                                                  Accumulators & acc) {
    if constexpr (Kind == GGML_TYPE_Q6_K) {
        const __m256i bsums = _mm256_load_si256((const __m256i *) ab.bsums);
        const __m256i scales = _mm256_load_si256((const __m256i *) wb.sub16);
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales), 5));
    } else if constexpr (Kind == GGML_TYPE_Q2_K) {  // the mins first, into the same lanes
        const __m256i prod = _mm256_madd_epi16(_mm256_load_si256((const __m256i *) wb.sub16),
                                               _mm256_load_si256((const __m256i *) ab.bsums));
        acc.lanes = _mm256_fmadd_ps(_mm256_set1_ps(-ab.d * wb.dmin), _mm256_cvtepi32_ps(prod), acc.lanes);
    } else if constexpr (Kind == GGML_TYPE_Q4_K || Kind == GGML_TYPE_Q5_K) {
        const float dmin = -ab.d * wb.dmin;
        const __m128i prod = _mm_madd_epi16(_mm_load_si128((const __m128i *) wb.mins),
                                            _mm_load_si128((const __m128i *) ab.sums32));
        if constexpr (Kind == GGML_TYPE_Q4_K) {
            acc.min_lanes = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc.min_lanes);
        } else {
            alignas(16) int32_t p[4];
            _mm_store_si128((__m128i *) p, prod);
            acc.min_sum = __builtin_fmaf(dmin, (float) ((p[0] + p[1]) + (p[2] + p[3])), acc.min_sum);
        }
    }
    acc.lanes = _mm256_fmadd_ps(_mm256_set1_ps(ab.d * wb.d), _mm256_cvtepi32_ps(sumi), acc.lanes);
}

GGSPEC_AVX2 float finish(ggml_type type, const Accumulators & acc) {
    alignas(32) float l[8];
    _mm256_store_ps(l, acc.lanes);
    float sum = hsum8(l);
    if (type == GGML_TYPE_Q4_K) {
        alignas(16) float m[4];
        _mm_store_ps(m, acc.min_lanes);
        sum += (m[0] + m[2]) + (m[1] + m[3]);
    } else if (type == GGML_TYPE_Q5_K) {
        sum += acc.min_sum;
    } else if (grid_coded(type)) {
        sum = grid_code(type).factor * sum;
    }
    return sum;
}

// The tile's outputs: weight rows w0.., activation rows a.. of the job.
template <int TW, int TA>
GGSPEC_AVX2 void store(const DotRowsJob & job, const Accumulators (&acc)[TW][TA], int64_t w0, int64_t a) {
    for (int w = 0; w < TW; ++w)
        for (int r = 0; r < TA; ++r) job.dst[(a + r) * job.dst_stride + w0 + w] = finish(job.weight_type, acc[w][r]);
}

// Rows w0.. (TW of them) against activation rows a.. (TA of them, within the
// chunk). The integer lanes: AVX512-VNNI's vpdpwssd takes a whole 32-value
// chunk and leaves lanes 2k and 2k+1 to be summed into ggml's lane k.
template <int TW, int TA, ggml_type Kind>
GGSPEC_AVX512 void tile_vnni(const DotRowsJob & job, const WeightBlock * weights, int64_t w0, const ActBlock * acts,
                             int64_t a_chunk, int64_t a, const WeightStream & next) {
    const int64_t nb = job.n_blocks;
    Accumulators acc[TW][TA];
    for (int64_t b = 0; b < nb; ++b) {
        next.fetch(b);
        __m512i lanes[TW][TA];
        for (int w = 0; w < TW; ++w)
            for (int r = 0; r < TA; ++r) lanes[w][r] = _mm512_setzero_si512();
        for (int c = 0; c < kChunks; ++c) {
            __m512i wv[TW];
            for (int w = 0; w < TW; ++w) {
                wv[w] = _mm512_load_si512((const __m512i *) (weights[w * nb + b].w + 32 * c));
                in_register(wv[w]);  // loaded once for the TA rows: GCC folded the load into each vpdpwssd
            }
            for (int r = 0; r < TA; ++r) {
                const __m512i y = _mm512_load_si512((const __m512i *) (acts[(a + r) * nb + b].y + 32 * c));
                for (int w = 0; w < TW; ++w) lanes[w][r] = _mm512_dpwssd_epi32(lanes[w][r], wv[w], y);
            }
        }
        for (int w = 0; w < TW; ++w) {
            for (int r = 0; r < TA; ++r) {
                const __m512i pairs = _mm512_add_epi32(lanes[w][r], _mm512_srli_epi64(lanes[w][r], 32));
                add_block<Kind>(weights[w * nb + b], acts[(a + r) * nb + b], _mm512_cvtepi64_epi32(pairs), acc[w][r]);
            }
        }
    }
    store(job, acc, w0, a_chunk + a);
}

// The same with AVX2's vpmaddwd over 16 values at a time: one accumulator for
// the first half of every chunk, one for the second, and a horizontal add that
// puts the pairs back in ggml's lane order.
template <int TW, int TA, ggml_type Kind>
GGSPEC_AVX2 void tile_avx2(const DotRowsJob & job, const WeightBlock * weights, int64_t w0, const ActBlock * acts,
                           int64_t a_chunk, int64_t a, const WeightStream & next) {
    const int64_t nb = job.n_blocks;
    Accumulators acc[TW][TA];
    for (int64_t b = 0; b < nb; ++b) {
        next.fetch(b);
        __m256i lo[TW][TA], hi[TW][TA];
        for (int w = 0; w < TW; ++w)
            for (int r = 0; r < TA; ++r) lo[w][r] = hi[w][r] = _mm256_setzero_si256();
        for (int c = 0; c < kChunks; ++c) {
            __m256i wl[TW], wh[TW];
            for (int w = 0; w < TW; ++w) {
                wl[w] = _mm256_load_si256((const __m256i *) (weights[w * nb + b].w + 32 * c));
                wh[w] = _mm256_load_si256((const __m256i *) (weights[w * nb + b].w + 32 * c + 16));
                in_register(wl[w]), in_register(wh[w]);  // once for the TA rows (see tile_vnni)
            }
            for (int r = 0; r < TA; ++r) {
                const int16_t * y = acts[(a + r) * nb + b].y + 32 * c;
                __m256i yl = _mm256_load_si256((const __m256i *) y);
                __m256i yh = _mm256_load_si256((const __m256i *) (y + 16));
                in_register(yl), in_register(yh);  // once for the TW rows
                for (int w = 0; w < TW; ++w) {
                    lo[w][r] = _mm256_add_epi32(lo[w][r], _mm256_madd_epi16(wl[w], yl));
                    hi[w][r] = _mm256_add_epi32(hi[w][r], _mm256_madd_epi16(wh[w], yh));
                }
            }
        }
        for (int w = 0; w < TW; ++w) {
            for (int r = 0; r < TA; ++r) {
                // hadd gives lanes 0 1 4 5 2 3 6 7; the permute puts them in order
                const __m256i sumi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo[w][r], hi[w][r]), 0xD8);
                add_block<Kind>(weights[w * nb + b], acts[(a + r) * nb + b], sumi, acc[w][r]);
            }
        }
    }
    store(job, acc, w0, a_chunk + a);
}

// The AVX2 path for the byte form: per chunk, vpmaddubsw of the unsigned quants
// and the activation bytes into pairs (at most 63 x 127 x 2: no saturation),
// then vpmaddwd by the chunk's scales puts each lane of 4 values in ggml's lane
// order, as ggml's own dot does.
template <int TW, int TA, ggml_type Kind>
GGSPEC_AVX2 void tile_avx2_bytes(const DotRowsJob & job, const WeightBlock * weights, int64_t w0, const ActBlock * acts,
                                 int64_t a_chunk, int64_t a, const WeightStream & next) {
    const int64_t nb = job.n_blocks;
    Accumulators acc[TW][TA];
    for (int64_t b = 0; b < nb; ++b) {
        next.fetch(b);
        __m256i lanes[TW][TA];
        for (int w = 0; w < TW; ++w)
            for (int r = 0; r < TA; ++r) lanes[w][r] = _mm256_setzero_si256();
        for (int c = 0; c < kChunks; ++c) {
            __m256i y[TA];
            for (int r = 0; r < TA; ++r) {
                y[r] = _mm256_load_si256((const __m256i *) (acts[(a + r) * nb + b].y8 + 32 * c));
                in_register(y[r]);  // once for the TW rows
            }
            for (int w = 0; w < TW; ++w) {
                const WeightBlock & wb = weights[w * nb + b];
                __m256i q = _mm256_load_si256((const __m256i *) (wb.bytes.q + 32 * c));
                __m256i scales = _mm256_load_si256((const __m256i *) wb.bytes.scales[c]);
                in_register(q), in_register(scales);  // once for the TA rows
                for (int r = 0; r < TA; ++r) {
                    lanes[w][r] = _mm256_add_epi32(lanes[w][r],
                                                   _mm256_madd_epi16(_mm256_maddubs_epi16(q, y[r]), scales));
                }
            }
        }
        for (int w = 0; w < TW; ++w)
            for (int r = 0; r < TA; ++r) add_block<Kind>(weights[w * nb + b], acts[(a + r) * nb + b], lanes[w][r], acc[w][r]);
    }
    store(job, acc, w0, a_chunk + a);
}

class Kernel {
public:
    Kernel(const DotRowsJob & job, bool vnni) : job_(job), vnni_(vnni) {
        weights_.resize((size_t) (kTileW * job.n_blocks));
    }
    void prepare(const ActRows & acts) { pack_activations(job_, acts, packed_); }
    void decode(int64_t w, int64_t slot) {
        const uint8_t * row = (const uint8_t *) job_.weights + w * job_.row_bytes;
        const size_t block_bytes = job_.row_bytes / (size_t) job_.n_blocks;
        for (int64_t b = 0; b < job_.n_blocks; ++b) {
            WeightBlock & out = weights_[(size_t) (slot * job_.n_blocks + b)];
            out.as_bytes = bytes_;
            decode_block(job_.weight_type, row + b * block_bytes, out);
        }
    }
    WeightStream stream;

    template <int TW>
    void run(int64_t w0, int64_t slot, int64_t a0, int64_t a_end) {
        const WeightBlock * weights = weights_.data() + slot * job_.n_blocks;
        int64_t a = 0;
        for (; a + kTileA <= a_end - a0; a += kTileA) tile<TW, kTileA>(weights, w0, a0, a);
        for (; a < a_end - a0; ++a) tile<TW, 1>(weights, w0, a0, a);
    }

private:
    template <int TW, int TA>
    void tile(const WeightBlock * weights, int64_t w0, int64_t a0, int64_t a) {
        switch (block_kind(job_.weight_type)) {
            case GGML_TYPE_Q2_K: return tile_as<TW, TA, GGML_TYPE_Q2_K>(weights, w0, a0, a);
            case GGML_TYPE_Q4_K: return tile_as<TW, TA, GGML_TYPE_Q4_K>(weights, w0, a0, a);
            case GGML_TYPE_Q5_K: return tile_as<TW, TA, GGML_TYPE_Q5_K>(weights, w0, a0, a);
            case GGML_TYPE_Q6_K: return tile_as<TW, TA, GGML_TYPE_Q6_K>(weights, w0, a0, a);
            default: return tile_as<TW, TA, GGML_TYPE_COUNT>(weights, w0, a0, a);
        }
    }
    // AVX2 has 16 registers: in 16-bit form two weight rows at a time hold its accumulators.
    template <int TW, int TA, ggml_type Kind>
    void tile_as(const WeightBlock * weights, int64_t w0, int64_t a0, int64_t a) {
        if (vnni_) {
            tile_vnni<TW, TA, Kind>(job_, weights, w0, packed_.data(), a0, a, stream);
        } else if (bytes_) {
            tile_avx2_bytes<TW, TA, Kind>(job_, weights, w0, packed_.data(), a0, a, stream);
        } else if constexpr (TW % 2 == 0) {
            for (int w = 0; w < TW; w += 2) {
                tile_avx2<2, TA, Kind>(job_, weights + w * job_.n_blocks, w0 + w, packed_.data(), a0, a, stream);
            }
        } else {
            tile_avx2<TW, TA, Kind>(job_, weights, w0, packed_.data(), a0, a, stream);
        }
    }

    const DotRowsJob & job_;
    const bool vnni_;
    const bool bytes_ = !vnni_ && unsigned_quants(job_.weight_type);  // the AVX2 byte form
    Buffer<ActBlock> & packed_ = thread_buffer<ActBlock>();  // this thread's, reused across calls
    Buffer<WeightBlock> & weights_ = thread_buffer<WeightBlock>();
};


}  // namespace

void k_dot_rows(const DotRowsJob & job, int64_t w_begin, int64_t w_end, bool vnni) {
    Kernel kernel(job, vnni);
    run_tiles<kTileW>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
