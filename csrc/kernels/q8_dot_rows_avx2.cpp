// The AVX2 path of q8_dot_rows.h. Without VNNI's dpbusd, each activation row
// takes ggml's own trick for an exact signed product, against weight blocks
// decoded once to x and |x|: y with x's sign (vpsignb), vpmaddubsw(|x|, ±y) into
// pairs (at most 128 * 127 * 2: no saturation), vpmaddwd by ones into ggml's
// lanes of 4.
#include "kernels/q8_dot_rows.h"
#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

#include <vector>

namespace ggspec {
namespace {

constexpr int kTileW = 4;      // weight rows accumulated at once
constexpr int kTileA = 2;      // activation rows: 4 x 2 ymm accumulators

struct Avx2Block {
    int8_t x[kQ8Block];    // the signed values (Q4_1, Q5_1: unused)
    uint8_t ax[kQ8Block];  // |x| (Q4_1, Q5_1: the unsigned values)
    float d;
    float m;
};

// 32 bits -> 32 bytes of 0x10 where the bit is set (Q5_0's and Q5_1's fifth bits).
GGSPEC_AVX2 __m256i fifth_bits(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int) bits),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long) 0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

GGSPEC_AVX2 __m256i nibbles(const uint8_t * qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *) qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

GGSPEC_AVX2 void decode_row(ggml_type type, const uint8_t * row, int64_t n_blocks, Avx2Block * out) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i x;
        if (type == GGML_TYPE_Q8_0) {
            const uint8_t * block = row + b * 34;
            out[b].d = _cvtsh_ss(load_u16(block));
            x = _mm256_loadu_si256((const __m256i *) (block + 2));
        } else if (type == GGML_TYPE_IQ4_NL) {  // x = the table's value for the nibble
            const uint8_t * block = row + b * 18;
            out[b].d = _cvtsh_ss(load_u16(block));
            const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) iq4_values()));
            x = _mm256_shuffle_epi8(table, nibbles(block + 2));
        } else if (type == GGML_TYPE_Q4_0) {
            const uint8_t * block = row + b * 18;
            out[b].d = _cvtsh_ss(load_u16(block));
            x = _mm256_sub_epi8(nibbles(block + 2), _mm256_set1_epi8(8));
        } else if (type == GGML_TYPE_Q4_1) {
            const uint8_t * block = row + b * 20;
            out[b].d = _cvtsh_ss(load_u16(block));
            out[b].m = _cvtsh_ss(load_u16(block + 2));
            _mm256_storeu_si256((__m256i *) out[b].ax, nibbles(block + 4));
            continue;
        } else if (type == GGML_TYPE_Q5_1) {
            const uint8_t * block = row + b * 24;
            out[b].d = _cvtsh_ss(load_u16(block));
            out[b].m = _cvtsh_ss(load_u16(block + 2));
            uint32_t qh;
            std::memcpy(&qh, block + 4, 4);
            _mm256_storeu_si256((__m256i *) out[b].ax, _mm256_or_si256(nibbles(block + 8), fifth_bits(qh)));
            continue;
        } else {  // Q5_0
            const uint8_t * block = row + b * 22;
            out[b].d = _cvtsh_ss(load_u16(block));
            uint32_t qh;
            std::memcpy(&qh, block + 2, 4);
            x = _mm256_sub_epi8(_mm256_or_si256(nibbles(block + 6), fifth_bits(qh)), _mm256_set1_epi8(16));
        }
        _mm256_storeu_si256((__m256i *) out[b].x, x);
        _mm256_storeu_si256((__m256i *) out[b].ax, _mm256_abs_epi8(x));
    }
}

// The activation rows' scales (and Q8_1's sums s), as floats: act_d[row * n_blocks + b].
GGSPEC_AVX2 void act_scales(const DotRowsJob & job, const ActRows & acts, std::vector<float> & act_d,
                            std::vector<float> & act_s) {
    const int64_t a_begin = acts.first, a_end = acts.end;
    const bool q8_1 = q8_has_min(job.weight_type);
    const int block_bytes = q8_1 ? 36 : 34;
    act_d.resize((size_t) ((a_end - a_begin) * job.n_blocks));
    act_s.resize(q8_1 ? act_d.size() : 0);
    for (int64_t a = a_begin; a < a_end; ++a) {
        const uint8_t * row = acts.row(a);
        for (int64_t b = 0; b < job.n_blocks; ++b) {
            const size_t i = (size_t) ((a - a_begin) * job.n_blocks + b);
            act_d[i] = _cvtsh_ss(load_u16(row + b * block_bytes));
            if (q8_1) act_s[i] = _cvtsh_ss(load_u16(row + b * block_bytes + 2));
        }
    }
}

// The 8 exact integer lanes of a block: ggml's sign trick, or for the unsigned
// values of Q4_1 and Q5_1 their plain product.
GGSPEC_AVX2 __m256i integer_lanes(__m256i ax, __m256i x, __m256i y, bool unsigned_x) {
    const __m256i signed_y = unsigned_x ? y : _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, signed_y), _mm256_set1_epi16(1));
}

GGSPEC_AVX2 int32_t sum_lanes(__m256i lanes) {
    alignas(32) int32_t l[8];
    _mm256_store_si256((__m256i *) l, lanes);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// Paired: IQ4_NL's two passes over its blocks (see q8_blocks_paired).
template <int TW, int TA, bool Paired>
GGSPEC_AVX2 void tile(const DotRowsJob & job, const ActRows & acts, const Avx2Block * weights, int64_t w0,
                      const float * act_d, const float * act_s, int64_t a0, int64_t a, const NextTile & next) {
    const int64_t nb = job.n_blocks;
    const bool with_min = q8_has_min(job.weight_type);
    const int block_bytes = with_min ? 36 : 34, qs_offset = with_min ? 4 : 2;
    constexpr int passes = Paired ? 2 : 1;
    const int64_t end = Paired ? nb / 2 * 2 : nb;
    __m256 acc[TW][TA];
    float mins[TW][TA];
    alignas(32) float first[TW][TA][8];  // paired blocks: the first pass's lanes
    for (int pass = 0; pass < passes; ++pass) {
        for (int w = 0; w < TW; ++w)
            for (int r = 0; r < TA; ++r) acc[w][r] = _mm256_setzero_ps(), mins[w][r] = 0.0f;
        for (int64_t b = pass; b < end; b += passes) {
            next.fetch(b);
            __m256i y[TA];
            for (int r = 0; r < TA; ++r) {
                const uint8_t * row = acts.row(a0 + a + r);
                y[r] = _mm256_loadu_si256((const __m256i *) (row + b * block_bytes + qs_offset));
            }
            for (int w = 0; w < TW; ++w) {
                const Avx2Block & wb = weights[w * nb + b];
                const __m256i ax = _mm256_loadu_si256((const __m256i *) wb.ax);
                const __m256i x = with_min ? ax : _mm256_loadu_si256((const __m256i *) wb.x);  // unsigned: no sign
                for (int r = 0; r < TA; ++r) {
                    const __m256i lanes = integer_lanes(ax, x, y[r], with_min);
                    const size_t i = (size_t) ((a + r) * nb + b);
                    acc[w][r] = _mm256_fmadd_ps(_mm256_set1_ps(wb.d * act_d[i]), _mm256_cvtepi32_ps(lanes), acc[w][r]);
                    if (with_min) mins[w][r] = __builtin_fmaf(wb.m, act_s[i], mins[w][r]);
                }
            }
        }
        if (pass + 1 < passes) {
            for (int w = 0; w < TW; ++w)
                for (int r = 0; r < TA; ++r) _mm256_store_ps(first[w][r], acc[w][r]);
        }
    }
    alignas(32) float l[8];
    for (int w = 0; w < TW; ++w) {
        for (int r = 0; r < TA; ++r) {
            _mm256_store_ps(l, acc[w][r]);
            if (Paired) {
                for (int i = 0; i < 8; ++i) l[i] = first[w][r][i] + l[i];
            }
            float sum = hsum8(l);
            if (end < nb) {  // the unpaired last block
                const Avx2Block & wb = weights[w * nb + end];
                const uint8_t * row = acts.row(a0 + a + r);
                const __m256i y = _mm256_loadu_si256((const __m256i *) (row + end * block_bytes + qs_offset));
                const __m256i ax = _mm256_loadu_si256((const __m256i *) wb.ax);
                const __m256i x = _mm256_loadu_si256((const __m256i *) wb.x);
                const int32_t dot = sum_lanes(integer_lanes(ax, x, y, false));
                sum = __builtin_fmaf(wb.d * act_d[(a + r) * nb + end], (float) dot, sum);
            }
            job.dst[(a0 + a + r) * job.dst_stride + w0 + w] = with_min ? sum + mins[w][r] : sum;
        }
    }
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job) : job_(job) { weights_.resize((size_t) (kTileW * job.n_blocks)); }
    void prepare(const ActRows & acts) {
        acts_ = acts;
        act_scales(job_, acts, act_d_, act_s_);
    }
    void decode(int64_t w, int64_t slot) {
        decode_row(job_.weight_type, (const uint8_t *) job_.weights + w * job_.row_bytes, job_.n_blocks,
                   weights_.data() + slot * job_.n_blocks);
    }
    NextTile next_tile;

    template <int TW>
    void run(int64_t w0, int64_t slot, int64_t a0, int64_t a_end) {
        const Avx2Block * weights = weights_.data() + slot * job_.n_blocks;
        int64_t a = 0;
        const bool paired = q8_blocks_paired(job_.weight_type);
        for (; a + kTileA <= a_end - a0; a += kTileA) {
            (paired ? tile<TW, kTileA, true> : tile<TW, kTileA, false>)(job_, acts_, weights, w0, act_d_.data(),
                                                                        act_s_.data(), a0, a, next_tile);
        }
        for (; a < a_end - a0; ++a) {
            (paired ? tile<TW, 1, true> : tile<TW, 1, false>)(job_, acts_, weights, w0, act_d_.data(), act_s_.data(),
                                                              a0, a, next_tile);
        }
    }

private:
    const DotRowsJob & job_;
    ActRows acts_{};
    std::vector<Avx2Block> & weights_ = thread_buffer<Avx2Block>();  // this thread's, reused across calls
    std::vector<float> & act_d_ = thread_buffer<float, 0>();
    std::vector<float> & act_s_ = thread_buffer<float, 1>();
};


}  // namespace

void q8_dot_rows_avx2(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<kTileW>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
