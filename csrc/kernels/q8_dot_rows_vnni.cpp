// The AVX512-VNNI path of q8_dot_rows.h: dpbusd at 256 bits, one accumulator
// per (weight row, activation row). A 256-bit register holds exactly one dot's
// 8 lanes, so each block's scale product d_w * d_a is made once (8 at a time,
// ahead of the block loop) and enters its FMA as a broadcast operand; with two
// rows' lanes in a 512-bit register every product had to be multiplied out over
// 16 lanes, one vmulps per FMA. Zen 4 splits 512-bit ops in two, so the narrower
// registers lose nothing there.
#include "kernels/q8_vnni_blocks.h"

#if GGSPEC_X86_KERNEL

#include <vector>

namespace ggspec {
namespace {

constexpr int kWeightTile = 8;  // weight rows a tile takes
constexpr int kActGroup = 8;    // activation rows a tile takes at most
constexpr int kBlockRun = 32;   // blocks whose scale products are made at once (at most 8 KB)

// Weight rows (of a decoded tile of TileW) a tile takes beside NA activation
// rows: the most, in powers of two, that keep its accumulators to 20 of the 32
// registers (the rest hold the weight rows and an activation block).
template <int TileW, int NA>
constexpr int weight_rows() {
    int rows = TileW;
    while (rows > 1 && rows * NA > 20) rows /= 2;
    return rows;
}

using namespace q8_vnni;

// A chunk's n activation rows: their blocks' values y[(b * n + a) * 32]; for
// signed weights the lanes' correction[(b * n + a) * 8], -128 * (the sum of the
// lane's 4 values), which turns the dot u . y back into x . y; scales
// scale[b * n + a] (a group of padding at the end); and for Q4_1 and Q5_1 Q8_1's
// sums s, sums[b * kActChunk + a].
struct PackedActs {
    int64_t n = 0;
    const int8_t * y = nullptr;
    const int32_t * correction = nullptr;
    const float * scale = nullptr;
    const float * sums = nullptr;
};

GGSPEC_AVX512 void pack_activations(const DotRowsJob & job, const ActRows & acts, Buffer<int8_t> & y,
                                    Buffer<int32_t> & correction, Buffer<float> & scale,
                                    Buffer<float> & sums) {
    const int64_t n = acts.end - acts.first, nb = job.n_blocks;
    const bool q8_1 = q8_has_min(job.weight_type);
    const int block_bytes = q8_1 ? 36 : 34, qs_offset = q8_1 ? 4 : 2;
    y.resize((size_t) (n * nb * kQ8Block));
    if (!q8_1) correction.resize((size_t) (n * nb * 8));
    scale.assign((size_t) (n * nb + kActGroup), 0.0f);
    if (q8_1) sums.assign((size_t) (nb * kActChunk), 0.0f);
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t a = 0; a < n; ++a) {
        const uint8_t * row = acts.row(acts.first + a);
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * block = row + b * block_bytes;
            const int64_t at = b * n + a;
            const __m256i values = _mm256_loadu_si256((const __m256i *) (block + qs_offset));
            _mm256_storeu_si256((__m256i *) (y.data() + at * kQ8Block), values);
            if (!q8_1) {
                const __m256i sums128 = _mm256_dpbusd_epi32(zero, _mm256_set1_epi8((char) 0x80), values);
                _mm256_storeu_si256((__m256i *) (correction.data() + at * 8), _mm256_sub_epi32(zero, sums128));
            }
            scale[(size_t) at] = _cvtsh_ss(load_u16(block));
            if (q8_1) sums[(size_t) (b * kActChunk + a)] = _cvtsh_ss(load_u16(block + 2));
        }
    }
}

// Q4_1's and Q5_1's min term per (weight row, activation row): ggml's vec_dot adds m * s
// block by block into one float (contracted to an FMA), then adds it to the
// lanes' sum. Vectorised across activation rows, so each keeps that order, and
// NW weight rows at a time (out[w * kActChunk + a]), whose chains interleave.
template <int NW, class F>
GGSPEC_AVX512 void min_terms(const TileRows & rows, const float * sums, int64_t n_acts, float * out) {
    const int64_t n_blocks = rows.n_blocks;
    for (int64_t a = 0; a < n_acts; a += 16) {
        __m512 acc[NW];
#pragma GCC unroll 8  // acc stays in registers only where every index is a constant
        for (int w = 0; w < NW; ++w) acc[w] = _mm512_setzero_ps();
        for (int64_t b = 0; b < n_blocks; ++b) {
            const __m512 s = _mm512_loadu_ps(sums + b * kActChunk + a);
#pragma GCC unroll 8
            for (int w = 0; w < NW; ++w) acc[w] = _mm512_fmadd_ps(_mm512_set1_ps(rows.block_min<F>(w, b)), s, acc[w]);
        }
#pragma GCC unroll 8
        for (int w = 0; w < NW; ++w) _mm512_storeu_ps(out + w * kActChunk + a, acc[w]);
    }
}

// Where dpbusd starts a block's lanes of activation row a (at = b * n + a):
// the correction for signed weights, else zero.
template <bool Signed>
GGSPEC_AVX512 inline __m256i block_init(const PackedActs & acts, int64_t at) {
    return Signed ? _mm256_loadu_si256((const __m256i *) (acts.correction + at * 8)) : _mm256_setzero_si256();
}

// What a weight tile works on: its rows from the job's row w0, against the
// packed chunk (which starts at the job's row chunk0); mins[w * kActChunk + a]
// for Q4_1 and Q5_1, else null. Its outputs for a group of activation rows go
// to staged[r * kWeightTile + w], and from there to dst a row of them at a
// time: written one by one, their stores to rows of dst whose addresses agree
// in the low 12 bits (an LM head's rows of 1 MB) cost Gemma 3's 8-row LM head 6%.
struct TileArgs {
    const DotRowsJob & job;
    TileRows rows;
    int64_t w0;
    const PackedActs & acts;
    int64_t chunk0;
    const float * mins;
    float * staged;
};

// The tile's rows w_off.. (NW of them) against NA activation rows from a0
// (within the chunk); the weight stream takes the steps from fetch0 on.
template <int NW, int NA, class F>
GGSPEC_AVX512 void tile(const TileArgs & args, int w_off, int64_t a0, const WeightStream & next, int64_t fetch0) {
    constexpr bool Signed = F::Signed, Paired = F::Paired;
    const int64_t nb = args.job.n_blocks, n = args.acts.n;
    const TileRows rows = args.rows.from(w_off);
    const PackedActs & acts = args.acts;
    constexpr int passes = Paired ? 2 : 1;
    const int64_t end = Paired ? nb / 2 * 2 : nb;
    __m256 acc[NW][NA];
    alignas(32) float first[NW][NA][8];  // paired blocks: the first pass's lanes
    alignas(32) float products[kBlockRun][NW][kActGroup];
    for (int pass = 0; pass < passes; ++pass) {
#pragma GCC unroll 16
        for (int w = 0; w < NW; ++w)
#pragma GCC unroll 16
            for (int r = 0; r < NA; ++r) acc[w][r] = _mm256_setzero_ps();
        for (int64_t run = pass; run < end; run += kBlockRun * passes) {
            const int64_t run_end = std::min(end, run + kBlockRun * passes);
            // ggml's d = d_w * d_a of every block of the run, 8 activation rows a vmulps
            for (int64_t b = run, i = 0; b < run_end; b += passes, ++i) {
                const __m256 act_scales = _mm256_loadu_ps(acts.scale + b * n + a0);
#pragma GCC unroll 16
                for (int w = 0; w < NW; ++w) {
                    const float d = rows.block_scale<F>(w, b);
                    _mm256_store_ps(products[i][w], _mm256_mul_ps(_mm256_set1_ps(d), act_scales));
                }
            }
            for (int64_t b = run, i = 0; b < run_end; b += passes, ++i) {
                next.fetch(fetch0 + b);
                __m256i u[NW];
#pragma GCC unroll 16
                for (int w = 0; w < NW; ++w) u[w] = rows.block_values<F>(w, b);
#pragma GCC unroll 16
                for (int r = 0; r < NA; ++r) {  // each activation block loaded once for the NW rows
                    const int64_t at = b * n + a0 + r;
                    __m256i y = _mm256_loadu_si256((const __m256i *) (acts.y + at * kQ8Block));
                    __m256i init = block_init<Signed>(acts, at);
                    in_register(y), in_register(init);
#pragma GCC unroll 16
                    for (int w = 0; w < NW; ++w) {
                        const __m256 q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(init, u[w], y));
                        acc[w][r] = _mm256_fmadd_ps(_mm256_set1_ps(products[i][w][r]), q, acc[w][r]);
                    }
                }
            }
        }
        if (pass + 1 < passes) {
#pragma GCC unroll 16
            for (int w = 0; w < NW; ++w)
#pragma GCC unroll 16
                for (int r = 0; r < NA; ++r) _mm256_store_ps(first[w][r], acc[w][r]);
        }
    }
    // each output's lanes summed 8 outputs at a time, (w, r) at w * NA + r
    constexpr int n_out = NW * NA, n_sums = (n_out + 7) / 8 * 8;
    __m256 lanes[n_sums];
    alignas(32) float sums[n_sums];
#pragma GCC unroll 16
    for (int w = 0; w < NW; ++w)
#pragma GCC unroll 16
        for (int r = 0; r < NA; ++r) {
            lanes[w * NA + r] = Paired ? _mm256_add_ps(_mm256_load_ps(first[w][r]), acc[w][r]) : acc[w][r];
        }
    for (int i = n_out; i < n_sums; ++i) lanes[i] = _mm256_setzero_ps();
    for (int i = 0; i < n_sums; i += 8) _mm256_store_ps(sums + i, lane_sums8<false>(lanes + i));  // hsum_float_8's order
    for (int w = 0; w < NW; ++w) {
        for (int r = 0; r < NA; ++r) {
            const int64_t a = a0 + r;
            float sum = sums[w * NA + r];
            if (end < nb) {  // IQ4_NL's unpaired last block
                const __m256i y = _mm256_loadu_si256((const __m256i *) (acts.y + (end * n + a) * kQ8Block));
                const __m256i u = rows.block_values<F>(w, end);
                const int32_t dot = sum_int_lanes(_mm256_dpbusd_epi32(block_init<Signed>(acts, end * n + a), u, y));
                sum = __builtin_fmaf(rows.block_scale<F>(w, end) * acts.scale[end * n + a], (float) dot, sum);
            }
            const float * mins = args.mins ? args.mins + (w_off + w) * kActChunk : nullptr;
            args.staged[r * kWeightTile + w_off + w] = mins ? sum + mins[a] : sum;
        }
    }
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job) : job_(job), decode_(decoder(job.weight_type)) {
        weights_.resize((size_t) (kWeightTile * job.n_blocks));
        mins_.resize((size_t) (kWeightTile * kActChunk));
    }
    void prepare(const ActRows & acts) {
        pack_activations(job_, acts, y_, correction_, scale_, sums_);
        acts_ = PackedActs{acts.end - acts.first, y_.data(), correction_.data(), scale_.data(), sums_.data()};
        in_place_ = job_.weight_type == GGML_TYPE_Q8_0 ||
                    (acts_.n <= kActGroup && job_.weight_type != GGML_TYPE_IQ4_NL);  // see Stored
    }
    void decode(int64_t w, int64_t slot) {
        if (in_place_) return;
        decode_((const uint8_t *) job_.weights + w * job_.row_bytes, job_.n_blocks, weights_.data() + slot * job_.n_blocks);
    }
    template <int TileW>
    void run(int64_t w0, int64_t slot, int64_t chunk0, int64_t chunk_end) {
        with_weight_source(job_.weight_type, in_place_,
                           [&](auto source) { run_as<TileW, decltype(source)>(w0, slot, chunk0); });
    }

    WeightStream stream;

private:
    // The chunk's rows in groups of 8, then one of the rows that remain: a tile of
    // one activation row makes each block's scale products for that row alone, and
    // an 8 x 1 tile cost Gemma 3's fifth verify row half as much again as a 4 x 4's.
    template <int TileW, class F>
    void run_as(int64_t w0, int64_t slot, int64_t chunk0) {
        const int64_t nb = job_.n_blocks, n = acts_.n;
        const TileRows rows{weights_.data() + slot * nb, (const uint8_t *) job_.weights + w0 * job_.row_bytes,
                            job_.row_bytes, nb};
        float * mins = nullptr;
        if (!F::Signed) {
            mins = mins_.data() + slot * kActChunk;
            min_terms<TileW, F>(rows, acts_.sums, n, mins);
        }
        alignas(32) float staged[kActGroup * kWeightTile];
        const TileArgs args{job_, rows, w0, acts_, chunk0, mins, staged};
        stream.spread(n / 8 * loops<TileW, 8>() + remainder_loops<TileW>(n % 8));
        int64_t a = 0, fetch0 = 0;
        for (; a + 8 <= n; a += 8) group<TileW, 8, F>(args, a, fetch0);
        switch (n - a) {
            case 1: return group<TileW, 1, F>(args, a, fetch0);
            case 2: return group<TileW, 2, F>(args, a, fetch0);
            case 3: return group<TileW, 3, F>(args, a, fetch0);
            case 4: return group<TileW, 4, F>(args, a, fetch0);
            case 5: return group<TileW, 5, F>(args, a, fetch0);
            case 6: return group<TileW, 6, F>(args, a, fetch0);
            case 7: return group<TileW, 7, F>(args, a, fetch0);
            default: return;
        }
    }
    // The weight tile's rows NW at a time against NA activation rows from a.
    template <int TileW, int NA, class F>
    void group(const TileArgs & args, int64_t a, int64_t & fetch0) {
        constexpr int NW = weight_rows<TileW, NA>();
        for (int w = 0; w < TileW; w += NW, fetch0 += job_.n_blocks) {
            tile<NW, NA, F>(args, w, a, stream, fetch0);
        }
        for (int r = 0; r < NA; ++r) {
            float * dst = job_.dst + (args.chunk0 + a + r) * job_.dst_stride + args.w0;
            std::memcpy(dst, args.staged + r * kWeightTile, TileW * sizeof(float));
        }
    }
    template <int TileW, int NA>
    static constexpr int loops() {  // a group's block loops
        return TileW / weight_rows<TileW, NA>();
    }
    template <int TileW>
    static constexpr int remainder_loops(int64_t rows) {  // those of a group of rows < 8
        constexpr int table[8] = {0, loops<TileW, 1>(), loops<TileW, 2>(), loops<TileW, 3>(), loops<TileW, 4>(),
                                  loops<TileW, 5>(), loops<TileW, 6>(), loops<TileW, 7>()};
        return table[rows];
    }

    const DotRowsJob & job_;
    const DecodeRow decode_;  // unused for Q8_0, always read in place
    PackedActs acts_;
    bool in_place_ = false;
    // per thread, reused across calls
    Buffer<int8_t> & y_ = thread_buffer<int8_t>();
    Buffer<int32_t> & correction_ = thread_buffer<int32_t>();
    Buffer<float> & scale_ = thread_buffer<float, 0>();
    Buffer<float> & sums_ = thread_buffer<float, 1>();
    Buffer<float> & mins_ = thread_buffer<float, 2>();
    Buffer<WeightBlock> & weights_ = thread_buffer<WeightBlock>();
};

}  // namespace

void q8_dot_rows_vnni(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<kWeightTile>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
