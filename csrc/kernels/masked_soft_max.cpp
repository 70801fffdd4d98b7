#include "kernels/masked_soft_max.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "kernels/mask_span.h"
#include "kernels/op_probe.h"

// ggml's own exp-and-sum over a row (ggml-cpu/vec.h, exported by libggml-cpu),
// so that every exp has its bits: y = exp(x - max), returning the sum of the
// 8 (AVX2) or 16 (AVX-512) wide blocks, added in order in double.
extern "C" double ggml_vec_soft_max_f32(const int n, float * y, const float * x, float max);

namespace ggspec {

#if GGSPEC_X86_KERNEL
constexpr int64_t kBlock = 16;  // the widest block of ggml_vec_soft_max_f32

// ggml's steps for one row (ops.cpp, soft_max_f32): w = kq * scale, w += mask
// (slope 1), max, y = exp(w - max) with its sum s, y *= (float) (1 / s). A
// masked key gives w = -inf and y = +0, adds +0 to the max's search and to
// the sum, and changes neither. So the row runs over its unmasked keys only,
// widened to whole blocks so that ggml_vec_soft_max_f32 meets the blocks a
// whole row would give it, and the rest is written as the zeros it would be.
GGSPEC_AVX2 void soft_max_row(const float * kq, const float * mask, float * y, int64_t n, float scale) {
    Span s = n % kBlock == 0 ? unmasked(mask, n) : Span{0, n};
    if (s.lo >= s.hi) s = {0, n};  // a row with no key: ggml's NaNs, from the whole row
    s = {s.lo / kBlock * kBlock, std::min(n, (s.hi + kBlock - 1) / kBlock * kBlock)};
    std::fill(y, y + s.lo, 0.0f);
    std::fill(y + s.hi, y + n, 0.0f);
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = s.lo;
    for (; i + 8 <= s.hi; i += 8) {
        const __m256 w = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(kq + i), vscale), _mm256_loadu_ps(mask + i));
        _mm256_storeu_ps(y + i, w);
        vmax = _mm256_max_ps(vmax, w);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float max = -INFINITY;
    for (float l : lanes) max = std::max(max, l);
    for (; i < s.hi; ++i) {  // only when n is not a multiple of a block
        y[i] = kq[i] * scale + mask[i];
        max = std::max(max, y[i]);
    }
    const double sum = ggml_vec_soft_max_f32((int) (s.hi - s.lo), y + s.lo, y + s.lo, max);
    const float inv = (float) (1.0 / sum);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = s.lo; i + 8 <= s.hi; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vinv));
    for (; i < s.hi; ++i) y[i] *= inv;
}
#endif

namespace {

#if GGSPEC_X86_KERNEL
// Rows are dealt out one at a time, since a causal mask gives them unequal work.
void masked_soft_max_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * kq = dst->src[0];
    const ggml_tensor * mask = dst->src[1];
    const float scale = *(const float *) userdata;
    const int64_t n = kq->ne[0], rows = kq->ne[1], heads = kq->ne[2];
    for (int64_t r = ith; r < rows * heads; r += nth) {
        const int64_t row = r % rows, head = r / rows;
        soft_max_row((const float *) ((const char *) kq->data + row * kq->nb[1] + head * kq->nb[2]),
                     (const float *) ((const char *) mask->data + row * mask->nb[1]),
                     (float *) ((char *) dst->data + row * dst->nb[1] + head * dst->nb[2]), n, scale);
    }
}

// Random logits through ggml_soft_max_ext and the op, under a mask with
// causal rows, rows whose first keys are masked (a sliding window), a hole
// inside a row and a row with no key at all: any differing bit disables it.
bool probe() {
    const int64_t n = 192, rows = 11, heads = 2;
    const float scale = 0.0883883f;  // 1/sqrt(128)
    ggml_init_params params{16 << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    if (!ctx) return false;
    ggml_tensor * kq = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n, rows, heads);
    ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
    std::mt19937 rng(20261201);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    for (int64_t i = 0; i < n * rows * heads; ++i) ((float *) kq->data)[i] = normal(rng);
    for (int64_t r = 0; r < rows; ++r) {
        float * m = (float *) mask->data + r * n;
        for (int64_t i = 0; i < n; ++i) {
            const bool seen = i <= 100 + 7 * r && (r % 3 != 1 || i >= 20 * r) && !(r == 5 && i > 40 && i < 77);
            m[i] = r == 9 ? -INFINITY : seen ? 0.0f : -INFINITY;
        }
    }
    float userdata = scale;
    const bool same = op_matches_ggml(ctx, ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f), {kq, mask},
                                      masked_soft_max_op, &userdata);
    ggml_free(ctx);
    return same;
}
#endif

}  // namespace

bool masked_soft_max_usable() {
#if GGSPEC_X86_KERNEL
    static const bool same =
        op_probe_passes(probe, "the masked softmax differs from this ggml's soft_max; using ggml's");
    return same;
#else
    return false;
#endif
}

ggml_tensor * masked_soft_max(ggml_context * ctx, ggml_tensor * kq, ggml_tensor * mask, float scale, RowKernels path) {
#if GGSPEC_X86_KERNEL
    const bool fits = path != RowKernels::off && kq->type == GGML_TYPE_F32 && ggml_is_contiguous(kq) &&
                      kq->ne[3] == 1 && attention_mask_fits(mask, kq->ne[0], kq->ne[1]) && masked_soft_max_usable();
    if (fits) {
        ggml_tensor * args[2] = {kq, mask};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, kq->ne[0], kq->ne[1], kq->ne[2], 1, args, 2, masked_soft_max_op,
                              GGML_N_TASKS_MAX, (void *) interned(scale));
    }
#endif
    return ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f);
}

}  // namespace ggspec
