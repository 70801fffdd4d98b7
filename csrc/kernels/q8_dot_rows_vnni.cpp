// The AVX512-VNNI path of q8_dot_rows.h.
#include "kernels/q8_dot_rows.h"
#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

#include <vector>

namespace ggspec {
namespace {

constexpr int kWeightTile = 8;   // weight rows accumulated at once
constexpr int kPairTile = 2;     // activation row pairs accumulated at once: 8 x 2 = 16 zmm accumulators

// A weight block decoded to unsigned bytes, as VNNI's dpbusd wants: u = x + 128
// for the signed types, u = x for Q4_1 and Q5_1; its scale, and their min.
struct WeightBlock {
    uint8_t u[kQ8Block];
    float d;
    float m;
};

// Two activation rows' block b side by side, the per-lane correction
// -128 * (sum of the lane's 4 values) that turns the dot (x + 128) . y back
// into x . y (zero for unsigned weights), and each row's scale on its 8 lanes.
struct PairBlock {
    int8_t y[2 * kQ8Block];
    int32_t correction[16];
    float scale[16];
};

GGSPEC_AVX512 __m256i low_high_nibbles(const uint8_t * qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *) qs);
    const __m128i mask = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
}

// Block layouts (ggml-common.h): q8_0 {d, qs[32]}, q4_0 {d, qs[16]}, q5_0 {d, qh[4], qs[16]},
// q4_1 {d, m, qs[16]}, q5_1 {d, m, qh[4], qs[16]}; values 0..15 sit in the low nibbles,
// 16..31 in the high ones.
GGSPEC_AVX512 void decode_row(ggml_type type, const uint8_t * row, int64_t n_blocks, WeightBlock * out) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i u;
        if (type == GGML_TYPE_Q8_0) {
            const uint8_t * block = row + b * 34;
            out[b].d = _cvtsh_ss(load_u16(block));
            u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *) (block + 2)), _mm256_set1_epi8((char) 0x80));
        } else if (type == GGML_TYPE_IQ4_NL) {  // x = the table's value for the nibble
            const uint8_t * block = row + b * 18;
            out[b].d = _cvtsh_ss(load_u16(block));
            const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) iq4_values()));
            u = _mm256_xor_si256(_mm256_shuffle_epi8(table, low_high_nibbles(block + 2)), _mm256_set1_epi8((char) 0x80));
        } else if (type == GGML_TYPE_Q4_0) {  // x = nibble - 8
            const uint8_t * block = row + b * 18;
            out[b].d = _cvtsh_ss(load_u16(block));
            u = _mm256_add_epi8(low_high_nibbles(block + 2), _mm256_set1_epi8(120));
        } else if (type == GGML_TYPE_Q4_1) {  // x = nibble, scaled by d, plus m
            const uint8_t * block = row + b * 20;
            out[b].d = _cvtsh_ss(load_u16(block));
            out[b].m = _cvtsh_ss(load_u16(block + 2));
            u = low_high_nibbles(block + 4);
        } else if (type == GGML_TYPE_Q5_1) {  // x = nibble | high bit << 4, scaled by d, plus m
            const uint8_t * block = row + b * 24;
            out[b].d = _cvtsh_ss(load_u16(block));
            out[b].m = _cvtsh_ss(load_u16(block + 2));
            uint32_t qh;
            std::memcpy(&qh, block + 4, 4);
            u = _mm256_or_si256(low_high_nibbles(block + 8), _mm256_maskz_mov_epi8((__mmask32) qh, _mm256_set1_epi8(0x10)));
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

// Activations as pair blocks, and for Q4_1 and Q5_1 each row's block sums s (Q8_1's
// d * sum of the values) laid out sums[b * kActChunk + row].
GGSPEC_AVX512 void pack_activations(const DotRowsJob & job, const ActRows & acts, std::vector<PairBlock> & packed,
                                    std::vector<float> & sums) {
    const int64_t a_begin = acts.first, a_end = acts.end;
    const bool q8_1 = q8_has_min(job.weight_type);
    const int block_bytes = q8_1 ? 36 : 34, qs_offset = q8_1 ? 4 : 2;
    const int64_t n_pairs = (a_end - a_begin + 1) / 2;
    packed.assign((size_t) (n_pairs * job.n_blocks), PairBlock{});
    if (q8_1) sums.assign((size_t) (job.n_blocks * kActChunk), 0.0f);
    for (int64_t a = a_begin; a < a_end; ++a) {
        const uint8_t * row = acts.row(a);
        const int half = (int) ((a - a_begin) & 1);
        for (int64_t b = 0; b < job.n_blocks; ++b) {
            const uint8_t * block = row + b * block_bytes;
            PairBlock & pb = packed[(size_t) (((a - a_begin) / 2) * job.n_blocks + b)];
            std::memcpy(pb.y + half * kQ8Block, block + qs_offset, kQ8Block);
            const float scale = _cvtsh_ss(load_u16(block));
            for (int lane = 0; lane < 8; ++lane) {
                const int8_t * v = pb.y + half * kQ8Block + lane * 4;
                pb.correction[half * 8 + lane] = q8_1 ? 0 : -128 * (v[0] + v[1] + v[2] + v[3]);
                pb.scale[half * 8 + lane] = scale;
            }
            if (q8_1) sums[(size_t) (b * kActChunk + (a - a_begin))] = _cvtsh_ss(load_u16(block + 2));
        }
    }
}

// Q4_1's and Q5_1's min term per (weight row, activation row): ggml's vec_dot adds m * s
// block by block into one float (contracted to an FMA), then adds it to the
// lanes' sum. Vectorised across activation rows, so each keeps that order, and
// NW weight rows at a time (out[w * kActChunk + a]), whose chains interleave.
template <int NW>
GGSPEC_AVX512 void min_terms(const WeightBlock * weights, int64_t n_blocks, const float * sums, int64_t n_acts,
                             float * out) {
    for (int64_t a = 0; a < n_acts; a += 16) {
        __m512 acc[NW];
        for (int w = 0; w < NW; ++w) acc[w] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const __m512 s = _mm512_loadu_ps(sums + b * kActChunk + a);
            for (int w = 0; w < NW; ++w) acc[w] = _mm512_fmadd_ps(_mm512_set1_ps(weights[w * n_blocks + b].m), s, acc[w]);
        }
        for (int w = 0; w < NW; ++w) _mm512_storeu_ps(out + w * kActChunk + a, acc[w]);
    }
}

// mins[w * kActChunk + a]: the min terms (Q4_1, Q5_1) for the tile's weight rows, else null.
// Paired: IQ4_NL's two passes over its blocks (see q8_blocks_paired).
template <int NW, int NP, bool Paired>
GGSPEC_AVX512 void tile(const DotRowsJob & job, const WeightBlock * weights, int64_t w0, const PairBlock * packed,
                        const float * mins, int64_t a0, int64_t a_end, int64_t p0, const WeightStream & next) {
    const int64_t nb = job.n_blocks;
    constexpr int passes = Paired ? 2 : 1;
    const int64_t end = Paired ? nb / 2 * 2 : nb;
    __m512 acc[NW][NP];
    alignas(64) float first[NW][NP][16];  // paired blocks: the first pass's lanes
    for (int pass = 0; pass < passes; ++pass) {
#pragma GCC unroll 16
        for (int w = 0; w < NW; ++w)
#pragma GCC unroll 16
            for (int p = 0; p < NP; ++p) acc[w][p] = _mm512_setzero_ps();

        for (int64_t b = pass; b < end; b += passes) {
            next.fetch(b);
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
        if (pass + 1 < passes) {
            for (int w = 0; w < NW; ++w)
                for (int p = 0; p < NP; ++p) _mm512_store_ps(first[w][p], acc[w][p]);
        }
    }
    alignas(64) float lanes[16];
    for (int w = 0; w < NW; ++w) {
        for (int p = 0; p < NP; ++p) {
            _mm512_store_ps(lanes, acc[w][p]);
            if (Paired) {
                for (int i = 0; i < 16; ++i) lanes[i] = first[w][p][i] + lanes[i];
            }
            // the unpaired last block's integer lanes, by the same instruction as the others
            // (GCC 12 vectorized a plain loop over its bytes to a wrong sum)
            alignas(64) int32_t last[16];
            const PairBlock * pb = end < nb ? packed + (p0 + p) * nb + end : nullptr;
            if (pb) {
                const __m512i u = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) weights[w * nb + end].u));
                _mm512_store_si512(last, _mm512_dpbusd_epi32(_mm512_loadu_si512(pb->correction), u,
                                                             _mm512_loadu_si512(pb->y)));
            }
            for (int half = 0; half < 2; ++half) {
                const int64_t a = 2 * (p0 + p) + half;  // within the chunk
                if (a0 + a >= a_end) continue;
                float sum = hsum8(lanes + 8 * half);
                if (pb) {
                    int32_t dot = 0;
                    for (int i = 0; i < 8; ++i) dot += last[8 * half + i];
                    sum = __builtin_fmaf(weights[w * nb + end].d * pb->scale[8 * half], (float) dot, sum);
                }
                job.dst[(a0 + a) * job.dst_stride + w0 + w] = mins ? sum + mins[w * kActChunk + a] : sum;
            }
        }
    }
}

template <int NW, bool Paired>
void pair_tiles(const DotRowsJob & job, const WeightBlock * weights, int64_t w0, const PairBlock * packed,
                const float * mins, int64_t a0, int64_t a_end, const WeightStream & next) {
    const int64_t n_pairs = (a_end - a0 + 1) / 2;
    int64_t p = 0;
    for (; p + kPairTile <= n_pairs; p += kPairTile) {
        tile<NW, kPairTile, Paired>(job, weights, w0, packed, mins, a0, a_end, p, next);
    }
    for (; p < n_pairs; ++p) tile<NW, 1, Paired>(job, weights, w0, packed, mins, a0, a_end, p, next);
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job) : job_(job), with_mins_(q8_has_min(job.weight_type)) {
        weights_.resize((size_t) (kWeightTile * job.n_blocks));
        mins_.resize((size_t) (kWeightTile * kActChunk));
    }
    void prepare(const ActRows & acts) {
        pack_activations(job_, acts, packed_, sums_);
        n_acts_ = acts.end - acts.first;
    }
    void decode(int64_t w, int64_t slot) {
        WeightBlock * decoded = weights_.data() + slot * job_.n_blocks;
        decode_row(job_.weight_type, (const uint8_t *) job_.weights + w * job_.row_bytes, job_.n_blocks, decoded);
    }
    template <int NW>
    void run(int64_t w0, int64_t slot, int64_t a0, int64_t a_end) {
        if (with_mins_) {
            min_terms<NW>(weights_.data() + slot * job_.n_blocks, job_.n_blocks, sums_.data(), n_acts_,
                          mins_.data() + slot * kActChunk);
        }
        (q8_blocks_paired(job_.weight_type) ? pair_tiles<NW, true> : pair_tiles<NW, false>)(
            job_, weights_.data() + slot * job_.n_blocks, w0, packed_.data(),
            with_mins_ ? mins_.data() + slot * kActChunk : nullptr, a0, a_end, stream);
    }

    WeightStream stream;

private:
    const DotRowsJob & job_;
    const bool with_mins_;
    int64_t n_acts_ = 0;
    // per thread, reused across calls
    std::vector<PairBlock> & packed_ = thread_buffer<PairBlock>();
    std::vector<float> & sums_ = thread_buffer<float, 0>();
    std::vector<float> & mins_ = thread_buffer<float, 1>();
    std::vector<WeightBlock> & weights_ = thread_buffer<WeightBlock>();
};


}  // namespace

void q8_dot_rows_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<kWeightTile>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
