// The block order of k_block_order.h on AVX512-VNNI. Two tile shapes form a
// block's integers:
//  - wide (groups of 8 activation rows, and a last group of 5-7): a row per
//    lane, as in the 32-value block order. A tile's weight rows are decoded
//    once to their quants as unsigned bytes (k_blocks' block_order form); each
//    4-value group of a sub-block is broadcast against the rows' matching
//    groups, so a sub-block's dot builds up in each row's lane, and one
//    vpmulld by its scale adds it to S1. The float steps then serve 8 outputs
//    at once, where ggml's order takes an epilogue per (weight row, activation
//    row).
//  - narrow (1-4 rows: a decode step): the blocks read where they are stored,
//    their quants unpacked in registers; a 32-value chunk's 8 lanes per
//    (weight row, activation row) from one dpbusd, times the chunk's scales by
//    vpdpwssd (a lane's 4 products fit 16 bits), the lanes of 8 outputs summed
//    in integers at once.
#include "kernels/k_block_order.h"

#include "kernels/k_blocks.h"

#if GGSPEC_X86_KERNEL

#include <algorithm>
#include <cstring>

namespace ggspec {
namespace {

using namespace k_blocks;

constexpr int kTileW = 4;          // weight rows a tile takes
constexpr int kLanes = 8;          // activation rows of a wide group; outputs of a narrow tile
constexpr int kWideRows = 5;       // the fewest activation rows that take a wide group
constexpr int kDwords = kQK / 4;   // 4-value groups of a block

inline float act_scale(const uint8_t * block) {
    float d;
    std::memcpy(&d, block, 4);
    return d;
}
inline const int16_t * act_sums16(const uint8_t * block) { return (const int16_t *) (block + 4 + kQK); }

// A chunk's wide groups, a row per lane: group g's block b at at = b * groups
// + g holds values[(at * kDwords + i) * 8 + r] (dword i of row r), scale[at * 8
// + r] (d_a), for Q6_K sums[(at * 16 + s) * 8 + r] = -32 * (row r's sum of
// sub-block s) (where its dot starts), for Q4_K and Q5_K sums[(at * 4 + k) * 8
// + r] = the sums of 32 values 2k and 2k + 1 as a pair of 16-bit halves (for
// vpdpwssd with the mins). Padding rows are zero.
struct WideActs {
    int64_t groups = 0;
    const int32_t * values = nullptr;
    const float * scale = nullptr;
    const int32_t * sums = nullptr;
};

template <bool Q6>
GGSPEC_AVX512 WideActs pack_wide(const ActRows & acts, int64_t groups, int64_t nb) {
    constexpr int kSums = Q6 ? 16 : 4;
    Buffer<int32_t> & values = thread_buffer<int32_t, 5>();
    Buffer<float> & scale = thread_buffer<float, 5>();
    Buffer<int32_t> & sums = thread_buffer<int32_t, 6>();
    values.assign((size_t) (groups * nb * kDwords * kLanes), 0);
    scale.assign((size_t) (groups * nb * kLanes), 0.0f);
    sums.assign((size_t) (groups * nb * kSums * kLanes), 0);
    const int64_t n = acts.end - acts.first;
    for (int64_t g = 0; g < groups; ++g) {
        const int rows = (int) std::min<int64_t>(kLanes, n - g * kLanes);
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t at = b * groups + g;
            const uint8_t * block[kLanes];
            for (int r = 0; r < kLanes; ++r) {
                block[r] = r < rows ? acts.row(acts.first + g * kLanes + r) + b * kQ8KBytes : nullptr;
            }
            for (int i = 0; i < kDwords; i += 8) {  // 8 dwords of each row at a time, transposed
                __m256i v[8];
                for (int r = 0; r < kLanes; ++r) {
                    v[r] = block[r] ? _mm256_loadu_si256((const __m256i *) (block[r] + 4 + 4 * i))
                                    : _mm256_setzero_si256();
                }
                transpose8(v);
                for (int j = 0; j < 8; ++j) {
                    _mm256_storeu_si256((__m256i *) (values.data() + (at * kDwords + i + j) * 8), v[j]);
                }
            }
            for (int r = 0; r < rows; ++r) {
                scale[(size_t) (at * 8 + r)] = act_scale(block[r]);
                const int16_t * s16 = act_sums16(block[r]);
                for (int s = 0; s < kSums; ++s) {
                    int32_t & out = sums[(size_t) ((at * kSums + s) * 8 + r)];
                    if constexpr (Q6) {
                        out = -32 * s16[s];
                    } else {  // sums of 32 values 2s and 2s + 1: 16-bit halves
                        const int32_t lo = s16[4 * s] + s16[4 * s + 1], hi = s16[4 * s + 2] + s16[4 * s + 3];
                        out = (int32_t) ((uint32_t) (uint16_t) lo | (uint32_t) hi << 16);
                    }
                }
            }
        }
    }
    return {groups, values.data(), scale.data(), sums.data()};
}

// NW decoded weight rows against the wide group g, rows in lanes; out[w][r].
template <int NW, bool Q6>
GGSPEC_AVX512 void wide_tile(const WeightBlock * rows, int64_t nb, const WideActs & acts, int64_t g,
                             const WeightStream & next, int64_t fetch0, float (&out)[kTileW][kLanes]) {
    constexpr int kSub = Q6 ? 16 : 8, kSubDwords = kDwords / kSub;  // sub-blocks, and 4-value groups of each
    __m256 acc[NW], mins[NW];
#pragma GCC unroll 4
    for (int w = 0; w < NW; ++w) acc[w] = mins[w] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        next.fetch(fetch0 + b);
        const int64_t at = b * acts.groups + g;
        __m256i s1[NW];
#pragma GCC unroll 4
        for (int w = 0; w < NW; ++w) s1[w] = _mm256_setzero_si256();
        for (int s = 0; s < kSub; ++s) {
            __m256i y[kSubDwords];
#pragma GCC unroll 8
            for (int i = 0; i < kSubDwords; ++i) {
                y[i] = _mm256_loadu_si256((const __m256i *) (acts.values + (at * kDwords + s * kSubDwords + i) * 8));
                in_register(y[i]);
            }
            const __m256i start = Q6 ? _mm256_loadu_si256((const __m256i *) (acts.sums + (at * 16 + s) * 8))
                                     : _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int w = 0; w < NW; ++w) {
                const WeightBlock & wb = rows[w * nb + b];
                const uint8_t * q = wb.bytes.q + s * kSubDwords * 4;
                __m256i even = start, odd = _mm256_setzero_si256();  // two chains of dpbusd's latency
#pragma GCC unroll 8
                for (int i = 0; i < kSubDwords; i += 2) {
                    int32_t q0, q1;
                    std::memcpy(&q0, q + 4 * i, 4);
                    std::memcpy(&q1, q + 4 * i + 4, 4);
                    even = _mm256_dpbusd_epi32(even, _mm256_set1_epi32(q0), y[i]);
                    odd = _mm256_dpbusd_epi32(odd, _mm256_set1_epi32(q1), y[i + 1]);
                }
                const int32_t scale = wb.bytes.scale16[Q6 ? s : 2 * s];
                const __m256i dot = _mm256_add_epi32(even, odd);
                s1[w] = _mm256_add_epi32(s1[w], _mm256_mullo_epi32(dot, _mm256_set1_epi32(scale)));
            }
        }
        const __m256 d_a = _mm256_loadu_ps(acts.scale + at * 8);
#pragma GCC unroll 4
        for (int w = 0; w < NW; ++w) {
            const WeightBlock & wb = rows[w * nb + b];
            acc[w] = _mm256_fmadd_ps(_mm256_mul_ps(d_a, _mm256_set1_ps(wb.d)), _mm256_cvtepi32_ps(s1[w]), acc[w]);
            if constexpr (!Q6) {
                __m256i s2 = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) {
                    int32_t pair;  // mins 2k and 2k + 1
                    std::memcpy(&pair, wb.mins + 2 * k, 4);
                    s2 = _mm256_dpwssd_epi32(s2, _mm256_set1_epi32(pair),
                                             _mm256_loadu_si256((const __m256i *) (acts.sums + (at * 4 + k) * 8)));
                }
                mins[w] = _mm256_fmadd_ps(_mm256_mul_ps(d_a, _mm256_set1_ps(wb.dmin)), _mm256_cvtepi32_ps(s2), mins[w]);
            }
        }
    }
#pragma GCC unroll 4
    for (int w = 0; w < NW; ++w) _mm256_storeu_ps(out[w], Q6 ? acc[w] : _mm256_sub_ps(acc[w], mins[w]));
}

template <ggml_type T>
constexpr size_t stored_bytes() { return T == GGML_TYPE_Q6_K ? 210 : T == GGML_TYPE_Q5_K ? 176 : 144; }

// NW stored weight rows (row_bytes apart) against NA activation rows from a0
// (at most 4), an output per lane, w * NA + r; out[w][r]. Each block's quants
// are unpacked in registers once for the NA rows: a decode step reads them
// where they are stored, as ggml's vec_dot does.
template <int NW, int NA, ggml_type T>
GGSPEC_AVX512 void narrow_tile(const uint8_t * stored, size_t row_bytes, int64_t nb, const ActRows & acts, int64_t a0,
                               const WeightStream & next, int64_t fetch0, float (&out)[kTileW][kLanes]) {
    static_assert(NW * NA <= kLanes, "an output per lane");
    constexpr bool Q6 = T == GGML_TYPE_Q6_K;
    constexpr int P = NW * NA;
    __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        next.fetch(fetch0 + b);
        __m256i s1[kLanes], s2[kLanes];
        // each output's d_w, dmin_w and d_a in its lane, blended in registers: a vector
        // load of scalar stores would wait for them to retire
        __m256 d_w = _mm256_setzero_ps(), dmin_w = _mm256_setzero_ps(), d_a = _mm256_setzero_ps();
        const uint8_t * ab[NA];
        __m256i bsums[NA];
        __m128i sums32[NA];  // Q4_K, Q5_K: the sums of 32 values
#pragma GCC unroll 4
        for (int r = 0; r < NA; ++r) {
            ab[r] = acts.row(a0 + r) + b * kQ8KBytes;
            bsums[r] = _mm256_loadu_si256((const __m256i *) act_sums16(ab[r]));
            if constexpr (!Q6) {
                sums32[r] = _mm_hadd_epi16(_mm256_castsi256_si128(bsums[r]), _mm256_extracti128_si256(bsums[r], 1));
            }
        }
#pragma GCC unroll 4
        for (int w = 0; w < NW; ++w) {
            const uint8_t * block = stored + w * row_bytes + b * stored_bytes<T>();
            // the sub-blocks' scales as (scale, 0) pairs of 16 bits, lane k scale k: vpdpwssd then
            // multiplies a lane's low half (its value: 4 products fit 16 bits) and drops its sign half
            __m256i scales[2];
            __m256i t[NA];
            if constexpr (Q6) {
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (block + 192)));
                scales[0] = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(sc16));
                scales[1] = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(sc16, 1));
#pragma GCC unroll 4
                for (int r = 0; r < NA; ++r) {  // the quants' -32, through the activations' sums of 16
                    const __m256i scaled_sums = _mm256_madd_epi16(bsums[r], sc16);
                    t[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(scaled_sums, 5));
                }
            } else {
                uint32_t words[4];  // into a vector from registers, likewise
                unpack_scales_mins(block + 4, words);
                const __m128i packed = _mm_setr_epi32((int) words[0], (int) words[1], (int) words[2], (int) words[3]);
                scales[0] = _mm256_cvtepu8_epi32(packed);
                const __m128i mins16 = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(packed, packed));
#pragma GCC unroll 4
                for (int r = 0; r < NA; ++r) {  // the mins times the sums of 32 values, 4 lanes
                    t[r] = _mm256_setzero_si256();
                    s2[w * NA + r] = _mm256_zextsi128_si256(_mm_madd_epi16(mins16, sums32[r]));
                }
                dmin_w = _mm256_mask_mov_ps(dmin_w, (__mmask8) (((1u << NA) - 1) << (w * NA)),
                                            _mm256_set1_ps(_cvtsh_ss(load_u16(block + 2))));
            }
            __m256i quants[kChunks];
            if constexpr (Q6) q6_k_quants(block, quants);
            else q45_k_quants<T == GGML_TYPE_Q5_K>(block, quants);
#pragma GCC unroll 8
            for (int c = 0; c < kChunks; ++c) {
                const int k = 2 * (c % 4);  // Q6_K: chunk c's sub-blocks in scales[c / 4]
                const __m256i pick =
                    Q6 ? _mm256_setr_epi32(k, k, k, k, k + 1, k + 1, k + 1, k + 1) : _mm256_set1_epi32(c);
                const __m256i pairs = _mm256_permutevar8x32_epi32(scales[Q6 ? c / 4 : 0], pick);
#pragma GCC unroll 4
                for (int r = 0; r < NA; ++r) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *) (ab[r] + 4 + 32 * c));
                    t[r] = _mm256_dpwssd_epi32(t[r], _mm256_dpbusd_epi32(_mm256_setzero_si256(), quants[c], y), pairs);
                }
            }
            d_w = _mm256_mask_mov_ps(d_w, (__mmask8) (((1u << NA) - 1) << (w * NA)),
                                     _mm256_set1_ps(_cvtsh_ss(load_u16(block + (Q6 ? 208 : 0)))));
#pragma GCC unroll 4
            for (int r = 0; r < NA; ++r) {
                s1[w * NA + r] = t[r];
                d_a = _mm256_mask_mov_ps(d_a, (__mmask8) (1u << (w * NA + r)), _mm256_set1_ps(act_scale(ab[r])));
            }
        }
#pragma GCC unroll 8
        for (int p = P; p < kLanes; ++p) s1[p] = s2[p] = _mm256_setzero_si256();
        acc = _mm256_fmadd_ps(_mm256_mul_ps(d_a, d_w), _mm256_cvtepi32_ps(int_sums8(s1)), acc);
        if constexpr (!Q6) mins = _mm256_fmadd_ps(_mm256_mul_ps(d_a, dmin_w), _mm256_cvtepi32_ps(int_sums8(s2)), mins);
    }
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, Q6 ? acc : _mm256_sub_ps(acc, mins));
    for (int p = 0; p < P; ++p) out[p / NA][p % NA] = lanes[p];
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job) : job_(job) {
        weights_.resize((size_t) (kTileW * job.n_blocks));
    }
    void prepare(const ActRows & acts) {
        acts_ = acts;
        const int64_t n = acts.end - acts.first;
        groups_ = n / kLanes + (n % kLanes >= kWideRows);
        const bool q6 = job_.weight_type == GGML_TYPE_Q6_K;
        wide_ = q6 ? pack_wide<true>(acts, groups_, job_.n_blocks) : pack_wide<false>(acts, groups_, job_.n_blocks);
    }
    void decode(int64_t w, int64_t slot) {  // for the wide groups; the narrow tiles read the stored rows
        if (groups_ == 0) return;
        decode_row(job_.weight_type, (const uint8_t *) job_.weights + w * job_.row_bytes, job_.n_blocks,
                   BlockForm::block_order, weights_.data() + slot * job_.n_blocks);
    }
    template <int TileW>
    void run(int64_t w0, int64_t slot, int64_t chunk0, int64_t) {
        switch (job_.weight_type) {
            case GGML_TYPE_Q4_K: return run_as<TileW, GGML_TYPE_Q4_K>(w0, slot, chunk0);
            case GGML_TYPE_Q5_K: return run_as<TileW, GGML_TYPE_Q5_K>(w0, slot, chunk0);
            default: return run_as<TileW, GGML_TYPE_Q6_K>(w0, slot, chunk0);
        }
    }

    WeightStream stream;

private:
    // The chunk's wide groups, then the last 1-4 rows narrow.
    template <int TileW, ggml_type T>
    void run_as(int64_t w0, int64_t slot, int64_t chunk0) {
        constexpr bool Q6 = T == GGML_TYPE_Q6_K;
        const int64_t nb = job_.n_blocks, n = acts_.end - acts_.first, rest = n - std::min(n, groups_ * kLanes);
        const WeightBlock * rows = weights_.data() + slot * nb;
        const uint8_t * stored = (const uint8_t *) job_.weights + w0 * job_.row_bytes;
        const int narrow_weights = rest ? std::min<int>(TileW, kLanes / (int) rest) : TileW;
        stream.spread(groups_ + (rest ? (TileW + narrow_weights - 1) / narrow_weights : 0));
        float out[kTileW][kLanes];
        int64_t fetch0 = 0;
        for (int64_t g = 0; g < groups_; ++g, fetch0 += nb) {
            wide_tile<TileW, Q6>(rows, nb, wide_, g, stream, fetch0, out);
            write(out, chunk0 + g * kLanes, std::min<int64_t>(kLanes, n - g * kLanes), w0, TileW);
        }
        switch (rest) {
            case 1: return narrow_group<TileW, 1, T>(stored, n - 1, fetch0, out, chunk0, w0);
            case 2: return narrow_group<TileW, 2, T>(stored, n - 2, fetch0, out, chunk0, w0);
            case 3: return narrow_group<TileW, 3, T>(stored, n - 3, fetch0, out, chunk0, w0);
            case 4: return narrow_group<TileW, 4, T>(stored, n - 4, fetch0, out, chunk0, w0);
            default: return;
        }
    }
    template <int TileW, int NA, ggml_type T>
    void narrow_group(const uint8_t * stored, int64_t a0, int64_t fetch0, float (&out)[kTileW][kLanes],
                      int64_t chunk0, int64_t w0) {
        constexpr int NW = std::min(TileW, kLanes / NA);
        const int64_t nb = job_.n_blocks;
        float part[kTileW][kLanes];
        for (int w = 0; w < TileW; w += NW, fetch0 += nb) {
            narrow_tile<NW, NA, T>(stored + w * job_.row_bytes, job_.row_bytes, nb, acts_, acts_.first + a0, stream,
                                   fetch0, part);
            for (int i = 0; i < NW; ++i)
                for (int r = 0; r < NA; ++r) out[w + i][r] = part[i][r];
        }
        write(out, chunk0 + a0, NA, w0, TileW);
    }
    void write(const float (&out)[kTileW][kLanes], int64_t a0, int64_t rows, int64_t w0, int n_w) const {
        for (int64_t r = 0; r < rows; ++r) {
            float * dst = job_.dst + (a0 + r) * job_.dst_stride + w0;
            for (int w = 0; w < n_w; ++w) dst[w] = out[w][r];
        }
    }

    const DotRowsJob & job_;
    ActRows acts_{};
    int64_t groups_ = 0;  // wide groups of the chunk
    WideActs wide_;
    Buffer<WeightBlock> & weights_ = thread_buffer<WeightBlock, 1>();  // per thread, reused across calls
};

}  // namespace

void k_block_order_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<kTileW>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
