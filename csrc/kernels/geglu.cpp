#include "kernels/geglu.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/op_probe.h"
#include "kernels/x86_target.h"

// ggml's GELU of every half (ggml-cpu/vec.cpp, exported by libggml-cpu), which
// ggml_cpu_init fills before any graph computes: ggml_vec_geglu_f32 looks
// gelu(x) up there at x rounded to a half.
extern "C" ggml_fp16_t ggml_table_gelu_f16[1 << 16];

namespace ggspec {
namespace {

#if GGSPEC_X86_KERNEL
// ggml_vec_geglu_f32 (its GGML_GELU_FP16 form) for one value: 0 at x <= -10,
// x * g at x >= 10, else the table's GELU at the half nearest x (ties to
// even, as F16C rounds), times g.
GGSPEC_AVX2 float geglu_one(float x, float g) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x * g;
    return _cvtsh_ss(ggml_table_gelu_f16[_cvtss_sh(x, 0)]) * g;
}

// Values [begin, end) of the op. Eight at a time: each lane takes the branch
// ggml's loop takes for it. The gather reads only lanes strictly inside
// (-10, 10), whose halves index at most 0xC8FF, so each 4-byte read stays in
// the table; eight values with a NaN among them go through geglu_one.
GGSPEC_AVX2 void geglu_span(const float * x, const float * g, float * y, int64_t begin, int64_t end) {
    const __m256 low = _mm256_set1_ps(-10.0f), high = _mm256_set1_ps(10.0f);
    const __m256i half_bits = _mm256_set1_epi32(0xFFFF);
    const int * table = (const int *) ggml_table_gelu_f16;
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i), gv = _mm256_loadu_ps(g + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(xv, xv, _CMP_UNORD_Q))) {
            for (int64_t j = i; j < i + 8; ++j) y[j] = geglu_one(x[j], g[j]);
            continue;
        }
        const __m256 below = _mm256_cmp_ps(xv, low, _CMP_LE_OQ), above = _mm256_cmp_ps(xv, high, _CMP_GE_OQ);
        const __m256 inside = _mm256_xor_ps(_mm256_or_ps(below, above), _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
        const __m256i index = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(xv, _MM_FROUND_TO_NEAREST_INT));
        const __m256i words = _mm256_and_si256(
            _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), table, index, _mm256_castps_si256(inside), 2),
            half_bits);
        const __m128i halves = _mm_packus_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
        __m256 out = _mm256_mul_ps(_mm256_cvtph_ps(halves), gv);
        out = _mm256_blendv_ps(out, _mm256_mul_ps(xv, gv), above);
        _mm256_storeu_ps(y + i, _mm256_andnot_ps(below, out));
    }
    for (; i < end; ++i) y[i] = geglu_one(x[i], g[i]);
}

// The values split evenly between threads, in runs of 8.
void geglu_op(ggml_tensor * dst, int ith, int nth, void *) {
    const int64_t n = ggml_nelements(dst), per = (n / nth + 7) / 8 * 8;
    const int64_t begin = std::min(n, ith * per), end = ith == nth - 1 ? n : std::min(n, begin + per);
    geglu_span((const float *) dst->src[0]->data, (const float *) dst->src[1]->data, (float *) dst->data, begin, end);
}

// Gates across the table's range and both of ggml's cut-offs (exactly -10 and
// 10 and a float either side), with ties between halves, NaNs, infinities and
// a tail of fewer than 8: any differing bit disables the op.
bool probe() {
    const int64_t n = 1003;
    ggml_init_params params{1 << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    if (!ctx) return false;
    ggml_tensor * gate = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_tensor * up = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    float * x = (float *) gate->data;
    float * g = (float *) up->data;
    std::mt19937 rng(20261205);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) x[i] = normal(rng), g[i] = normal(rng);
    const float edges[] = {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f),
                           std::nextafter(-10.0f, -11.0f), std::nextafter(10.0f, 11.0f), 1.0f + 1.0f / 2048,
                           -(1.0f + 3.0f / 2048), 65504.0f, -INFINITY, INFINITY, NAN, -0.0f, 1e-8f};
    for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); ++e) x[17 * e + 3] = edges[e];
    const bool same = op_matches_ggml(ctx, ggml_geglu_split(ctx, gate, up), {gate, up}, geglu_op, nullptr);
    ggml_free(ctx);
    return same;
}
#endif

}  // namespace

bool geglu_usable() {
#if GGSPEC_X86_KERNEL
    static const bool same = op_probe_passes(probe, "the GeGLU op differs from this ggml's geglu; using ggml's");
    return same;
#else
    return false;
#endif
}

ggml_tensor * geglu(ggml_context * ctx, ggml_tensor * gate, ggml_tensor * up, RowKernels path) {
#if GGSPEC_X86_KERNEL
    const bool fits = path != RowKernels::off && gate->type == GGML_TYPE_F32 && up->type == GGML_TYPE_F32 &&
                      ggml_is_contiguous(gate) && ggml_is_contiguous(up) && ggml_are_same_shape(gate, up) &&
                      geglu_usable();
    if (fits) {
        ggml_tensor * args[2] = {gate, up};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, gate->ne[0], gate->ne[1], gate->ne[2], gate->ne[3], args, 2,
                              geglu_op, GGML_N_TASKS_MAX, nullptr);
    }
#endif
    return ggml_geglu_split(ctx, gate, up);
}

}  // namespace ggspec
