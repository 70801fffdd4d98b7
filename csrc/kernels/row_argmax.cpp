#include "kernels/row_argmax.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/op_probe.h"
#include "kernels/x86_target.h"

namespace ggspec {
namespace {

#if GGSPEC_X86_KERNEL
// ggml_vec_argmax_f32: max = MAX(max, x[i]) from -inf, and idx = i wherever
// max == x[i]. Without a NaN that is the last index of the row's largest value
// (+0 and -0 compare equal on both sides); a NaN resets ggml's running max, so
// a row holding one runs ggml's loop itself.
GGSPEC_AVX2 int32_t argmax_row(const float * x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    __m256 nan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        vmax = _mm256_max_ps(vmax, v);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float max = -INFINITY;
    bool has_nan = _mm256_movemask_ps(nan) != 0;
    for (float l : lanes) max = l > max ? l : max;
    for (; i < n; ++i) {
        has_nan = has_nan || std::isnan(x[i]);
        max = x[i] > max ? x[i] : max;
    }
    if (has_nan) {
        float m = -INFINITY;
        int32_t idx = 0;
        for (int64_t j = 0; j < n; ++j) {
            m = m > x[j] ? m : x[j];
            if (m == x[j]) idx = (int32_t) j;
        }
        return idx;
    }
    int64_t j = n;
    for (; j % 8 != 0; --j) {
        if (x[j - 1] == max) return (int32_t) (j - 1);
    }
    const __m256 vm = _mm256_set1_ps(max);
    for (; j > 0; j -= 8) {
        const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j - 8), vm, _CMP_EQ_OQ));
        if (hits) return (int32_t) (j - 8 + 31 - __builtin_clz((unsigned) hits));
    }
    return 0;  // unreachable: max is one of the row's values
}

void row_argmax_op(ggml_tensor * dst, int ith, int nth, void * /*userdata*/) {
    const ggml_tensor * logits = dst->src[0];
    for (int64_t r = ith; r < logits->ne[1]; r += nth) {
        ((int32_t *) dst->data)[r] =
            argmax_row((const float *) ((const char *) logits->data + r * logits->nb[1]), logits->ne[0]);
    }
}

// Rows through ggml_argmax and the op: random ones, the max tied in the body
// and in the tail, a NaN first and a NaN later, all -inf, and a top of +0 and
// -0, at a length that leaves a tail; any differing index disables the op.
bool probe() {
    const int64_t n = 8 * 25 + 5, rows = 9;
    ggml_init_params params{4 << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    if (!ctx) return false;
    ggml_tensor * logits = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
    std::mt19937 rng(20261201);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (int64_t r = 0; r < rows; ++r) {
        float * x = (float *) logits->data + r * n;
        for (int64_t i = 0; i < n; ++i) x[i] = normal(rng);
        if (r == 2) x[17] = x[90] = x[130] = x[133] = 50.0f;
        if (r == 3) x[40] = x[n - 2] = 50.0f;
        if (r == 4) x[0] = NAN;
        if (r == 5) x[77] = NAN, x[150] = 60.0f, x[30] = 70.0f;
        if (r == 6) std::fill(x, x + n, -INFINITY);
        if (r == 7) {
            for (int64_t i = 0; i < n; ++i) x[i] = -std::fabs(x[i]);
            x[11] = 0.0f, x[99] = -0.0f, x[160] = 0.0f;
        }
    }
    const bool same = op_matches_ggml(ctx, ggml_argmax(ctx, logits), {logits}, row_argmax_op, nullptr);
    ggml_free(ctx);
    return same;
}
#endif

}  // namespace

bool row_argmax_usable() {
#if GGSPEC_X86_KERNEL
    static const bool same = op_probe_passes(probe, "the row argmax differs from this ggml's argmax; using ggml's");
    return same;
#else
    return false;
#endif
}

ggml_tensor * row_argmax(ggml_context * ctx, ggml_tensor * logits, RowKernels path) {
#if GGSPEC_X86_KERNEL
    if (path != RowKernels::off && logits->type == GGML_TYPE_F32 && ggml_is_contiguous(logits) &&
        logits->ne[2] == 1 && logits->ne[3] == 1 && row_argmax_usable()) {
        ggml_tensor * args[1] = {logits};
        return ggml_custom_4d(ctx, GGML_TYPE_I32, logits->ne[1], 1, 1, 1, args, 1, row_argmax_op, GGML_N_TASKS_MAX,
                              nullptr);
    }
#endif
    return ggml_argmax(ctx, logits);
}

}  // namespace ggspec
