// The block orders' Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K products from weights
// packed 16 rows to a register (lane_packs.h), on AVX512-VNNI.
#include "kernels/lane_packs.h"
#include "kernels/k_block_order.h"

#if GGSPEC_X86_KERNEL

namespace ggspec {
namespace {

// Groups taken at a time against each 8 activation rows: the four stay in L1
// and L2 while the rows pass over them (a prefill chunk's 64 rows in 8 passes).
constexpr int64_t kGroupSpan = 4;
constexpr int kRowsAtOnce = 8;  // activation rows a tile takes; each keeps 2 accumulators in registers
// How far ahead of the block being multiplied the packed stream is requested.
constexpr int64_t kPackAhead = 6144;

// The packed stream's `bytes` from kPackAhead past `block`. A tile of several
// activation rows takes it into L2, a one-row tile into L1; Q4_K's tiles all
// into L2. Against L1 everywhere (same bits, one process alternating, Zen 4,
// 2 threads): 8-row verifies 0.934 on Gemma 3 (98 of 100 faster) and 0.952
// on SmolLM2 (85 of 100), one-row steps 0.989 and 1.000. One-row tiles of
// the 32-value types into L2 too took Gemma 3's step to 1.016-1.018 (its Q5_0
// and Q8_0 blocks; 17 and 22 of 100 faster); Q4_K's alone into L2 gave 0.989.
template <int Locality>
GGSPEC_AVX512 inline void fetch_ahead(const uint8_t * block, int64_t bytes) {
#pragma GCC unroll 6
    for (int64_t line = 0; line < bytes; line += 64) __builtin_prefetch(block + kPackAhead + line, 0, Locality);
}

// acc + dpbusd(w, the dword at y in each lane), with the dword broadcast by
// the instruction itself ({1to16}). GCC does not fold _mm512_set1_epi32 of a
// load into that operand: it gave each dword its own vpbroadcastd, 64 more
// vector instructions per block of an 8-row tile, for 64 dpbusd. Against
// those (same bits, one process alternating, Zen 4, 2 threads, vnni-block):
// 8-row verifies 0.948 on SmolLM2 (35 of 50 faster) and 0.832 on Gemma 3,
// 16 rows 0.849 and 0.812, one-row steps 0.99.
__attribute__((always_inline)) GGSPEC_AVX512 inline __m512i dpbusd_at(__m512i acc, __m512i w, const uint8_t * y) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *) y));
    return acc;
}

// The same for vpdpwssd (Q4_K's mins against the activations' pair sums).
__attribute__((always_inline)) GGSPEC_AVX512 inline __m512i dpwssd_at(__m512i acc, __m512i w, const int32_t * y) {
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*y));
    return acc;
}

// A chunk's activation rows [a0, a0 + n) as the tiles read them: each row's
// blocks where quantize_acts put them, and per (block b, row a) at b * n + a
// its d in F32 and with a min its s, else the sum of its values times -8 (Q4_0),
// -16 (Q5_0) or -128 (Q8_0), which turns the unsigned values' dot back into
// the signed ones'.
struct LaneActs {
    ActRows rows;
    int64_t n;
    const float * d;
    const float * s;
    const int32_t * correction;
};

// Q5's fifth bits for values 4j..4j+3 (or 16 + 4j.., high) of the 16 rows: a
// byte shuffle copies the qh byte that holds them to each of the 4 value bytes
// of its lane, and a test of one bit a byte makes the mask of bytes to add 16 to.
GGSPEC_AVX512 inline __mmask64 fifth_bits(__m512i qh, int j, bool high) {
    const int32_t byte = (high ? 2 : 0) + j / 2;
    const __m128i from = _mm_setr_epi32(byte * 0x01010101, (4 + byte) * 0x01010101, (8 + byte) * 0x01010101,
                                        (12 + byte) * 0x01010101);
    const int32_t bits = j % 2 ? (int32_t) 0x80402010 : 0x08040201;  // byte k tests bit 4 * (j % 2) + k
    return _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, _mm512_broadcast_i32x4(from)), _mm512_set1_epi32(bits));
}

// One group's 16 weight rows against NA activation rows from a: dst[a *
// stride + lane] for each lane, in the block order.
template <ggml_type T, int NA>
GGSPEC_AVX512 void lanes_tile(const uint8_t * group, int64_t nb, const LaneActs & acts, int64_t a, float * dst,
                              int64_t stride) {
    constexpr bool Min = lane_has_min(T), Fifth = lane_has_fifth(T);
    constexpr int64_t kBlock = lane_block_bytes(T), kActBlock = Min ? 36 : 34, kValues = Min ? 4 : 2;
    __m512 acc[NA], mins[NA];
#pragma GCC unroll 8
    for (int i = 0; i < NA; ++i) acc[i] = mins[i] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0F), fifth = _mm512_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t * block = group + b * kBlock;
        fetch_ahead<(NA > 1 ? 2 : 3)>(block, kBlock);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) block));
        const __m512 m = Min ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (block + 32))) : d;
        const __m512i qh = Fifth ? _mm512_loadu_si512(block + 32 + (Min ? 32 : 0)) : low;
        const uint8_t * qs = block + lane_header_bytes(T);
        __m512i w[8];  // values 4j..4j+3 of each row in w[j], 16 + 4j.. in w[j + 4]
        if constexpr (T == GGML_TYPE_Q8_0) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                w[j] = _mm512_loadu_si512(qs + 64 * j);
                in_register(w[j]);
            }
        } else {
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                const __m512i q = _mm512_loadu_si512(qs + 64 * j);
                w[j] = _mm512_and_si512(q, low);
                w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low);
                if constexpr (Fifth) {
                    w[j] = _mm512_mask_add_epi8(w[j], fifth_bits(qh, j, false), w[j], fifth);
                    w[j + 4] = _mm512_mask_add_epi8(w[j + 4], fifth_bits(qh, j, true), w[j + 4], fifth);
                }
                in_register(w[j]);
                in_register(w[j + 4]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NA; ++i) {
            const uint8_t * y = acts.rows.row(a + i) + b * kActBlock + kValues;
            const int64_t at = b * acts.n + (a + i - acts.rows.first);
            // two chains of dpbusd's latency
            __m512i s0 = dpbusd_at(_mm512_setzero_si512(), w[0], y);
            __m512i s1 = dpbusd_at(Min ? _mm512_setzero_si512() : _mm512_set1_epi32(acts.correction[at]), w[4], y + 16);
#pragma GCC unroll 3
            for (int j = 1; j < 4; ++j) {
                s0 = dpbusd_at(s0, w[j], y + 4 * j);
                s1 = dpbusd_at(s1, w[j + 4], y + 16 + 4 * j);
            }
            const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(acts.d[at])), dot, acc[i]);
            if constexpr (Min) mins[i] = _mm512_fmadd_ps(m, _mm512_set1_ps(acts.s[at]), mins[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NA; ++i) {
        _mm512_storeu_ps(dst + (a + i) * stride, Min ? _mm512_add_ps(acc[i], mins[i]) : acc[i]);
    }
}

// Q4_K's 16 weight rows against NA activation rows, in its block order
// (k_block_order.h): per block and lane S1, each sub-block's dot times its
// scale (vpmulld), and S2, each sub-block's min times the activations' sum
// over it (vpdpwssd of (min, min) pairs against (sum, sum) pairs); then
// acc = fma(d_a * d, S1, acc), mins = fma(d_a * dmin, S2, mins).
template <int NA>
GGSPEC_AVX512 void k_lanes_tile(const uint8_t * group, int64_t nb, const LaneActs & acts, int64_t a, float * dst,
                                int64_t stride) {
    constexpr int64_t kBlock = lane_block_bytes(GGML_TYPE_Q4_K);
    alignas(64) float acc[NA][kLaneRows] = {}, mins[NA][kLaneRows] = {};
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t * block = group + b * kBlock;
        fetch_ahead<2>(block, kBlock);
        const uint8_t * scales = block + 64, * qs = block + lane_header_bytes(GGML_TYPE_Q4_K);
        __m512i s1[NA];
#pragma GCC unroll 8
        for (int i = 0; i < NA; ++i) s1[i] = _mm512_setzero_si512();
        for (int sub = 0; sub < 8; ++sub) {
            __m512i w[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m512i q = _mm512_loadu_si512(qs + 64 * (8 * (sub / 2) + j));
                w[j] = _mm512_and_si512(sub % 2 ? _mm512_srli_epi16(q, 4) : q, low);
                in_register(w[j]);
            }
            const __m512i scale = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (scales + 16 * sub)));
#pragma GCC unroll 8
            for (int i = 0; i < NA; ++i) {
                const uint8_t * y = acts.rows.row(a + i) + b * kQ8KBytes + 4 + 32 * sub;
                __m512i even = dpbusd_at(_mm512_setzero_si512(), w[0], y);
                __m512i odd = dpbusd_at(_mm512_setzero_si512(), w[1], y + 4);
#pragma GCC unroll 3
                for (int j = 2; j < 8; j += 2) {
                    even = dpbusd_at(even, w[j], y + 4 * j);
                    odd = dpbusd_at(odd, w[j + 1], y + 4 * j + 4);
                }
                s1[i] = _mm512_add_epi32(s1[i], _mm512_mullo_epi32(_mm512_add_epi32(even, odd), scale));
            }
        }
        const uint8_t * min_bytes = block + 192;
        __m512i min_pairs[4];  // lane r: row r's mins of sub-blocks 2p and 2p + 1 as 16-bit halves
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512i first = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (min_bytes + 32 * p)));
            const __m512i second = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) (min_bytes + 32 * p + 16)));
            min_pairs[p] = _mm512_or_si512(first, _mm512_slli_epi32(second, 16));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) block));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (block + 32)));
#pragma GCC unroll 8
        for (int i = 0; i < NA; ++i) {
            const int64_t at = b * acts.n + (a + i - acts.rows.first);
            __m512i s2 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int p = 0; p < 4; ++p) {
                s2 = dpwssd_at(s2, min_pairs[p], acts.correction + 4 * at + p);
            }
            const __m512 d_a = _mm512_set1_ps(acts.d[at]);
            const __m512 sum1 = _mm512_cvtepi32_ps(s1[i]), sum2 = _mm512_cvtepi32_ps(s2);
            _mm512_store_ps(acc[i], _mm512_fmadd_ps(_mm512_mul_ps(d, d_a), sum1, _mm512_load_ps(acc[i])));
            _mm512_store_ps(mins[i], _mm512_fmadd_ps(_mm512_mul_ps(dmin, d_a), sum2, _mm512_load_ps(mins[i])));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NA; ++i) {
        _mm512_storeu_ps(dst + (a + i) * stride, _mm512_sub_ps(_mm512_load_ps(acc[i]), _mm512_load_ps(mins[i])));
    }
}

// Groups [g, g_end) against activation rows [a, a + left), left <= NA.
template <ggml_type T, int NA>
GGSPEC_AVX512 void lanes_rows(const uint8_t * packed, int64_t nb, int64_t g, int64_t g_end, const LaneActs & acts,
                              int64_t a, int64_t left, float * dst, int64_t stride) {
    if constexpr (NA > 1) {
        if (left < NA) return lanes_rows<T, NA - 1>(packed, nb, g, g_end, acts, a, left, dst, stride);
    }
    for (; g < g_end; ++g) {
        const uint8_t * group = packed + g * nb * lane_block_bytes(T);
        if constexpr (T == GGML_TYPE_Q4_K) {
            k_lanes_tile<NA>(group, nb, acts, a, dst + g * kLaneRows, stride);
        } else {
            lanes_tile<T, NA>(group, nb, acts, a, dst + g * kLaneRows, stride);
        }
    }
}

template <ggml_type T>
GGSPEC_AVX512 void lanes_job(const DotRowsJob & job, const uint8_t * packed, int64_t g_begin, int64_t g_end) {
    constexpr bool Min = lane_has_min(T);
    constexpr int32_t kOffset = T == GGML_TYPE_Q8_0 ? -128 : lane_has_fifth(T) ? -16 : -8;  // signed less unsigned
    const int64_t nb = job.n_blocks;
    Buffer<float> & scales = thread_buffer<float, 4>();
    Buffer<int32_t> & correction = thread_buffer<int32_t, 4>();
    for (int64_t a0 = 0; a0 < job.n_acts; a0 += kActChunk) {
        const int64_t a_end = std::min(job.n_acts, a0 + kActChunk), n = a_end - a0;
        const ActRows rows = quantize_acts(job, a0, a_end);
        scales.resize((size_t) (2 * n * nb));
        if (!Min) correction.resize((size_t) (n * nb * (T == GGML_TYPE_Q4_K ? 4 : 1)));
        for (int64_t a = 0; a < n; ++a) {
            for (int64_t b = 0; b < nb; ++b) {
                if constexpr (T == GGML_TYPE_Q4_K) {  // d (F32), qs[256], bsums[16] (of 16 values each)
                    const uint8_t * block = rows.row(a0 + a) + b * kQ8KBytes;
                    std::memcpy(&scales[(size_t) (b * n + a)], block, 4);
                    int16_t sums[16];
                    std::memcpy(sums, block + 4 + 256, sizeof(sums));
                    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p and 2p + 1, as vpdpwssd's 16-bit pair
                        const int32_t first = sums[4 * p] + sums[4 * p + 1], second = sums[4 * p + 2] + sums[4 * p + 3];
                        correction[(size_t) (4 * (b * n + a) + p)] = (int32_t) ((uint32_t) (uint16_t) first |
                                                                                (uint32_t) second << 16);
                    }
                    continue;
                }
                const uint8_t * block = rows.row(a0 + a) + b * (Min ? 36 : 34);
                scales[(size_t) (b * n + a)] = _cvtsh_ss(load_u16(block));
                if constexpr (Min) {
                    scales[(size_t) (n * nb + b * n + a)] = _cvtsh_ss(load_u16(block + 2));
                } else {
                    const __m256i y = _mm256_loadu_si256((const __m256i *) (block + 2));
                    const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), y);
                    correction[(size_t) (b * n + a)] = kOffset * sum_int_lanes(sums);
                }
            }
        }
        const LaneActs acts{rows, n, scales.data(), scales.data() + n * nb, correction.data()};
        for (int64_t g = g_begin; g < g_end; g += kGroupSpan) {
            for (int64_t a = a0; a < a_end; a += kRowsAtOnce) {
                lanes_rows<T, kRowsAtOnce>(packed, nb, g, std::min(g_end, g + kGroupSpan), acts, a,
                                           std::min<int64_t>(kRowsAtOnce, a_end - a), job.dst, job.dst_stride);
            }
        }
    }
}

}  // namespace

int64_t lane_dot_rows_vnni(const DotRowsJob & job, const uint8_t * packed, int64_t w_begin, int64_t w_end) {
    const int64_t whole = w_begin % kLaneRows ? w_begin : std::max(w_begin, w_end / kLaneRows * kLaneRows);
    if (whole > w_begin) {
        const int64_t g_begin = w_begin / kLaneRows, g_end = whole / kLaneRows;
        switch (job.weight_type) {
            case GGML_TYPE_Q4_0: lanes_job<GGML_TYPE_Q4_0>(job, packed, g_begin, g_end); break;
            case GGML_TYPE_Q4_1: lanes_job<GGML_TYPE_Q4_1>(job, packed, g_begin, g_end); break;
            case GGML_TYPE_Q5_0: lanes_job<GGML_TYPE_Q5_0>(job, packed, g_begin, g_end); break;
            case GGML_TYPE_Q5_1: lanes_job<GGML_TYPE_Q5_1>(job, packed, g_begin, g_end); break;
            case GGML_TYPE_Q8_0: lanes_job<GGML_TYPE_Q8_0>(job, packed, g_begin, g_end); break;
            case GGML_TYPE_Q4_K: lanes_job<GGML_TYPE_Q4_K>(job, packed, g_begin, g_end); break;
            default: return w_begin;  // not a packed type: every row is left
        }
    }
    return whole;
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
