#include "kernels/q8_dot_rows.h"

#include <stdexcept>

// The kernel is x86 AVX512-VNNI code, compiled per function with target
// attributes (GCC/Clang) and chosen at run time; elsewhere it is absent and
// q8_dot_rows_supported() says so.
#ifndef GGSPEC_X86_KERNEL
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GGSPEC_X86_KERNEL 1
#else
#define GGSPEC_X86_KERNEL 0
#endif
#endif

namespace ggspec {

bool q8_dot_rows_handles(ggml_type t) {
    return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1;
}

}  // namespace ggspec

#if GGSPEC_X86_KERNEL

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#define GGSPEC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))

namespace ggspec {
namespace {

constexpr int kBlock = 32;       // values per block, for every handled type
constexpr int kWeightTile = 8;   // weight rows accumulated at once
constexpr int kPairTile = 2;     // activation row pairs accumulated at once: 8 x 2 = 16 zmm accumulators
constexpr int64_t kActChunk = 64;  // activation rows packed at a time, so that they stay in L2

uint16_t load_u16(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// ggml's hsum_float_8 on one 8-lane half, in its order.
float hsum8(const float * l) {
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    const float b0 = a0 + a2, b1 = a1 + a3;
    return b0 + b1;
}

// A weight block decoded to unsigned bytes, as VNNI's dpbusd wants: u = x + 128
// for the signed types, u = x for Q4_1; its scale, and Q4_1's min.
struct WeightBlock {
    uint8_t u[kBlock];
    float d;
    float m;
};

// Two activation rows' block b side by side, the per-lane correction
// -128 * (sum of the lane's 4 values) that turns the dot (x + 128) . y back
// into x . y (zero for unsigned weights), and each row's scale on its 8 lanes.
struct PairBlock {
    int8_t y[2 * kBlock];
    int32_t correction[16];
    float scale[16];
};

GGSPEC_AVX512 __m256i low_high_nibbles(const uint8_t * qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *) qs);
    const __m128i mask = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
}

// Block layouts (ggml-common.h): q8_0 {d, qs[32]}, q4_0 {d, qs[16]}, q5_0 {d, qh[4], qs[16]},
// q4_1 {d, m, qs[16]}; values 0..15 sit in the low nibbles, 16..31 in the high ones.
GGSPEC_AVX512 void decode_row(ggml_type type, const uint8_t * row, int64_t n_blocks, WeightBlock * out) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i u;
        if (type == GGML_TYPE_Q8_0) {
            const uint8_t * block = row + b * 34;
            out[b].d = _cvtsh_ss(load_u16(block));
            u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) (block + 2)), _mm256_set1_epi8((char) 0x80));
        } else if (type == GGML_TYPE_Q4_0) {  // x = nibble - 8
            const uint8_t * block = row + b * 18;
            out[b].d = _cvtsh_ss(load_u16(block));
            u = _mm256_add_epi8(low_high_nibbles(block + 2), _mm256_set1_epi8(120));
        } else if (type == GGML_TYPE_Q4_1) {  // x = nibble, scaled by d, plus m
            const uint8_t * block = row + b * 20;
            out[b].d = _cvtsh_ss(load_u16(block));
            out[b].m = _cvtsh_ss(load_u16(block + 2));
            u = low_high_nibbles(block + 4);
        } else {  // Q5_0: x = (nibble | high bit << 4) - 16
            const uint8_t * block = row + b * 22;
            out[b].d = _cvtsh_ss(load_u16(block));
            uint32_t qh;
            std::memcpy(&qh, block + 2, 4);
            const __m256i high = _mm256_maskz_mov_epi8((__mmask32) qh, _mm256_set1_epi8(0x10));
            u = _mm256_add_epi8(_mm256_or_si256(low_high_nibbles(block + 6), high), _mm256_set1_epi8(112));
        }
        _mm256_storeu_si256((__m256i *) out[b].u, u);
    }
}

bool has_min(ggml_type t) { return t == GGML_TYPE_Q4_1; }

// Activations as pair blocks, and for Q4_1 each row's block sums s (Q8_1's
// d * sum of the values) laid out sums[b * kActChunk + row].
GGSPEC_AVX512 void pack_activations(const Q8DotRows & job, int64_t a_begin, int64_t a_end,
                                    std::vector<PairBlock> & packed, std::vector<float> & sums) {
    const bool q8_1 = has_min(job.weight_type);
    const int block_bytes = q8_1 ? 36 : 34, qs_offset = q8_1 ? 4 : 2;
    const int64_t n_pairs = (a_end - a_begin + 1) / 2;
    packed.assign((size_t) (n_pairs * job.n_blocks), PairBlock{});
    if (q8_1) sums.assign((size_t) (job.n_blocks * kActChunk), 0.0f);
    for (int64_t a = a_begin; a < a_end; ++a) {
        const uint8_t * row = (const uint8_t *) job.acts + a * job.act_bytes;
        const int half = (int) ((a - a_begin) & 1);
        for (int64_t b = 0; b < job.n_blocks; ++b) {
            const uint8_t * block = row + b * block_bytes;
            PairBlock & pb = packed[(size_t) (((a - a_begin) / 2) * job.n_blocks + b)];
            std::memcpy(pb.y + half * kBlock, block + qs_offset, kBlock);
            const float scale = _cvtsh_ss(load_u16(block));
            for (int lane = 0; lane < 8; ++lane) {
                const int8_t * v = pb.y + half * kBlock + lane * 4;
                pb.correction[half * 8 + lane] = q8_1 ? 0 : -128 * (v[0] + v[1] + v[2] + v[3]);
                pb.scale[half * 8 + lane] = scale;
            }
            if (q8_1) sums[(size_t) (b * kActChunk + (a - a_begin))] = _cvtsh_ss(load_u16(block + 2));
        }
    }
}

// Q4_1's min term per (weight row, activation row): ggml's vec_dot adds m * s
// block by block into one float (contracted to an FMA), then adds it to the
// lanes' sum. Vectorised across activation rows, so each keeps that order.
GGSPEC_AVX512 void min_terms(const WeightBlock * weights, int64_t n_blocks, const float * sums, int64_t n_acts,
                             float * out) {
    for (int64_t a = 0; a < n_acts; a += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            acc = _mm512_fmadd_ps(_mm512_set1_ps(weights[b].m), _mm512_loadu_ps(sums + b * kActChunk + a), acc);
        }
        _mm512_storeu_ps(out + a, acc);
    }
}

// mins[w * kActChunk + a]: Q4_1's min terms for the tile's weight rows, else null.
template <int NW, int NP>
GGSPEC_AVX512 void tile(const Q8DotRows & job, const WeightBlock * weights, int64_t w0, const PairBlock * packed,
                        const float * mins, int64_t a0, int64_t a_end, int64_t p0) {
    __m512 acc[NW][NP];
#pragma GCC unroll 16
    for (int w = 0; w < NW; ++w)
#pragma GCC unroll 16
        for (int p = 0; p < NP; ++p) acc[w][p] = _mm512_setzero_ps();

    for (int64_t b = 0; b < job.n_blocks; ++b) {
        __m512i u[NW];
#pragma GCC unroll 16
        for (int w = 0; w < NW; ++w) {
            u[w] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) weights[w * job.n_blocks + b].u));
        }
#pragma GCC unroll 16
        for (int p = 0; p < NP; ++p) {
            const PairBlock & pb = packed[(size_t) ((p0 + p) * job.n_blocks + b)];
            const __m512i y = _mm512_loadu_si512(pb.y);
            const __m512i corr = _mm512_loadu_si512(pb.correction);
            const __m512 dy = _mm512_loadu_ps(pb.scale);
#pragma GCC unroll 16
            for (int w = 0; w < NW; ++w) {
                const __m512 q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u[w], y));
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(weights[w * job.n_blocks + b].d), dy);
                acc[w][p] = _mm512_fmadd_ps(d, q, acc[w][p]);
            }
        }
    }
    alignas(64) float lanes[16];
    for (int w = 0; w < NW; ++w) {
        for (int p = 0; p < NP; ++p) {
            _mm512_store_ps(lanes, acc[w][p]);
            for (int half = 0; half < 2; ++half) {
                const int64_t a = 2 * (p0 + p) + half;  // within the chunk
                if (a0 + a >= a_end) continue;
                const float sum = hsum8(lanes + 8 * half);
                job.dst[(a0 + a) * job.dst_stride + w0 + w] = mins ? sum + mins[w * kActChunk + a] : sum;
            }
        }
    }
}

template <int NW>
void pair_tiles(const Q8DotRows & job, const WeightBlock * weights, int64_t w0, const PairBlock * packed,
                const float * mins, int64_t a0, int64_t a_end) {
    const int64_t n_pairs = (a_end - a0 + 1) / 2;
    int64_t p = 0;
    for (; p + kPairTile <= n_pairs; p += kPairTile) {
        tile<NW, kPairTile>(job, weights, w0, packed, mins, a0, a_end, p);
    }
    for (; p < n_pairs; ++p) tile<NW, 1>(job, weights, w0, packed, mins, a0, a_end, p);
}

}  // namespace

bool q8_dot_rows_supported() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("f16c");
}

void q8_dot_rows(const Q8DotRows & job, int64_t w_begin, int64_t w_end) {
    thread_local std::vector<PairBlock> packed;
    thread_local std::vector<float> sums, mins;
    thread_local std::vector<WeightBlock> weights;
    weights.resize((size_t) (kWeightTile * job.n_blocks));
    const bool with_mins = has_min(job.weight_type);
    mins.resize((size_t) (kWeightTile * kActChunk));
    for (int64_t a0 = 0; a0 < job.n_acts; a0 += kActChunk) {
        const int64_t a_end = std::min(job.n_acts, a0 + kActChunk);
        pack_activations(job, a0, a_end, packed, sums);
        for (int64_t w = w_begin; w < w_end; w += kWeightTile) {
            const int64_t n_w = std::min<int64_t>(kWeightTile, w_end - w);
            for (int64_t i = 0; i < n_w; ++i) {
                WeightBlock * decoded = weights.data() + i * job.n_blocks;
                decode_row(job.weight_type, (const uint8_t *) job.weights + (w + i) * job.row_bytes, job.n_blocks,
                           decoded);
                if (with_mins) min_terms(decoded, job.n_blocks, sums.data(), a_end - a0, mins.data() + i * kActChunk);
            }
            const float * m = with_mins ? mins.data() : nullptr;
            if (n_w == kWeightTile) {
                pair_tiles<kWeightTile>(job, weights.data(), w, packed.data(), m, a0, a_end);
            } else {
                for (int64_t i = 0; i < n_w; ++i) {
                    pair_tiles<1>(job, weights.data() + i * job.n_blocks, w + i, packed.data(),
                                  m ? m + i * kActChunk : nullptr, a0, a_end);
                }
            }
        }
    }
}

}  // namespace ggspec

#else  // not x86 with GCC/Clang

namespace ggspec {

bool q8_dot_rows_supported() { return false; }

void q8_dot_rows(const Q8DotRows &, int64_t, int64_t) {
    throw std::logic_error("the multi-row kernel is not built for this CPU");
}

}  // namespace ggspec

#endif
