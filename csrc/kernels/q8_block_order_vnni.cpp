// The block order of q8_dot_rows.h on AVX512-VNNI (path vnni-block): each
// block's integer dot whole, then one FMA. Three tile shapes share that order:
//  - wide (groups of 8 activation rows, and a last group of 5-7): a row per
//    lane. A weight tile is decoded once to unsigned bytes; each of a block's
//    eight 4-value groups is broadcast against the 8 rows' matching groups, so
//    the block's dot builds up in each row's lane, and one cvt, one vmulps and
//    one FMA serve 8 outputs. vec_dot's order needs a cvt and an FMA per
//    (weight row, activation row, block), on the pipes dpbusd runs on.
//  - paired (a last 3-4 rows): the same with two weight rows to a register,
//    one in each half against the rows' lanes repeated, so that a 4-row verify
//    does not pay for 8.
//  - narrow (a last 1-2 rows: a decode step): a dot's 8 lanes per (weight row,
//    activation row), dpbusd straight from the stored block, the lanes of 8
//    dots summed in integers at once before their one FMA.
#include "kernels/q8_vnni_blocks.h"

#if GGSPEC_X86_KERNEL

namespace ggspec {
namespace {

constexpr int kWeightTile = 8;  // weight rows a tile takes
constexpr int kLanes = 8;       // activation rows of a wide group; (weight, activation) pairs of a narrow tile
// Weight rows a wide tile's block loop takes (a paired one's, in pairs): all
// of a tile's, so that each block's 8 activation vectors, loaded from L1, serve
// 8 rows. The loads had bounded the loop: against 4 rows (same bits, 60
// alternating samples in one process, Zen 4, 2 threads) 8-row verifies ran 5-6%
// faster on Gemma 3 and SmolLM2, 16 and 64 rows 6-7%, and paired 4-row ones 3%.
constexpr int kWideWeights = 8;
constexpr int kWideRows = 5;    // the fewest activation rows that take a wide group
constexpr int kPairedRows = 3;  // the fewest that take a paired one

using namespace q8_vnni;

inline int32_t load_i32(const uint8_t * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// A chunk's n activation rows, in two layouts. Narrow: row a's block b at
// b * n + a: values y[at * 32], the lanes' correction[at * 8] (signed weights:
// -128 * the sum of the lane's 4 values, which turns u . y back into x . y),
// scale[at] and (Q8_1) sums[at], each padded by kLanes. Wide: group g's block b
// at b * groups + g, rows in lanes: lane_values[(at * 8 + lane_slot(i)) * 8 + r]
// is dword i (values 4i..4i+3) of the group's row r, lane_correction[at * 8 + r] the
// block's whole correction, lane_scale and lane_sums likewise (padding rows 0);
// a paired last group has its rows in lanes 0-3 and again in 4-7. Only the
// rows after the wide groups are packed narrow: no tile reads the others so.
// Dword i of a block's lanes sits beside dword i + 4 (i < 4): the 4-bit tile
// takes both, the low nibbles' values and the high ones', in one 16-lane load.
constexpr int lane_slot(int i) { return i < 4 ? 2 * i : 2 * (i - 4) + 1; }

struct PackedActs {
    int64_t n = 0, groups = 0;
    const int8_t * y = nullptr;
    const int32_t * correction = nullptr;
    const float * scale = nullptr;
    const float * sums = nullptr;
    const int32_t * lane_values = nullptr;
    const int32_t * lane_correction = nullptr;
    const float * lane_scale = nullptr;
    const float * lane_sums = nullptr;
};

struct ActBuffers {
    Buffer<int8_t> & y = thread_buffer<int8_t>();
    Buffer<int32_t> & correction = thread_buffer<int32_t, 0>();
    Buffer<float> & scale = thread_buffer<float, 0>();
    Buffer<float> & sums = thread_buffer<float, 1>();
    Buffer<int32_t> & lane_values = thread_buffer<int32_t, 1>();
    Buffer<int32_t> & lane_correction = thread_buffer<int32_t, 2>();
    Buffer<float> & lane_scale = thread_buffer<float, 2>();
    Buffer<float> & lane_sums = thread_buffer<float, 3>();
};

GGSPEC_AVX512 PackedActs pack_activations(const DotRowsJob & job, const ActRows & acts, int64_t groups,
                                          bool paired, ActBuffers & buf) {
    const int64_t n = acts.end - acts.first, nb = job.n_blocks;
    const bool q8_1 = q8_has_min(job.weight_type);
    const int block_bytes = q8_1 ? 36 : 34, qs_offset = q8_1 ? 4 : 2;
    buf.y.resize((size_t) (n * nb * kQ8Block));
    buf.correction.resize((size_t) (n * nb * 8));
    // Only whole groups (a verify of 8 rows): the loop below writes every lane
    // (lane_correction for the signed types, which alone read it) and no
    // narrow row reads scale or sums, so nothing is zeroed first (SmolLM2's
    // 8-row verify 0.995, 82 of 150 faster).
    const bool whole_groups = !paired && n == groups * kLanes;
    const auto size = [whole_groups](auto & buffer, size_t count) {
        whole_groups ? buffer.resize(count) : buffer.assign(count, 0);
    };
    size(buf.scale, (size_t) (n * nb + kLanes));
    size(buf.sums, (size_t) (n * nb + kLanes));
    size(buf.lane_values, (size_t) (groups * nb * kLanes * 8));
    size(buf.lane_correction, (size_t) (groups * nb * kLanes));
    size(buf.lane_scale, (size_t) (groups * nb * kLanes));
    size(buf.lane_sums, (size_t) (groups * nb * kLanes));
    const __m256i zero = _mm256_setzero_si256();
    const int64_t narrow_from = (groups - paired) * kLanes;
    // Whole groups of 8 rows, a block at a time: its 8 rows' values transposed
    // into the lanes, and each row's correction from the transposed dwords
    // (lane r: 128 times the sum of row r's values, exact in any order). Packed
    // row by row instead (8 scalar stores a row and block, as the rows after
    // the whole groups still are), 64-row prefill chunks on SmolLM2 ran 2%
    // slower and 8-row verifies 0.3-0.9%.
    const int64_t whole = std::min(groups - paired, n / kLanes);
    for (int64_t g = 0; g < whole; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t lane_at = (b * groups + g) * kLanes;
            __m256i v[8];
            alignas(32) float scales[kLanes], sums[kLanes];
            for (int r = 0; r < kLanes; ++r) {
                const uint8_t * block = acts.row(acts.first + g * kLanes + r) + b * block_bytes;
                v[r] = _mm256_loadu_si256((const __m256i *) (block + qs_offset));
                scales[r] = _cvtsh_ss(load_u16(block));
                sums[r] = q8_1 ? _cvtsh_ss(load_u16(block + 2)) : 0.0f;
            }
            transpose8(v);
            __m256i total = zero;
            for (int i = 0; i < 8; ++i) {
                _mm256_storeu_si256((__m256i *) (buf.lane_values.data() + (lane_at + lane_slot(i)) * 8), v[i]);
                total = _mm256_dpbusd_epi32(total, _mm256_set1_epi8((char) 0x80), v[i]);
            }
            if (!q8_1) _mm256_storeu_si256((__m256i *) (buf.lane_correction.data() + lane_at), _mm256_sub_epi32(zero, total));
            _mm256_storeu_ps(buf.lane_scale.data() + lane_at, _mm256_load_ps(scales));
            _mm256_storeu_ps(buf.lane_sums.data() + lane_at, _mm256_load_ps(sums));
        }
    }
    for (int64_t a = whole * kLanes; a < n; ++a) {
        const uint8_t * row = acts.row(acts.first + a);
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * block = row + b * block_bytes;
            const int64_t at = b * n + a;
            const __m256i values = _mm256_loadu_si256((const __m256i *) (block + qs_offset));
            const __m256i correction =
                q8_1 ? zero : _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8((char) 0x80), values));
            const float scale = _cvtsh_ss(load_u16(block)), sum = q8_1 ? _cvtsh_ss(load_u16(block + 2)) : 0.0f;
            if (a >= narrow_from) {
                _mm256_storeu_si256((__m256i *) (buf.y.data() + at * kQ8Block), values);
                _mm256_storeu_si256((__m256i *) (buf.correction.data() + at * 8), correction);
                buf.scale[(size_t) at] = scale;
                buf.sums[(size_t) at] = sum;
            }
            if (a / kLanes >= groups) continue;
            const int64_t lane_at = (b * groups + a / kLanes) * kLanes;
            const bool repeat = paired && a / kLanes == groups - 1;
            for (int64_t r = a % kLanes; r < kLanes; r += kLanes / 2) {
                for (int i = 0; i < 8; ++i) {
                    buf.lane_values[(size_t) ((lane_at + lane_slot(i)) * 8 + r)] = load_i32(block + qs_offset + 4 * i);
                }
                buf.lane_correction[(size_t) (lane_at + r)] = sum_int_lanes(correction);
                buf.lane_scale[(size_t) (lane_at + r)] = scale;
                buf.lane_sums[(size_t) (lane_at + r)] = sum;
                if (!repeat) break;
            }
        }
    }
    return {n, groups, buf.y.data(), buf.correction.data(), buf.scale.data(), buf.sums.data(),
            buf.lane_values.data(), buf.lane_correction.data(), buf.lane_scale.data(), buf.lane_sums.data()};
}

// Block b's d (and, for Q4_1 and Q5_1, m) of rows lane[0..7], a scalar load
// a lane: a stored block starts with d (then m) in F16, a decoded one holds
// them converted. (A vpgatherdd of the 8 made a decode step 4-10% slower on
// Gemma 3.)
template <class F>
GGSPEC_AVX512 void lane_scales(const TileRows & rows, const int32_t * lane, int64_t b, __m256 & d, __m256 & m) {
    if constexpr (F::in_place) {
        alignas(32) int32_t dm[8];
        for (int i = 0; i < 8; ++i) std::memcpy(&dm[i], rows.stored + lane[i] * rows.row_bytes + b * block_bytes<F::type>(), 4);
        const __m256i v = _mm256_load_si256((const __m256i *) dm);
        d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(v));
        if constexpr (!F::Signed) m = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(v, 16)));
    } else {
        alignas(32) float ds[8], ms[8];
        for (int i = 0; i < 8; ++i) {
            const WeightBlock & block = rows.decoded[lane[i] * rows.n_blocks + b];
            ds[i] = block.d, ms[i] = block.m;
        }
        d = _mm256_load_ps(ds);
        if constexpr (!F::Signed) m = _mm256_load_ps(ms);
    }
}

// Where dpbusd starts a block's lanes of activation row a (at = b * n + a):
// the correction for signed weights, else zero.
template <bool Signed>
GGSPEC_AVX512 inline __m256i block_init(const PackedActs & acts, int64_t at) {
    return Signed ? _mm256_loadu_si256((const __m256i *) (acts.correction + at * 8)) : _mm256_setzero_si256();
}

// Every tile puts its outputs (w, r) in staged[r * kWeightTile + w], and from
// there they go to dst a row at a time: written one by one, their stores to rows of dst whose
// addresses agree in the low 12 bits (an LM head's rows of 1 MB) cost Gemma 3's
// 8-row LM head 6%.

// Block b of the lane group g as the wide and paired tiles take it: its value
// vectors (kept in registers), dword i of the rows in y[i], or in the 4-bit
// tile's 16 lanes dwords i and i + 4; where dpbusd starts, the rows' scales;
// returns where the group's block starts in the lane arrays.
template <bool Signed, class V, int N>
__attribute__((always_inline)) GGSPEC_AVX512 inline int64_t lane_block(const PackedActs & acts, int64_t b, int64_t g,
                                                                      V (&y)[N], __m256i & init, __m256 & scales) {
    const int64_t at = (b * acts.groups + g) * kLanes;
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
        const int32_t * values = acts.lane_values + (at + lane_slot(i)) * 8;  // and, at 16 lanes, dword i + 4's
        if constexpr (N == 4) {
            y[i] = _mm512_loadu_si512(values);
        } else {
            y[i] = _mm256_loadu_si256((const __m256i *) values);
        }
        in_register(y[i]);
    }
    init = Signed ? _mm256_loadu_si256((const __m256i *) (acts.lane_correction + at)) : _mm256_setzero_si256();
    scales = _mm256_loadu_ps(acts.lane_scale + at);
    return at;
}

// The most wide groups whose tiles read weights of type t where they are
// stored (see Kernel::prepare); more share a pass. The pass's loads were where
// the weights' first reads stalled: read in place, SmolLM2's Q4_1 8-row verify
// took 4.7% less. Each group splits the 4-bit types' nibbles again, in 16
// lanes, and still gains on the pass up to 4 groups (alternating samples in
// one process, same bits: SmolLM2's 16-row verify 0.942, 95 of 100 faster; 24
// rows 0.983 and 32 rows 0.987, 44 of 60; 64 rows 1.041, slower). Q8_0 in
// place (a broadcast and an xor per 4 values): Gemma 3's 8-row verify
// 0.93-0.94 (35-38 of 40 faster), 6 rows 0.93, 12 rows 0.96; SmolLM2's
// 0.996-1.007, its LM head the only Q8_0 tensor; but 16 rows 1.04 (SmolLM2)
// and 1.06 (Gemma 3). The Q5 types keep the pass.
constexpr bool nibble_type(ggml_type t) { return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1; }
constexpr int64_t wide_groups_in_place(ggml_type t) {
    return nibble_type(t) ? 4 : t == GGML_TYPE_Q8_0 ? 1 : 0;
}

// A stored block's d and (Q4_1) m, broadcast; both converted at once.
template <class F>
__attribute__((always_inline)) GGSPEC_AVX512 inline void stored_scales(const uint8_t * block, __m256 & d, __m256 & m) {
    if constexpr (F::Signed) {
        d = _mm256_cvtph_ps(_mm_set1_epi16((short) load_u16(block)));
    } else {
        const __m256 dm = _mm256_cvtph_ps(_mm_set1_epi32(load_i32(block)));
        d = _mm256_moveldup_ps(dm), m = _mm256_movehdup_ps(dm);
    }
}

// Block b of weight row w against the wide group's rows in lanes: each lane's
// integer dot, and the block's d and (Q4_1) m. A decoded block's bytes are
// dpbusd's unsigned ones; a stored Q8_0 block's become them by an xor, as the
// pass makes them.
template <class F>
__attribute__((always_inline)) GGSPEC_AVX512 inline __m256i wide_block_dot(const TileRows & rows, int w, int64_t b,
                                                                          const __m256i (&y)[8], __m256i init,
                                                                          __m256 & d, __m256 & m) {
    __m256i even = init, odd = _mm256_setzero_si256();  // two chains of dpbusd's latency
    if constexpr (!F::in_place) {
        const WeightBlock & block = rows.decoded[w * rows.n_blocks + b];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i += 2) {
            even = _mm256_dpbusd_epi32(even, _mm256_set1_epi32(load_i32(block.u + 4 * i)), y[i]);
            odd = _mm256_dpbusd_epi32(odd, _mm256_set1_epi32(load_i32(block.u + 4 * i + 4)), y[i + 1]);
        }
        d = _mm256_set1_ps(block.d), m = _mm256_set1_ps(block.m);
    } else {
        static_assert(F::type == GGML_TYPE_Q8_0, "stored 4-bit blocks take the 16-lane overload");
        const uint8_t * block = rows.stored + w * rows.row_bytes + b * block_bytes<F::type>();
        stored_scales<F>(block, d, m);
        const __m256i sign = _mm256_set1_epi8((char) 0x80);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i += 2) {
            const __m256i u0 = _mm256_xor_si256(_mm256_set1_epi32(load_i32(block + 2 + 4 * i)), sign);
            const __m256i u1 = _mm256_xor_si256(_mm256_set1_epi32(load_i32(block + 6 + 4 * i)), sign);
            even = _mm256_dpbusd_epi32(even, u0, y[i]);
            odd = _mm256_dpbusd_epi32(odd, u1, y[i + 1]);
        }
    }
    return _mm256_add_epi32(even, odd);
}

// The same for a stored Q4_0 or Q4_1 block, whose nibbles stay as they are: a
// low nibble multiplies its activation as it is, a high one as 16 times its
// value. Each broadcast dword meets, in 16 lanes, values 4i..4i+3 of the rows
// masked 0x0F and values 16+4i.. masked 0xF0: one mask and one dpbusd serve
// both halves of the block (against two of each in 8 lanes, same bits:
// SmolLM2's 8-row verify 0.977 in 8 paired processes, 6 faster). The high
// half's sums, 16 times theirs, shift back exactly. Q4_0's values are the
// nibbles - 8, not + 128 as decoded, so its correction is -8, not -128, times
// the activations' sum: init / 16, exact too.
template <class F>
__attribute__((always_inline)) GGSPEC_AVX512 inline __m256i wide_block_dot(const TileRows & rows, int w, int64_t b,
                                                                          const __m512i (&y)[4], __m256i init,
                                                                          __m256 & d, __m256 & m) {
    static_assert(F::in_place && nibble_type(F::type), "stored 4-bit blocks");
    const uint8_t * block = rows.stored + w * rows.row_bytes + b * block_bytes<F::type>();
    stored_scales<F>(block, d, m);
    const uint8_t * qs = block + (F::Signed ? 2 : 4);
    const __m512i nibbles = _mm512_inserti64x4(_mm512_set1_epi8(0x0F), _mm256_set1_epi8((char) 0xF0), 1);
    __m512i sum = F::Signed ? _mm512_zextsi256_si512(_mm256_srai_epi32(init, 4)) : _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
        sum = _mm512_dpbusd_epi32(sum, _mm512_and_si512(_mm512_set1_epi32(load_i32(qs + 4 * i)), nibbles), y[i]);
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm256_srai_epi32(_mm512_extracti64x4_epi64(sum, 1), 4));
}

// A block's lane vectors as lane_block loads them: 8 of 8 lanes, or 4 of 16.
template <bool Sixteen>
struct LaneVectors {
    __m256i v[8];
};
template <>
struct LaneVectors<true> {
    __m512i v[4];
};

// NW weight rows against the wide group g, rows in lanes; the weight stream
// takes the steps from fetch0 on.
template <int NW, class F>
GGSPEC_AVX512 void wide_tile(const TileRows & rows, const PackedActs & acts, int64_t g, const WeightStream & next,
                             int64_t fetch0, float * staged) {
    constexpr bool Signed = F::Signed;
    __m256 acc[NW], mins[NW];
#pragma GCC unroll 8
    for (int w = 0; w < NW; ++w) acc[w] = mins[w] = _mm256_setzero_ps();
    constexpr bool nibbles = F::in_place && nibble_type(F::type);
    for (int64_t b = 0; b < rows.n_blocks; ++b) {
        next.fetch(fetch0 + b);
        LaneVectors<nibbles> y;
        __m256i init;
        __m256 scales;
        const int64_t at = lane_block<Signed>(acts, b, g, y.v, init, scales);
        const __m256 sums = Signed ? scales : _mm256_loadu_ps(acts.lane_sums + at);  // loaded once, not by each row
#pragma GCC unroll 8
        for (int w = 0; w < NW; ++w) {
            __m256 d, m;
            const __m256 q = _mm256_cvtepi32_ps(wide_block_dot<F>(rows, w, b, y.v, init, d, m));
            acc[w] = _mm256_fmadd_ps(_mm256_mul_ps(d, scales), q, acc[w]);
            if constexpr (!Signed) mins[w] = _mm256_fmadd_ps(m, sums, mins[w]);
        }
    }
    alignas(32) float out[NW][kLanes];
#pragma GCC unroll 8
    for (int w = 0; w < NW; ++w) _mm256_store_ps(out[w], Signed ? acc[w] : _mm256_add_ps(acc[w], mins[w]));
    for (int w = 0; w < NW; ++w)
        for (int r = 0; r < kLanes; ++r) staged[r * kWeightTile + w] = out[w][r];
}

// NP pairs of weight rows against the paired group g: rows 2p and 2p + 1 of a
// pair share a register, one in each half (a vpermt2d per 4-value group), so
// that their blocks' dots build up in lanes r and 4 + r.
template <int NP, class F>
GGSPEC_AVX512 void pair_tile(const TileRows & rows, const PackedActs & acts, int64_t g, const WeightStream & next,
                             int64_t fetch0, float * staged) {
    constexpr bool Signed = F::Signed;
    __m256 acc[NP], mins[NP];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) acc[p] = mins[p] = _mm256_setzero_ps();
    for (int64_t b = 0; b < rows.n_blocks; ++b) {
        next.fetch(fetch0 + b);
        __m256i y[8], init;
        __m256 scales;
        const int64_t at = lane_block<Signed>(acts, b, g, y, init, scales);
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
            const __m256i u0 = rows.block_values<F>(2 * p, b), u1 = rows.block_values<F>(2 * p + 1, b);
            __m256i even = init, odd = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int i = 0; i < 8; i += 2) {
                const __m256i pick = _mm256_setr_epi32(i, i, i, i, 8 + i, 8 + i, 8 + i, 8 + i);
                const __m256i next_pick = _mm256_add_epi32(pick, _mm256_set1_epi32(1));
                even = _mm256_dpbusd_epi32(even, _mm256_permutex2var_epi32(u0, pick, u1), y[i]);
                odd = _mm256_dpbusd_epi32(odd, _mm256_permutex2var_epi32(u0, next_pick, u1), y[i + 1]);
            }
            const __m256 q = _mm256_cvtepi32_ps(_mm256_add_epi32(even, odd));
            const __m256 d = _mm256_set_m128(_mm_set1_ps(rows.block_scale<F>(2 * p + 1, b)),
                                             _mm_set1_ps(rows.block_scale<F>(2 * p, b)));
            acc[p] = _mm256_fmadd_ps(_mm256_mul_ps(d, scales), q, acc[p]);
            if constexpr (!Signed) {
                const __m256 m = _mm256_set_m128(_mm_set1_ps(rows.block_min<F>(2 * p + 1, b)),
                                                 _mm_set1_ps(rows.block_min<F>(2 * p, b)));
                mins[p] = _mm256_fmadd_ps(m, _mm256_loadu_ps(acts.lane_sums + at), mins[p]);
            }
        }
    }
    alignas(32) float out[NP][kLanes];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) _mm256_store_ps(out[p], Signed ? acc[p] : _mm256_add_ps(acc[p], mins[p]));
    for (int p = 0; p < NP; ++p)
        for (int half = 0; half < 2; ++half)
            for (int r = 0; r < kLanes / 2; ++r) staged[r * kWeightTile + 2 * p + half] = out[p][half * 4 + r];
}

// NW weight rows against NA activation rows from a0, a (weight, activation)
// pair per output lane, w * NA + r.
template <int NW, int NA, class F>
GGSPEC_AVX512 void narrow_tile(const TileRows & rows, const PackedActs & acts, int64_t a0, const WeightStream & next,
                               int64_t fetch0, float * staged) {
    static_assert(NW * NA <= kLanes, "a lane per output");
    constexpr bool Signed = F::Signed;
    constexpr int P = NW * NA;
    alignas(32) int32_t w_lane[kLanes], a_lane[kLanes];  // each output lane's weight row and activation row
    for (int p = 0; p < kLanes; ++p) w_lane[p] = p < P ? p / NA : 0, a_lane[p] = p < P ? p % NA : 0;
    const __m256i a_index = _mm256_load_si256((const __m256i *) a_lane);
    const int64_t n = acts.n;
    __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    for (int64_t b = 0; b < rows.n_blocks; ++b) {
        next.fetch(fetch0 + b);
        __m256i u[NW], v[kLanes];
#pragma GCC unroll 8
        for (int w = 0; w < NW; ++w) u[w] = rows.block_values<F>(w, b);
#pragma GCC unroll 8
        for (int r = 0; r < NA; ++r) {
            const int64_t at = b * n + a0 + r;
            const __m256i y = _mm256_loadu_si256((const __m256i *) (acts.y + at * kQ8Block));
            const __m256i init = block_init<Signed>(acts, at);
#pragma GCC unroll 8
            for (int w = 0; w < NW; ++w) v[w * NA + r] = _mm256_dpbusd_epi32(init, u[w], y);
        }
#pragma GCC unroll 8
        for (int p = P; p < kLanes; ++p) v[p] = _mm256_setzero_si256();
        const __m256 q = _mm256_cvtepi32_ps(int_sums8(v));
        __m256 d_w, m_w;
        lane_scales<F>(rows, w_lane, b, d_w, m_w);
        const __m256 d = _mm256_mul_ps(d_w, _mm256_permutexvar_ps(a_index, _mm256_loadu_ps(acts.scale + b * n + a0)));
        acc = _mm256_fmadd_ps(d, q, acc);
        if constexpr (!Signed) {
            mins = _mm256_fmadd_ps(m_w, _mm256_permutexvar_ps(a_index, _mm256_loadu_ps(acts.sums + b * n + a0)), mins);
        }
    }
    alignas(32) float out[kLanes];
    _mm256_store_ps(out, Signed ? acc : _mm256_add_ps(acc, mins));
    for (int p = 0; p < P; ++p) staged[(p % NA) * kWeightTile + p / NA] = out[p];
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job) : job_(job), decode_(decoder(job.weight_type)) {
        weights_.resize((size_t) (kWeightTile * job.n_blocks));
    }
    void prepare(const ActRows & acts) {
        const int64_t n = acts.end - acts.first, rest = n % kLanes;
        wide_ = n / kLanes + (rest >= kWideRows);
        paired_ = rest >= kPairedRows && rest < kWideRows;
        acts_ = pack_activations(job_, acts, wide_ + paired_, paired_, buffers_);
        // see Decoded and wide_groups_in_place; a prefill chunk's wide groups share a pass
        in_place_ = job_.weight_type != GGML_TYPE_IQ4_NL && wide_ <= wide_groups_in_place(job_.weight_type);
        // Q4_0's and Q4_1's stored blocks, read in place, come to L1 ahead of the
        // tile: its rows' small loads (5 a block and row) then wait on no L2 trip.
        // SmolLM2's Q4_1 (one process alternating, 150 samples, same bits): decode
        // steps 0.94 (138 faster), 8-row verifies 0.96 (100 of 120). Into L1 the
        // Q8_0 LM head's stream ran 7% slower at one row and Gemma 3's 8-row
        // verify 1.5%, K-quants' wide tiles the same; ggml's vec_dot of one row
        // (one_row_dot) 6% slower.
        stream.to_l1(in_place_ && nibble_type(job_.weight_type));
    }
    void decode(int64_t w, int64_t slot) {
        if (in_place_) return;
        decode_((const uint8_t *) job_.weights + w * job_.row_bytes, job_.n_blocks, weights_.data() + slot * job_.n_blocks);
    }
    template <int TileW>
    void run(int64_t w0, int64_t slot, int64_t chunk0, int64_t) {
        with_weight_source(job_.weight_type, in_place_,
                           [&](auto source) { run_as<TileW, decltype(source)>(w0, slot, chunk0); });
    }

    WeightStream stream;

private:
    static constexpr int narrow_weights(int rows) { return kLanes / rows; }

    // The chunk's wide groups, then a paired group or 1-2 narrow rows. A lone
    // weight row (a partial tile's) takes its paired rows narrow.
    template <int TileW, class F>
    void run_as(int64_t w0, int64_t slot, int64_t chunk0) {
        constexpr int NW = std::min(TileW, kWideWeights), NP = std::max(1, std::min(TileW, kWideWeights) / 2);
        const int64_t nb = job_.n_blocks, n = acts_.n, rest = n - std::min(n, wide_ * kLanes);
        const bool paired = paired_ && TileW >= 2;
        const TileRows rows{weights_.data() + slot * nb, (const uint8_t *) job_.weights + w0 * job_.row_bytes,
                            job_.row_bytes, nb};
        const int narrow_loops = rest ? (TileW + narrow_weights((int) rest) - 1) / narrow_weights((int) rest) : 0;
        const int rest_loops = paired ? TileW / (2 * NP) : narrow_loops;
        stream.spread(wide_ * (TileW / NW) + rest_loops);
        alignas(32) float staged[kLanes * kWeightTile];
        int64_t fetch0 = 0;
        if constexpr (!F::in_place || wide_groups_in_place(F::type) > 0) {  // else the chunk has no wide group
            for (int64_t g = 0; g < wide_; ++g) {
                for (int w = 0; w < TileW; w += NW, fetch0 += nb) {
                    wide_tile<NW, F>(rows.from(w), acts_, g, stream, fetch0, staged + w);
                }
                write(staged, chunk0 + g * kLanes, std::min<int64_t>(kLanes, n - g * kLanes), w0, TileW);
            }
        }
        if (paired) {
            if constexpr (TileW >= 2) {
                for (int w = 0; w < TileW; w += 2 * NP, fetch0 += nb) {
                    pair_tile<NP, F>(rows.from(w), acts_, wide_, stream, fetch0, staged + w);
                }
            }
            return write(staged, chunk0 + n - rest, rest, w0, TileW);
        }
        switch (rest) {
            case 1: return narrow_group<TileW, 1, F>(rows, n - 1, fetch0, staged, chunk0, w0);
            case 2: return narrow_group<TileW, 2, F>(rows, n - 2, fetch0, staged, chunk0, w0);
            case 3: return narrow_group<TileW, 3, F>(rows, n - 3, fetch0, staged, chunk0, w0);
            case 4: return narrow_group<TileW, 4, F>(rows, n - 4, fetch0, staged, chunk0, w0);
            default: return;
        }
    }
    template <int TileW, int NA, class F>
    void narrow_group(const TileRows & rows, int64_t a0, int64_t fetch0, float * staged, int64_t chunk0, int64_t w0) {
        constexpr int NW = std::min(TileW, narrow_weights(NA));
        for (int w = 0; w < TileW; w += NW, fetch0 += job_.n_blocks) {
            narrow_tile<NW, NA, F>(rows.from(w), acts_, a0, stream, fetch0, staged + w);
        }
        write(staged, chunk0 + a0, NA, w0, TileW);
    }
    void write(const float * staged, int64_t a0, int64_t rows, int64_t w0, int n_w) const {
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(job_.dst + (a0 + r) * job_.dst_stride + w0, staged + r * kWeightTile, n_w * sizeof(float));
        }
    }

    const DotRowsJob & job_;
    const DecodeRow decode_;
    PackedActs acts_;
    int64_t wide_ = 0;     // wide groups of the chunk
    bool paired_ = false;  // and a paired group after them
    bool in_place_ = false;
    // per thread, reused across calls
    ActBuffers buffers_;
    Buffer<WeightBlock> & weights_ = thread_buffer<WeightBlock>();
};

}  // namespace

void q8_block_order_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<kWeightTile>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
