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
};

// A weight row decoded: its blocks, and their scales d and mins m apart, so
// that 8 blocks' scales meet 8 activation scales in one vmulps.
struct DecodedRow {
    Avx2Block * blocks;
    float * d;
    float * m;
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

GGSPEC_AVX2 void decode_row(ggml_type type, const uint8_t * row, int64_t n_blocks, DecodedRow out) {
    for (int64_t b = 0; b < n_blocks; ++b) {
        __m256i x;
        if (type == GGML_TYPE_Q8_0) {
            const uint8_t * block = row + b * 34;
            out.d[b] = _cvtsh_ss(load_u16(block));
            x = _mm256_loadu_si256((const __m256i *) (block + 2));
        } else if (type == GGML_TYPE_IQ4_NL) {  // x = the table's value for the nibble
            const uint8_t * block = row + b * 18;
            out.d[b] = _cvtsh_ss(load_u16(block));
            const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) iq4_values()));
            x = _mm256_shuffle_epi8(table, nibbles(block + 2));
        } else if (type == GGML_TYPE_Q4_0) {
            const uint8_t * block = row + b * 18;
            out.d[b] = _cvtsh_ss(load_u16(block));
            x = _mm256_sub_epi8(nibbles(block + 2), _mm256_set1_epi8(8));
        } else if (type == GGML_TYPE_Q4_1) {
            const uint8_t * block = row + b * 20;
            out.d[b] = _cvtsh_ss(load_u16(block));
            out.m[b] = _cvtsh_ss(load_u16(block + 2));
            _mm256_storeu_si256((__m256i *) out.blocks[b].ax, nibbles(block + 4));
            continue;
        } else if (type == GGML_TYPE_Q5_1) {
            const uint8_t * block = row + b * 24;
            out.d[b] = _cvtsh_ss(load_u16(block));
            out.m[b] = _cvtsh_ss(load_u16(block + 2));
            uint32_t qh;
            std::memcpy(&qh, block + 4, 4);
            _mm256_storeu_si256((__m256i *) out.blocks[b].ax, _mm256_or_si256(nibbles(block + 8), fifth_bits(qh)));
            continue;
        } else {  // Q5_0
            const uint8_t * block = row + b * 22;
            out.d[b] = _cvtsh_ss(load_u16(block));
            uint32_t qh;
            std::memcpy(&qh, block + 2, 4);
            x = _mm256_sub_epi8(_mm256_or_si256(nibbles(block + 6), fifth_bits(qh)), _mm256_set1_epi8(16));
        }
        _mm256_storeu_si256((__m256i *) out.blocks[b].x, x);
        _mm256_storeu_si256((__m256i *) out.blocks[b].ax, _mm256_abs_epi8(x));
    }
}

constexpr int kGroup = 8;  // activation rows whose scale products are made at once

inline int64_t padded(int64_t n_blocks) { return (n_blocks + 7) / 8 * 8; }  // whole ymm of blocks

// The activation rows' scales d, act_d[a * n_blocks + b] (a ymm of padding at
// the end), and Q8_1's sums s by block, act_s[b * kActChunk + a] (a ymm of
// padding after the last row), as floats.
GGSPEC_AVX2 void act_scales(const DotRowsJob & job, const ActRows & acts, Buffer<float> & act_d,
                            Buffer<float> & act_s) {
    const int64_t n_acts = acts.end - acts.first, nb = job.n_blocks;
    const bool q8_1 = q8_has_min(job.weight_type);
    const int block_bytes = q8_1 ? 36 : 34;
    act_d.assign((size_t) (n_acts * nb + 8), 0.0f);
    act_s.assign(q8_1 ? (size_t) (nb * kActChunk + kGroup) : 0, 0.0f);
    for (int64_t a = 0; a < n_acts; ++a) {
        const uint8_t * row = acts.row(acts.first + a);
        for (int64_t b = 0; b < nb; ++b) {
            act_d[(size_t) (a * nb + b)] = _cvtsh_ss(load_u16(row + b * block_bytes));
            if (q8_1) act_s[(size_t) (b * kActChunk + a)] = _cvtsh_ss(load_u16(row + b * block_bytes + 2));
        }
    }
}

// For TW decoded weight rows (scales d[w * n_blocks + b], mins m likewise) and
// activation rows a.. (n of them, at most kGroup): every scale product
// d_w * d_a, products[(w * kGroup + r) * padded(n_blocks) + b], 8 blocks a
// vmulps, where ggml's dot makes each with its own multiply, the same rounding;
// and for Q4_1 and Q5_1 the min terms, mins[w * kGroup + r]: ggml's dot adds
// m * s block by block into one float (contracted to an FMA), here one lane
// per activation row, each in that order.
template <int TW>
GGSPEC_AVX2 void group_scales(const DotRowsJob & job, const float * d, const float * m, const float * act_d,
                              const float * act_s, int64_t a, int64_t n, float * products, float * mins) {
    const int64_t nb = job.n_blocks, np = padded(nb);
    for (int w = 0; w < TW; ++w) {
        for (int64_t r = 0; r < n; ++r) {
            float * out = products + (w * kGroup + r) * np;
            const float * ad = act_d + (a + r) * nb;
            for (int64_t b = 0; b < nb; b += 8) {
                _mm256_storeu_ps(out + b, _mm256_mul_ps(_mm256_loadu_ps(d + w * nb + b), _mm256_loadu_ps(ad + b)));
            }
        }
    }
    if (!q8_has_min(job.weight_type)) return;
    __m256 acc[TW];
    for (int w = 0; w < TW; ++w) acc[w] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m256 s = _mm256_loadu_ps(act_s + b * kActChunk + a);
        for (int w = 0; w < TW; ++w) acc[w] = _mm256_fmadd_ps(_mm256_set1_ps(m[w * nb + b]), s, acc[w]);
    }
    for (int w = 0; w < TW; ++w) _mm256_store_ps(mins + w * kGroup, acc[w]);
}

// The 8 exact integer lanes of a block: ggml's sign trick, or for the unsigned
// values of Q4_1 and Q5_1 their plain product.
GGSPEC_AVX2 inline __m256i integer_lanes(__m256i ax, __m256i x, __m256i y, bool unsigned_x) {
    const __m256i signed_y = unsigned_x ? y : _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, signed_y), _mm256_set1_epi16(1));
}

// TW weight rows against TA activation rows (a.. within the chunk, row r of
// the group at g + r), from the group's products and mins. Unsigned: Q4_1 and
// Q5_1, whose values need no sign. Paired: IQ4_NL's two passes over its blocks
// (see q8_blocks_paired).
template <int TW, int TA, bool Unsigned, bool Paired>
GGSPEC_AVX2 void tile(const DotRowsJob & job, const ActRows & acts, const Avx2Block * weights, int64_t w0,
                      const float * products, const float * mins, int64_t a0, int64_t a, int g,
                      const WeightStream & next) {
    const int64_t nb = job.n_blocks, np = padded(nb);
    const int block_bytes = Unsigned ? 36 : 34, qs_offset = Unsigned ? 4 : 2;
    constexpr int passes = Paired ? 2 : 1;
    const int64_t end = Paired ? nb / 2 * 2 : nb;
    const uint8_t * rows[TA];
    for (int r = 0; r < TA; ++r) rows[r] = acts.row(a0 + a + r) + qs_offset;
    const float * scale = products + g * np;  // (w * kGroup + r) * np + b
    __m256 acc[TW][TA];
    alignas(32) float first[TW][TA][8];  // paired blocks: the first pass's lanes
    for (int pass = 0; pass < passes; ++pass) {
#pragma GCC unroll 8
        for (int w = 0; w < TW; ++w)
#pragma GCC unroll 8
            for (int r = 0; r < TA; ++r) acc[w][r] = _mm256_setzero_ps();
        for (int64_t b = pass; b < end; b += passes) {
            next.fetch(b);
            __m256i y[TA];
#pragma GCC unroll 8
            for (int r = 0; r < TA; ++r) y[r] = _mm256_loadu_si256((const __m256i *) (rows[r] + b * block_bytes));
#pragma GCC unroll 8
            for (int w = 0; w < TW; ++w) {
                const Avx2Block & wb = weights[w * nb + b];
                const __m256i ax = _mm256_loadu_si256((const __m256i *) wb.ax);
                const __m256i x = Unsigned ? ax : _mm256_loadu_si256((const __m256i *) wb.x);
#pragma GCC unroll 8
                for (int r = 0; r < TA; ++r) {
                    const __m256i lanes = integer_lanes(ax, x, y[r], Unsigned);
                    const __m256 d = _mm256_broadcast_ss(scale + (w * kGroup + r) * np + b);
                    acc[w][r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[w][r]);
                }
            }
        }
        if (pass + 1 < passes) {
#pragma GCC unroll 8
            for (int w = 0; w < TW; ++w)
#pragma GCC unroll 8
                for (int r = 0; r < TA; ++r) _mm256_store_ps(first[w][r], acc[w][r]);
        }
    }
    // the outputs' lane sums 8 at a time, (w, r) at w * TA + r, in hsum_float_8's order
    static_assert(TW * TA <= 8, "one transposed sum takes the tile's outputs");
    __m256 lanes[8];
#pragma GCC unroll 8  // acc stays in registers only where every index is a constant
    for (int w = 0; w < TW; ++w) {
#pragma GCC unroll 8
        for (int r = 0; r < TA; ++r) {
            lanes[w * TA + r] = Paired ? _mm256_add_ps(_mm256_load_ps(first[w][r]), acc[w][r]) : acc[w][r];
        }
    }
    for (int i = TW * TA; i < 8; ++i) lanes[i] = _mm256_setzero_ps();
    alignas(32) float sums[8];
    _mm256_store_ps(sums, lane_sums8<false>(lanes));
    // staged by activation row, then a row's TW outputs written at once: one by
    // one, the stores to an LM head's rows of dst are 1 MB apart, equal in their
    // low 12 bits (with them and a scalar sum per output, Gemma 3's Q8_0 LM head
    // at 8 rows took 8% longer, 2 threads, Zen 4)
    alignas(16) float staged[TA][TW];
    for (int w = 0; w < TW; ++w) {
        for (int r = 0; r < TA; ++r) {
            float sum = sums[w * TA + r];
            if (end < nb) {  // the unpaired last block
                const Avx2Block & wb = weights[w * nb + end];
                const __m256i y = _mm256_loadu_si256((const __m256i *) (rows[r] + end * block_bytes));
                const __m256i ax = _mm256_loadu_si256((const __m256i *) wb.ax);
                const __m256i x = _mm256_loadu_si256((const __m256i *) wb.x);
                const int32_t dot = sum_int_lanes(integer_lanes(ax, x, y, false));
                sum = __builtin_fmaf(scale[(w * kGroup + r) * np + end], (float) dot, sum);
            }
            staged[r][w] = Unsigned ? sum + mins[w * kGroup + g + r] : sum;
        }
    }
    for (int r = 0; r < TA; ++r) std::memcpy(job.dst + (a0 + a + r) * job.dst_stride + w0, staged[r], sizeof staged[r]);
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job) : job_(job) {
        const size_t nb = (size_t) job.n_blocks;
        weights_.resize(kTileW * nb);
        d_.resize(kTileW * nb + 8);  // vmulps reads up to a ymm past the last block
        m_.resize(kTileW * nb);
        products_.resize(kTileW * kGroup * (size_t) padded(job.n_blocks));
    }
    void prepare(const ActRows & acts) {
        acts_ = acts;
        act_scales(job_, acts, act_d_, act_s_);
    }
    void decode(int64_t w, int64_t slot) {
        const int64_t nb = job_.n_blocks;
        decode_row(job_.weight_type, (const uint8_t *) job_.weights + w * job_.row_bytes, nb,
                   DecodedRow{weights_.data() + slot * nb, d_.data() + slot * nb, m_.data() + slot * nb});
    }
    WeightStream stream;

    template <int TW>
    void run(int64_t w0, int64_t slot, int64_t a0, int64_t a_end) {
        if (q8_has_min(job_.weight_type)) return run_as<TW, true, false>(w0, slot, a0, a_end);
        if (q8_blocks_paired(job_.weight_type)) return run_as<TW, false, true>(w0, slot, a0, a_end);
        run_as<TW, false, false>(w0, slot, a0, a_end);
    }

private:
    template <int TW, bool Unsigned, bool Paired>
    void run_as(int64_t w0, int64_t slot, int64_t a0, int64_t a_end) {
        const int64_t nb = job_.n_blocks, n = a_end - a0;
        const Avx2Block * weights = weights_.data() + slot * nb;
        alignas(32) float mins[TW * kGroup];
        for (int64_t group = 0; group < n; group += kGroup) {
            const int64_t group_end = std::min(n, group + kGroup);
            group_scales<TW>(job_, d_.data() + slot * nb, m_.data() + slot * nb, act_d_.data(), act_s_.data(),
                             group, group_end - group, products_.data(), mins);
            int64_t a = group;
            for (; a + kTileA <= group_end; a += kTileA) {
                tile<TW, kTileA, Unsigned, Paired>(job_, acts_, weights, w0, products_.data(), mins, a0, a,
                                                   (int) (a - group), stream);
            }
            for (; a < group_end; ++a) {
                tile<TW, 1, Unsigned, Paired>(job_, acts_, weights, w0, products_.data(), mins, a0, a,
                                              (int) (a - group), stream);
            }
        }
    }

    const DotRowsJob & job_;
    ActRows acts_{};
    // this thread's, reused across calls
    Buffer<Avx2Block> & weights_ = thread_buffer<Avx2Block>();
    Buffer<float> & d_ = thread_buffer<float, 0>();
    Buffer<float> & m_ = thread_buffer<float, 1>();
    Buffer<float> & act_d_ = thread_buffer<float, 2>();
    Buffer<float> & act_s_ = thread_buffer<float, 3>();
    Buffer<float> & products_ = thread_buffer<float, 4>();
};


}  // namespace

void q8_dot_rows_avx2(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<kTileW>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
