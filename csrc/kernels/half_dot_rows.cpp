#include "kernels/half_dot_rows.h"

#include "kernels/mask_span.h"
#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ggspec {
namespace {

constexpr int kStep = 32;  // values per step of ggml's loop
constexpr int kAccs = 4;   // its accumulators, 8 lanes each
constexpr int kTileA = 8;  // activation rows per weight row at a time: 8 ymm accumulators
constexpr int64_t kWeightBlockBytes = 64 * 1024;  // weight rows that every tile meets in L2
constexpr int64_t kWideValues = 256;  // the longest rows tile_wide takes (attention's key rows)

// 8 halves as floats: exact for both types.
template <bool Bf16>
GGSPEC_AVX2 __m256 load8(const uint16_t * h) {
    const __m128i bits = _mm_loadu_si128((const __m128i *) h);
    if constexpr (Bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
    return _mm256_cvtph_ps(bits);
}

template <bool Bf16>
GGSPEC_AVX2 float load1(uint16_t h) {
    if constexpr (Bf16) {
        const uint32_t bits = (uint32_t) h << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
    }
    return _cvtsh_ss(h);
}

// A row of n halves as floats.
template <bool Bf16>
GGSPEC_AVX2 void to_float(const uint16_t * h, float * out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<Bf16>(h + i));
    for (; i < n; ++i) out[i] = load1<Bf16>(h[i]);
}

// Whether step s of a row of halves holds a nonzero value (signs ignored: -0
// adds nothing either).
GGSPEC_AVX2 bool nonzero_step(const uint16_t * h, int64_t s) {
    const __m256i magnitudes = _mm256_set1_epi16(0x7fff);
    const __m256i bits = _mm256_or_si256(_mm256_loadu_si256((const __m256i *) (h + s * kStep)),
                                         _mm256_loadu_si256((const __m256i *) (h + s * kStep + 16)));
    return !_mm256_testz_si256(bits, magnitudes);
}

// The steps of a row that hold a nonzero value (attention's masked
// probabilities are exact zeros), within its first `steps`.
GGSPEC_AVX2 Span nonzero_steps(const uint16_t * h, int64_t steps) {
    Span s{0, steps};
    while (s.lo < s.hi && !nonzero_step(h, s.lo)) ++s.lo;
    while (s.hi > s.lo && !nonzero_step(h, s.hi - 1)) --s.hi;
    return s;
}

// Two facts let a tile skip work without changing a bit. A step of 32 values
// whose activations are all zero adds +-0 products to accumulators that start
// at +0, which leaves each lane as it was (products of two halves never
// underflow a float, so no lane is ever -0); ggml's loop covers the same
// steps, so skipping them at either end keeps every other FMA in its order.
// And an output whose mask entry is -inf is -inf after the mask whatever it
// was, so it is written as 0 (DotRowsJob::mask).
class Kernel {
public:
    Kernel(const DotRowsJob & job, int64_t w_begin, int64_t w_end, bool avx512)
        : job_(job), n_(job.n_blocks), np_(job.n_blocks & ~(int64_t) (kStep - 1)), stride_((n_ + 7) / 8 * 8),
          w_begin_(w_begin), w_end_(w_end), avx512_(avx512) {}

    void prepare(const ActRows & acts) {
        Buffer<float> & rows = thread_buffer<float>();
        Buffer<Span> & steps = thread_buffer<Span, 0>();
        Buffer<Span> & keys = thread_buffer<Span, 1>();
        const int64_t n_rows = acts.end - acts.first;
        rows.resize((size_t) (n_rows * stride_));
        steps.resize((size_t) n_rows);
        keys.resize((size_t) n_rows);
        for (int64_t a = acts.first; a < acts.end; ++a) {
            const auto * h = (const uint16_t *) acts.row(a);
            (bf16() ? to_float<true> : to_float<false>)(h, rows.data() + (a - acts.first) * stride_, n_);
            steps[a - acts.first] = nonzero_steps(h, np_ / kStep);
            keys[a - acts.first] = job_.mask ? unmasked(job_.mask + a * job_.mask_stride, w_end_)
                                             : Span{0, INT64_MAX};
        }
        acts_ = rows.data();
        a0_ = acts.first;
        if (avx512_) interleave_pairs(n_rows);
        // The chunk's tiles: 8 rows at a time, then 4, 2 and 1, within each run of
        // rows whose spans overlap. A batch of several sequences puts each
        // sequence's rows over its own region of the cache: a tile across two
        // would compute everything between them.
        Buffer<Tile> & tiles = thread_buffer<Tile>();
        tiles.clear();
        for (int64_t a = acts.first; a < acts.end;) {
            int64_t run_end = a + 1;
            while (run_end < acts.end && overlap(keys, steps, run_end - 1 - a0_, run_end - a0_)) ++run_end;
            for (; a < run_end;) {
                const int64_t left = run_end - a;
                const int n = left >= kTileA ? kTileA : left >= 4 ? 4 : left >= 2 ? 2 : 1;
                tiles.push_back({a, n, spans(keys.data() + (a - a0_), n), spans(steps.data() + (a - a0_), n)});
                a += n;
            }
        }
        tiles_ = tiles.data();
        n_tiles_ = (int64_t) tiles.size();
    }
    // The job's weight rows in blocks that stay in L2, each read from memory
    // once; within a block, each tile of the chunk (8 activation rows, in L1)
    // against the block's rows that its mask leaves, which stream past it.
    void run_chunk() const {
        for (const Tile * t = tiles_; t < tiles_ + n_tiles_; ++t) zero_masked(*t);
        const int64_t block = std::max<int64_t>(kTileA, kWeightBlockBytes / (int64_t) job_.row_bytes);
        for (int64_t w0 = w_begin_; w0 < w_end_; w0 += block) {
            const Span rows{w0, std::min(w_end_, w0 + block)};
            for (const Tile * t = tiles_; t < tiles_ + n_tiles_; ++t) {
                const bool fetch = t == tiles_;  // the block's first tile reads it from memory
                if (t->rows == kTileA) {
                    bf16() ? tile_rows<kTileA, true>(*t, rows, fetch) : tile_rows<kTileA, false>(*t, rows, fetch);
                } else if (t->rows == 4) {
                    bf16() ? tile_rows<4, true>(*t, rows, fetch) : tile_rows<4, false>(*t, rows, fetch);
                } else if (t->rows == 2) {
                    bf16() ? tile_rows<2, true>(*t, rows, fetch) : tile_rows<2, false>(*t, rows, fetch);
                } else {
                    bf16() ? tile_rows<1, true>(*t, rows, fetch) : tile_rows<1, false>(*t, rows, fetch);
                }
            }
        }
    }

private:
    // Activation rows a..a + rows - 1, the weight rows their mask leaves, and
    // the steps where any of them is nonzero.
    struct Tile {
        int64_t a;
        int rows;
        Span keys, steps;
    };

    bool bf16() const { return job_.weight_type == GGML_TYPE_BF16; }

    // Whether rows i and j of the chunk share keys and nonzero steps (an empty
    // span shares with anything: the row costs nothing in any tile).
    static bool overlap(const Buffer<Span> & keys, const Buffer<Span> & steps, int64_t i, int64_t j) {
        const auto meet = [](Span x, Span y) {
            return x.lo >= x.hi || y.lo >= y.hi || (x.lo < y.hi && y.lo < x.hi);
        };
        return meet(keys[i], keys[j]) && meet(steps[i], steps[j]);
    }

    // The union of n rows' spans ({0, 0} when all are empty).
    static Span spans(const Span * s, int64_t n) {
        Span u{INT64_MAX, INT64_MIN};
        for (int64_t r = 0; r < n; ++r) {
            if (s[r].lo < s[r].hi) u = {std::min(u.lo, s[r].lo), std::max(u.hi, s[r].hi)};
        }
        return u.lo < u.hi ? u : Span{0, 0};
    }

    // This job's outputs of the tile's rows outside its keys, as 0, one
    // contiguous run per row and end.
    void zero_masked(const Tile & t) const {
        const Span keys = computed(t, {w_begin_, w_end_});
        for (int r = 0; r < t.rows; ++r) {
            float * out = job_.dst + (t.a + r) * job_.dst_stride;
            std::fill(out + w_begin_, out + keys.lo, 0.0f);
            std::fill(out + keys.hi, out + w_end_, 0.0f);
        }
    }

    // The weight rows among `rows` inside the tile's keys.
    static Span computed(const Tile & t, Span rows) {
        const int64_t lo = std::clamp(t.keys.lo, rows.lo, rows.hi);
        return {lo, std::clamp(t.keys.hi, lo, rows.hi)};
    }

    // fetch: request the row kFetchAhead bytes of values ahead of the row being
    // computed (a tile computes too slowly per byte for the hardware prefetcher to
    // keep ahead). Rows may be strided: a head's keys sit between the other heads'.
    // `ahead` must be inlined before GCC's pure-const pass: a prefetch is no side
    // effect to it, so it found the lambda pure and dropped every call, and until
    // then no F16 tile prefetched (an 8-row verify of SmolLM2 now 6% faster, its
    // key rows' first loads no longer half of the K·q tile's samples). The rows
    // go to L2, as the quantized kernels' stream does; into L1 the K·q tile's
    // first loads still waited on memory at long contexts. Against L1
    // (same bits, one process alternating, Zen 4, 2 threads): SmolLM2's decode
    // step over 3000 cached positions 0.774 (40 of 40 faster), its 8-row verify
    // 0.923; over 300 the step 0.98-1.00 and the verify 0.98; an F16 SmolLM2's
    // 8-row verify 0.70 on vnni and 0.89 on avx2. Half the distance, or twice,
    // was slower.
    template <int TA, bool Bf16>
    void tile_rows(const Tile & t, Span rows, bool fetch) const {
        const Span keys = computed(t, rows);
        const auto row = [&](int64_t w) {
            return (const uint16_t *) ((const uint8_t *) job_.weights + w * job_.row_bytes);
        };
        const int64_t used = n_ * 2, distance = std::max<int64_t>(1, kFetchAhead / used);
        const auto ahead = [&](int64_t w) __attribute__((always_inline)) {
            if (!fetch || w + distance >= w_end_) return;
            const uint8_t * first = (const uint8_t *) row(w + distance);
            for (const uint8_t * line = first; line < first + used; line += 64) __builtin_prefetch(line, 0, 2);
        };
        if constexpr (TA <= 4 && !Bf16) {
            if (avx512_ && np_ == n_ && n_ <= kWideValues) {  // a few rows over short ones: tile_wide
                constexpr int64_t kPer = 16 / TA;
                for (int64_t w = keys.lo; w < keys.hi; w += kPer) {
                    const int64_t m = std::min(kPer, keys.hi - w);
                    for (int64_t i = 0; i < m; ++i) ahead(w + i);
                    tile_wide<TA>(w, m, t.a, t.steps);
                }
                return;
            }
        }
        if constexpr (TA % 2 == 0) {
            // pairs_ pairs the chunk's rows 2p and 2p + 1: a tile after a run that
            // ended on an odd row (attention sharp enough that neighbouring rows'
            // probabilities share no step) takes the 8-lane code instead
            if (avx512_ && (t.a - a0_) % 2 == 0) {
                int64_t w = keys.lo;
                for (; w + 2 <= keys.hi; w += 2) {
                    ahead(w), ahead(w + 1);
                    const uint16_t * two[2] = {row(w), row(w + 1)};
                    tile_pairs<TA, 2, Bf16>(two, w, t.a, t.steps);
                }
                if (w < keys.hi) {
                    ahead(w);
                    const uint16_t * one[1] = {row(w)};
                    tile_pairs<TA, 1, Bf16>(one, w, t.a, t.steps);
                }
                return;
            }
        }
        for (int64_t w = keys.lo; w < keys.hi; ++w) {
            ahead(w);
            tile<TA, Bf16>(row(w), w, t.a, t.steps);
        }
    }

    // The chunk's rows again, pair by pair, each 8 values of row 2p beside the
    // same 8 of row 2p + 1: one 16-lane FMA then runs both rows' 8-lane
    // accumulators, each lane's FMA the one the 8-lane code would run.
    void interleave_pairs(int64_t n_rows) {
        Buffer<float> & pairs = thread_buffer<float, 1>();
        // every value is written below: no fill first (at 3000 cached positions
        // filling the 8-row verify's probability pairs with zeros cost it 5%)
        pairs.resize((size_t) ((n_rows + 1) / 2 * 2 * stride_));
        for (int64_t r = 0; r < n_rows; ++r) {
            for (int64_t g = 0; g < stride_ / 8; ++g) {
                std::memcpy(pairs.data() + (r / 2) * 2 * stride_ + g * 16 + (r % 2) * 8, acts_ + r * stride_ + g * 8,
                            8 * sizeof(float));
            }
        }
        for (int64_t g = 0; n_rows % 2 && g < stride_ / 8; ++g) {  // an odd last row's partner
            std::fill_n(pairs.data() + (n_rows / 2) * 2 * stride_ + g * 16 + 8, 8, 0.0f);
        }
        pairs_ = pairs.data();
    }

    // One weight row against activation rows a..a + TA - 1, over the given steps.
    // Each accumulator's FMAs run in ggml's order; J of the 4 accumulators at a time
    // keep J x TA chains in flight (one chain waits on the FMA's latency).
    template <int TA, bool Bf16>
    GGSPEC_AVX2 void tile(const uint16_t * row, int64_t w, int64_t a, Span steps) const {
        constexpr int J = TA >= 8 ? 1 : TA >= 4 ? 2 : 4;  // 16 ymm registers
        const float * y = acts_ + (a - a0_) * stride_;
        alignas(32) float acc[TA][kAccs][8];
        for (int j0 = 0; j0 < kAccs; j0 += J) {
            __m256 sum[J][TA];
            for (int j = 0; j < J; ++j) {
                for (int r = 0; r < TA; ++r) sum[j][r] = _mm256_setzero_ps();
            }
            for (int64_t k = steps.lo * kStep + 8 * j0; k < steps.hi * kStep; k += kStep) {
                for (int j = 0; j < J; ++j) {
                    const __m256 wv = load8<Bf16>(row + k + 8 * j);
                    for (int r = 0; r < TA; ++r) {
                        sum[j][r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(y + r * stride_ + k + 8 * j), sum[j][r]);
                    }
                }
            }
            for (int j = 0; j < J; ++j) {
                for (int r = 0; r < TA; ++r) _mm256_store_ps(acc[r][j0 + j], sum[j][r]);
            }
        }
        finish<TA, Bf16>(acc, row, w, a);
    }

    // tile's accumulators for NW weight rows (rows w, w + 1), two activation rows
    // per 16-lane FMA (the vnni path's CPUs). The NW rows share each load of the
    // activations, which come from L2 once a tile's rows outgrow L1: at 8 rows of
    // 2048 and 3072 values two weight rows ran 29-37% faster (1024 values: the
    // same, 2 threads, Zen 4). The 4 accumulators run in NW passes over the
    // steps, 4 / NW of them a pass (16 registers at 8 rows), and each pass
    // leaves its part of ggml's (a0 + a2) + (a1 + a3) in registers (for a key
    // row of 64 values the loop is two steps, and a round trip through memory
    // cost more than it).
    template <int TA, int NW, bool Bf16>
    GGSPEC_AVX512 void tile_pairs(const uint16_t * const (&rows)[NW], int64_t w, int64_t a, Span steps) const {
        const float * y = pairs_ + (a - a0_) * stride_;  // a - a0_ is even (tile_rows)
        constexpr int J = kAccs / NW;  // accumulators a pass runs: h, h + NW, ...
        __m512 halves[2][NW][TA / 2];  // each row's and pair's a0 + a2 and a1 + a3
#pragma GCC unroll 2
        for (int h = 0; h < NW; ++h) {
            __m512 sum[NW][J][TA / 2];
#pragma GCC unroll 2  // sum stays in registers only where every index is a constant
            for (int i = 0; i < NW; ++i)
#pragma GCC unroll 4
                for (int j = 0; j < J; ++j)
#pragma GCC unroll 4
                    for (int p = 0; p < TA / 2; ++p) sum[i][j][p] = _mm512_setzero_ps();
            for (int64_t k = steps.lo * kStep; k < steps.hi * kStep; k += kStep) {
#pragma GCC unroll 4
                for (int j = 0; j < J; ++j) {
                    const int64_t at = k + 8 * (h + NW * j);
                    __m512 wv[NW];
#pragma GCC unroll 2
                    for (int i = 0; i < NW; ++i) {
                        const __m256 w8 = load8<Bf16>(rows[i] + at);
                        wv[i] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(w8)));
                    }
#pragma GCC unroll 4
                    for (int p = 0; p < TA / 2; ++p) {
                        __m512 yv = _mm512_loadu_ps(y + p * 2 * stride_ + 2 * at);
                        in_register(yv);  // one load for the NW rows' FMAs, not one folded into each
#pragma GCC unroll 2
                        for (int i = 0; i < NW; ++i) sum[i][j][p] = _mm512_fmadd_ps(wv[i], yv, sum[i][j][p]);
                    }
                }
            }
#pragma GCC unroll 2
            for (int x = h; x < 2; x += NW) {  // a_x + a_x+2, accumulators x and x + 2 of this pass
#pragma GCC unroll 2
                for (int i = 0; i < NW; ++i)
#pragma GCC unroll 4
                    for (int p = 0; p < TA / 2; ++p) {
                        halves[x][i][p] = _mm512_add_ps(sum[i][(x - h) / NW][p], sum[i][(x - h + 2) / NW][p]);
                    }
            }
        }
        if constexpr (NW == 2 && TA == 8 && !Bf16) {
            if (np_ == n_) return finish_two(halves, w, a);
        }
#pragma GCC unroll 2
        for (int i = 0; i < NW; ++i) {
            __m256 c[8];
#pragma GCC unroll 4
            for (int p = 0; p < TA / 2; ++p) {  // both rows' (a0 + a2) + (a1 + a3), lane by lane
                const __m512 pair = _mm512_add_ps(halves[0][i][p], halves[1][i][p]);
                c[2 * p] = _mm512_castps512_ps256(pair);
                c[2 * p + 1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pair), 1));
            }
            finish<TA, Bf16>(c, rows[i], w + i, a);
        }
    }

    // F16 weight rows w..w + m - 1 (m <= 16 / R) against R activation rows from
    // a, for rows without a scalar tail on AVX-512: the 16 outputs of up to 16 /
    // R weight rows share one ggml reduction across registers, where the 8-row
    // tiles' finish_two needs 8 rows. A step's 32 values are two 16-lane
    // halves: the first carries accumulators 0 and 1 of ggml's 8-lane loop
    // side by side, the second 2 and 3, so each lane takes ggml's FMAs in
    // order, and their sum is (a0 + a2 | a1 + a3). A decode step's 3 query
    // heads of a KV head (SmolLM2) went through a 2-row pair tile and the
    // 8-lane one-row tile, whose reduction summed 8 lanes for one output.
    // Against those tiles (same bits, one process alternating, Zen 4, 2
    // threads, vnni-block): SmolLM2's decode step 0.97 over 300 cached
    // positions and 0.93 over 3000 (39 of 40 faster), Gemma 3's 0.97 over
    // 3000; 8-row verifies, whose tiles are 8 rows, the same. Rows longer than
    // kWideValues stay on the pair tiles, which share each activation load
    // between two weight rows: an F16 SmolLM2's 4-row verify ran 23% slower
    // with its 576-value rows here.
    template <int R>
    GGSPEC_AVX512 void tile_wide(int64_t w, int64_t m, int64_t a, Span steps) const {
        constexpr int kPer = 16 / R;
        const float * y = acts_ + (a - a0_) * stride_;
        __m512 t[16];
        for (int k = 0; k < kPer; ++k) {
            if (k >= m) {
                for (int r = 0; r < R; ++r) t[k * R + r] = _mm512_setzero_ps();
                continue;
            }
            const auto * row = (const uint16_t *) ((const uint8_t *) job_.weights + (w + k) * job_.row_bytes);
            __m512 low[R], high[R];
            for (int r = 0; r < R; ++r) low[r] = high[r] = _mm512_setzero_ps();
            for (int64_t i = steps.lo * kStep; i < steps.hi * kStep; i += kStep) {
                const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (row + i)));
                const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (row + i + 16)));
                for (int r = 0; r < R; ++r) {
                    low[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y + r * stride_ + i), low[r]);
                    high[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y + r * stride_ + i + 16), high[r]);
                }
            }
            for (int r = 0; r < R; ++r) t[k * R + r] = _mm512_add_ps(low[r], high[r]);
        }
        // output o = k * R + r from t[o]: c = its low 8 lanes + its high 8, then
        // ggml's end of the dot (dot_ends); each row's outputs then adjacent, as
        // dst holds them
        __m512 c[8];
        for (int i = 0; i < 8; ++i) {
            c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        }
        const __m512 sums = dot_ends(c);
        alignas(64) static constexpr auto order = wide_order<R>();
        const __m512 out = _mm512_permutexvar_ps(_mm512_load_si512(order.data()), sums);
        const __mmask16 keep = (__mmask16) ((1u << m) - 1);
        for (int r = 0; r < R; ++r) {
            float * dst = job_.dst + (a + r) * job_.dst_stride + w;
            if constexpr (R == 1) {
                _mm512_mask_storeu_ps(dst, keep, out);
            } else if constexpr (R == 2) {
                const __m256 half = r ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(out), 1))
                                      : _mm512_castps512_ps256(out);
                _mm256_mask_storeu_ps(dst, (__mmask8) keep, half);
            } else {
                _mm_mask_storeu_ps(dst, (__mmask8) keep, quarter(out, r));
            }
        }
    }

    // tile_wide's lane order: row r's outputs in lanes r * 16 / R onwards.
    template <int R>
    static constexpr std::array<int32_t, 16> wide_order() {
        std::array<int32_t, 16> order{};
        for (int r = 0; r < R; ++r) {
            for (int k = 0; k < 16 / R; ++k) {
                const int o = k * R + r;
                order[(size_t) (r * 16 / R + k)] = 4 * (o % 4) + o / 4;
            }
        }
        return order;
    }

    // Lanes 4q..4q + 3 of v, each extract's index a literal: the intrinsic needs
    // a constant whether or not the compiler unrolls the caller's loop.
    __attribute__((always_inline)) GGSPEC_AVX512 static inline __m128 quarter(__m512 v, int q) {
        return q == 0   ? _mm512_castps512_ps128(v)
               : q == 1 ? _mm512_extractf32x4_ps(v, 1)
               : q == 2 ? _mm512_extractf32x4_ps(v, 2)
                        : _mm512_extractf32x4_ps(v, 3);
    }

    // Sixteen F16 dots' 8-lane sums (c[i]: dots 2i and 2i + 1 in its low and
    // high 8 lanes) summed as ggml's vec_dot ends them: low 4 lanes + high 4,
    // then its two hadds. Dot o's sum lands in lane 4 * (o % 4) + o / 4.
    __attribute__((always_inline)) GGSPEC_AVX512 static inline __m512 dot_ends(const __m512 (&c)[8]) {
        __m512 t[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * p], c[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(c[2 * p], c[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
        }
        return hadd(hadd(t[0], t[1]), hadd(t[2], t[3]));
    }

    // An hadd in each 128-bit lane: x0 + x1, x2 + x3, y0 + y1, y2 + y3.
    __attribute__((always_inline)) GGSPEC_AVX512 static inline __m512 hadd(__m512 x, __m512 y) {
        return _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
    }

    // finish for two weight rows against 8 activation rows with no scalar
    // tail, F16's order: the 16 outputs' lanes summed across 16-lane
    // registers (ggml's low half + high half, then its two hadds), 21
    // instructions against 50 for two rounds of lane_sums8, and each
    // activation row's two outputs, adjacent in dst, stored at once. SmolLM2's
    // hd-64 K·Q dots are two steps long: its 8-row verify took 1.1% less.
    GGSPEC_AVX512 void finish_two(const __m512 (&halves)[2][2][4], int64_t w, int64_t a) const {
        __m512 c[8];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            c[2 * p] = _mm512_add_ps(halves[0][0][p], halves[1][0][p]);      // rows 2p, 2p + 1 of w
            c[2 * p + 1] = _mm512_add_ps(halves[0][1][p], halves[1][1][p]);  // and of w + 1
        }
        // lane 4q + p: output (w + q / 2, row 2p + q % 2); order puts output
        // (w + i, row r) in lane 2r + i
        const __m512 sums = dot_ends(c);
        const __m512i order = _mm512_setr_epi32(0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15);
        const __m512 out = _mm512_permutexvar_ps(order, sums);
        float * dst = job_.dst + a * job_.dst_stride + w;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            const __m128 rows = quarter(out, q);
            _mm_storel_pi((__m64 *) (dst + 2 * q * job_.dst_stride), rows);
            _mm_storeh_pi((__m64 *) (dst + (2 * q + 1) * job_.dst_stride), rows);
        }
    }

    // The outputs from the accumulators, as ggml's vec_dot ends.
    template <int TA, bool Bf16>
    GGSPEC_AVX2 void finish(const float (&acc)[TA][kAccs][8], const uint16_t * row, int64_t w, int64_t a) const {
        __m256 c[8];
        for (int r = 0; r < TA; ++r) {
            c[r] = _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(acc[r][0]), _mm256_load_ps(acc[r][2])),
                                 _mm256_add_ps(_mm256_load_ps(acc[r][1]), _mm256_load_ps(acc[r][3])));
        }
        finish<TA, Bf16>(c, row, w, a);
    }

    // The same from each output's accumulators already summed, c_r = (a0 + a2) + (a1 + a3).
    template <int TA, bool Bf16>
    __attribute__((always_inline)) GGSPEC_AVX2 inline void finish(__m256 (&c)[8], const uint16_t * row, int64_t w, int64_t a) const {
        const float * y = acts_ + (a - a0_) * stride_;
        for (int r = TA; r < 8; ++r) c[r] = c[0];  // a short tile's unused lanes
        alignas(32) float sums[8];
        _mm256_store_ps(sums, lane_sums8<!Bf16>(c));  // F16: the two hadds; BF16: hsum_float_8's order
        for (int r = 0; r < TA; ++r) {
            // ggml then adds the last n % 32 products one by one in double (BF16: onto a
            // zeroed double, so that -0 becomes +0)
            float out = Bf16 ? sums[r] + 0.0f : sums[r];
            if (np_ < n_) {
                double sum = (double) out;
                for (int64_t i = np_; i < n_; ++i) sum += (double) (load1<Bf16>(row[i]) * y[r * stride_ + i]);
                out = (float) sum;
            }
            job_.dst[(a + r) * job_.dst_stride + w] = out;
        }
    }

    const DotRowsJob & job_;
    const int64_t n_;       // values per row
    const int64_t np_;      // the values ggml's vector loop takes; the rest is its scalar tail
    const int64_t stride_;  // floats between converted activation rows
    const int64_t w_begin_, w_end_;  // the weight rows this job computes
    const bool avx512_;             // pairs of rows per 16-lane FMA
    const float * acts_ = nullptr;  // the chunk's rows, converted
    const float * pairs_ = nullptr; // the same, interleaved by pairs (avx512_)
    const Tile * tiles_ = nullptr;  // the chunk's
    int64_t n_tiles_ = 0;
    int64_t a0_ = 0;                // the job's row that starts the chunk
};

}  // namespace

void half_dot_rows(const DotRowsJob & job, int64_t w_begin, int64_t w_end, bool avx512) {
    Kernel kernel(job, w_begin, w_end, avx512);
    for (int64_t a0 = 0; a0 < job.n_acts; a0 += kActChunk) {
        kernel.prepare(quantize_acts(job, a0, std::min(job.n_acts, a0 + kActChunk)));
        kernel.run_chunk();
    }
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
