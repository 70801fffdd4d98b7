#include "kernels/k_dot_rows.h"

#include "kernels/k_blocks.h"

#if GGSPEC_X86_KERNEL

#include <algorithm>
#include <cstring>
#include <vector>

namespace ggspec {
namespace {

using namespace k_blocks;

constexpr int kTileW = 4;          // weight rows accumulated at once
constexpr int kTileA = 2;          // activation rows: 4 x 2 integer accumulators (two ymm each on AVX2)

// One activation row's Q8_K block, widened.
struct alignas(64) ActBlock {
    int16_t y[kQK];
    int8_t y8[kQK];     // the same, as Q8_K holds them
    int16_t bsums[16];  // sums of 16 values (Q8_K's own)
    int16_t sums32[8];  // sums of 32 values, as ggml's hadd of bsums
    float d;
};

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
        decode_row(job_.weight_type, (const uint8_t *) job_.weights + w * job_.row_bytes, job_.n_blocks,
                   bytes_ ? BlockForm::bytes : BlockForm::words, weights_.data() + slot * job_.n_blocks);
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
