#include "kernels/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/dot_rows.h"
#include "kernels/op_probe.h"
#include "kernels/span.h"
#include "kernels/x86_target.h"

namespace ggspec {
namespace {

#if GGSPEC_X86_KERNEL
constexpr int kRows = 8;  // rows whose sums of squares run at once

struct Params {
    float eps;
};

// Flattened row r of t (dims 1..3).
template <class T>
T * row_of(const ggml_tensor * t, int64_t r) {
    const int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
    return (T *) ((char *) t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

// ggml's sum of squares of up to 8 rows of n values: for each row a chain of
// double adds, one float square at a time (`sum += (ggml_float) (x * x)`),
// which one row at a time runs at the adds' latency. Here lane r holds row r
// (lo rows 0-3, hi rows 4-7): the rows' value i is squared and added at once,
// each lane's chain ggml's. Values past n and rows past nr read as zeros: +0
// added to a sum of squares (itself +0 or more, or NaN) leaves it as it is.
GGSPEC_AVX2 void sums_of_squares(const float * const (&rows)[kRows], int nr, int64_t n, double (&sums)[kRows]) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t left = std::min<int64_t>(8, n - i);
        const __m256i part = _mm256_cmpgt_epi32(_mm256_set1_epi32((int) left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256i v[kRows];
        for (int r = 0; r < kRows; ++r) {
            v[r] = r >= nr       ? _mm256_setzero_si256()
                   : left == 8 ? _mm256_loadu_si256((const __m256i *) (rows[r] + i))
                               : _mm256_castps_si256(_mm256_maskload_ps(rows[r] + i, part));
        }
        transpose8(v);  // v[j]: value i + j of the 8 rows
        for (int j = 0; j < 8; ++j) {
            const __m256 x = _mm256_castsi256_ps(v[j]);
            const __m256 squares = _mm256_mul_ps(x, x);
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(squares)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(squares, 1)));
        }
    }
    _mm256_storeu_pd(sums, lo);
    _mm256_storeu_pd(sums + 4, hi);
}

// y = x * scale * w, as ggml's loop rounds it: (x * scale) * w.
GGSPEC_AVX2 void scale_row(const float * x, const float * w, float * y, int64_t n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
    }
    for (; i < n; ++i) y[i] = x[i] * scale * w[i];
}

// Thread ith takes a contiguous share of the rows, as ggml's element-wise ops
// (the residual add before a norm) deal them, so that it reads rows its own
// core wrote, kRows at a time. (Dealt one at a time, as ggml's norm deals
// them, half of an 8-row verify's rows crossed between the cores: SmolLM2's
// 8-row verify ran 1.2% slower than so, Gemma 3's 1.5%.)
void rms_norm_mul_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * x = dst->src[0];
    const float * w = (const float *) dst->src[1]->data;
    const float eps = ((const Params *) userdata)->eps;
    const int64_t n = x->ne[0];
    const auto [first, end] = fixed_share(ith, nth, ggml_nrows(x));
    for (int64_t r0 = first; r0 < end; r0 += kRows) {
        const float * in[kRows];
        float * out[kRows];
        const int nr = (int) std::min<int64_t>(kRows, end - r0);
        for (int r = 0; r < nr; ++r) in[r] = row_of<const float>(x, r0 + r), out[r] = row_of<float>(dst, r0 + r);
        double sums[kRows];
        sums_of_squares(in, nr, n, sums);
        for (int r = 0; r < nr; ++r) {
            const float mean = (float) (sums[r] / (double) n);
            scale_row(in[r], w, out[r], n, 1.0f / std::sqrt(mean + eps));
        }
    }
}

// Rows of 579 values (a partial last 8) and 64, as many rows as leave a
// thread's last group partial, values from tiny to huge, a row of zeros (the
// eps alone), infinities and NaNs: any differing bit disables the op.
// (Squares of floats add exactly in double over a range of 29 bits, and the
// mean is rounded to a float and square-rooted: random rows would not show a
// change of order, the crafted ones do.)
bool probe() {
    ggml_init_params params{8 << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    if (!ctx) return false;
    std::mt19937 rng(20261206);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-30, 30);
    bool same = true;
    for (const int64_t n : {579, 64}) {
        const int64_t rows = 21;
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
        ggml_tensor * w = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
        float * xv = (float *) x->data;
        for (int64_t r = 0; r < rows; ++r) {
            // even rows: one scale a row, from tiny to huge; odd rows: each value
            // its own, over 2^-30..2^30, so that the double sums round
            const int top = (int) (r % 11) * 12 - 60;
            for (int64_t i = 0; i < n; ++i) xv[r * n + i] = std::ldexp(normal(rng), r % 2 ? exponent(rng) : top);
        }
        std::fill(xv + 3 * n, xv + 4 * n, 0.0f);
        if (n == 64) {
            // Rows whose output only the order of the double adds decides: four
            // (2^-17)^2 summed before 1024^2 make one ulp of the sum that stays,
            // each alone after it is absorbed; 0.25^2 then puts the mean on a tie
            // or just above it, and 27^2 moves it where the two means' square
            // roots round apart. In the first run of 8 values (their order
            // within a run), and with the four in one run and the rest in the next.
            const float c = std::ldexp(1.0f, -17), pattern[] = {c, c, c, c, 1024.0f, 0.25f, 27.0f};
            for (const int64_t at : {8 * n, 13 * n + 4}) {
                std::fill(xv + at - at % n, xv + at - at % n + n, 0.0f);
                std::copy(pattern, pattern + 7, xv + at);
            }
        }
        xv[5 * n + 7] = INFINITY, xv[6 * n + 1] = NAN, xv[7 * n + n - 1] = -0.0f;
        for (int64_t i = 0; i < n; ++i) ((float *) w->data)[i] = normal(rng);
        const Params par{1e-6f};
        same = same && op_matches_ggml(ctx, ggml_mul(ctx, ggml_rms_norm(ctx, x, par.eps), w), {x, w}, rms_norm_mul_op,
                                       (void *) &par);
    }
    ggml_free(ctx);
    return same;
}
#endif

}  // namespace

bool rms_norm_usable() {
#if GGSPEC_X86_KERNEL
    static const bool same = op_probe_passes(probe, "the RMS norm op differs from this ggml's; using ggml's");
    return same;
#else
    return false;
#endif
}

ggml_tensor * rms_norm_mul(ggml_context * ctx, ggml_tensor * x, ggml_tensor * weight, float eps, RowKernels path) {
#if GGSPEC_X86_KERNEL
    const bool fits = path != RowKernels::off && x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) &&
                      weight->type == GGML_TYPE_F32 && ggml_is_contiguous(weight) &&
                      ggml_nelements(weight) == x->ne[0] && rms_norm_usable();
    if (fits) {
        ggml_tensor * args[2] = {x, weight};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, 2, rms_norm_mul_op,
                              GGML_N_TASKS_MAX, (void *) interned(Params{eps}));
    }
#endif
    (void) path;
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), weight);
}

}  // namespace ggspec
