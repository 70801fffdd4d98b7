#include "kernels/half_dot_rows.h"

#include "kernels/x86_target.h"

#if GGSPEC_X86_KERNEL

#include <cstring>
#include <vector>

namespace ggspec {
namespace {

constexpr int kStep = 32;  // values per step of ggml's loop
constexpr int kAccs = 4;   // its accumulators, 8 lanes each
constexpr int kTileA = 8;  // activation rows per weight row at a time: 8 ymm accumulators

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

// The lane sums of two outputs' accumulators c_r = (a0 + a2) + (a1 + a3), as
// ggml's reduction takes them: low half + high half, then F16: two hadds,
// (t0 + t1) + (t2 + t3); BF16: hsum_float_8's (t0 + t2) + (t1 + t3). Lane 0 and
// lane 4 of the result.
template <bool Bf16>
GGSPEC_AVX2 __m256 lane_sums(__m256 c0, __m256 c1) {
    const __m256 t = _mm256_add_ps(_mm256_permute2f128_ps(c0, c1, 0x20), _mm256_permute2f128_ps(c0, c1, 0x31));
    if constexpr (Bf16) {
        const __m256 u = _mm256_add_ps(t, _mm256_permute_ps(t, 0x4E));  // t0 + t2, t1 + t3
        return _mm256_add_ps(u, _mm256_permute_ps(u, 0xB1));
    }
    const __m256 h = _mm256_hadd_ps(t, t);
    return _mm256_hadd_ps(h, h);
}

class Kernel {
public:
    explicit Kernel(const DotRowsJob & job)
        : job_(job), n_(job.n_blocks), np_(job.n_blocks & ~(int64_t) (kStep - 1)), stride_((n_ + 7) / 8 * 8) {}

    void prepare(const ActRows & acts) {
        std::vector<float> & rows = thread_buffer<float>();
        rows.resize((size_t) ((acts.end - acts.first) * stride_));
        for (int64_t a = acts.first; a < acts.end; ++a) {
            float * out = rows.data() + (a - acts.first) * stride_;
            (bf16() ? to_float<true> : to_float<false>)((const uint16_t *) acts.row(a), out, n_);
        }
        acts_ = rows.data();
        a0_ = acts.first;
    }
    void decode(int64_t, int64_t) {}  // weights are read as they are, 8 halves at a time
    NextTile next_tile;  // blocks of one value (2 bytes): fetch(i) is line i of the next row
    template <int TW>
    void run(int64_t w, int64_t, int64_t a0, int64_t a_end) {
        static_assert(TW == 1, "one weight row at a time");
        const auto * row = (const uint16_t *) ((const uint8_t *) job_.weights + w * job_.row_bytes);
        int64_t a = a0;
        for (; a + kTileA <= a_end; a += kTileA) tiles<kTileA>(row, w, a);
        for (; a + 2 <= a_end; a += 2) tiles<2>(row, w, a);
        if (a < a_end) tiles<1>(row, w, a);
    }

private:
    bool bf16() const { return job_.weight_type == GGML_TYPE_BF16; }

    template <int TA>
    void tiles(const uint16_t * row, int64_t w, int64_t a) {
        bf16() ? tile<TA, true>(row, w, a) : tile<TA, false>(row, w, a);
    }

    // One weight row against activation rows a..a + TA - 1.
    template <int TA, bool Bf16>
    GGSPEC_AVX2 void tile(const uint16_t * row, int64_t w, int64_t a) {
        const float * y = acts_ + (a - a0_) * stride_;
        alignas(32) float acc[TA][kAccs][8];
        for (int j = 0; j < kAccs; ++j) {  // one accumulator at a time, its FMAs in ggml's order
            __m256 sum[TA];
            for (int r = 0; r < TA; ++r) sum[r] = _mm256_setzero_ps();
            for (int64_t k = 8 * j; k < np_; k += kStep) {
                if (j == 0) next_tile.fetch(k / kStep);  // a step is 64 bytes of the row
                const __m256 wv = load8<Bf16>(row + k);
                for (int r = 0; r < TA; ++r) sum[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(y + r * stride_ + k), sum[r]);
            }
            for (int r = 0; r < TA; ++r) _mm256_store_ps(acc[r][j], sum[r]);
        }
        float result[TA];
        for (int r = 0; r < TA; r += 2) {
            __m256 c[2];
            for (int i = 0; i < 2; ++i) {
                const auto & v = acc[r + i < TA ? r + i : r];
                c[i] = _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(v[0]), _mm256_load_ps(v[2])),
                                     _mm256_add_ps(_mm256_load_ps(v[1]), _mm256_load_ps(v[3])));
            }
            const __m256 sums = lane_sums<Bf16>(c[0], c[1]);
            result[r] = _mm256_cvtss_f32(sums);
            if (r + 1 < TA) result[r + 1] = _mm_cvtss_f32(_mm256_extractf128_ps(sums, 1));
        }
        for (int r = 0; r < TA; ++r) {
            // ggml then adds the last n % 32 products one by one in double (BF16: onto a
            // zeroed double, so that -0 becomes +0)
            float out = Bf16 ? result[r] + 0.0f : result[r];
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
    const float * acts_ = nullptr;  // the chunk's rows, converted
    int64_t a0_ = 0;                // the job's row that starts the chunk
};

}  // namespace

void half_dot_rows(const DotRowsJob & job, int64_t w_begin, int64_t w_end) {
    Kernel kernel(job);
    run_tiles<1>(kernel, job, w_begin, w_end);
}

}  // namespace ggspec

#endif  // GGSPEC_X86_KERNEL
