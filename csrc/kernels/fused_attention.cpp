#include "kernels/fused_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "kernels/dot_rows.h"
#include "kernels/half_dot_rows.h"
#include "kernels/mask_span.h"
#include "kernels/masked_soft_max.h"
#include "kernels/op_probe.h"

namespace ggspec {
namespace {

#if GGSPEC_X86_KERNEL
constexpr int64_t kStep = 32;  // the F16 dot's step, and a whole number of softmax blocks

struct Params {
    float scale;
    RowKernels path;
};

const char * at(const ggml_tensor * t, int64_t i1, int64_t i2) {
    return (const char *) t->data + i1 * t->nb[1] + i2 * t->nb[2];
}

// Pairs [p_lo, p_hi) of a chunk of one sequence's rows [r0, r0 + rows), pair
// p = head * rows + row, their heads sharing one KV head: the keys their masks
// leave within their region, widened to whole steps; q·K over them (the K·q
// kernel), the softmax of each pair, and the values' dots with the
// probabilities (the V·p kernel), each as the unfused chain runs it. The
// kernels give each activation row its bits whatever rows it shares a tile
// with, so the query heads of a KV head go through them together, each key
// and value row read once for all of them: against a head at a time (same
// bits, one process alternating), one-row steps 0.969 on SmolLM2 (3 query
// heads a KV head; 36 of 60 faster) and 0.971 on Gemma 3 (4), 8-row verifies
// 1.006 and 0.984.
void attend_pairs(ggml_tensor * dst, int64_t r0, int64_t rows, int64_t p_lo, int64_t p_hi, Span region,
                  const Params & par) {
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    const ggml_tensor * mask = dst->src[3];
    const int64_t hd = q->ne[0], n_kv = mask->ne[0], n_acts = p_hi - p_lo;
    const int64_t kv_head = p_lo / rows / (q->ne[1] / k->ne[2]);
    const auto mask_row = [&](int64_t p) {
        return (const float *) ((const char *) mask->data + (r0 + p % rows) * mask->nb[1]);
    };

    Span keys{INT64_MAX, INT64_MIN};
    for (int64_t p = p_lo; p < std::min(p_hi, p_lo + rows); ++p) {  // each row once
        const Span s = unmasked(mask_row(p) + region.lo, region.hi - region.lo);
        if (s.lo < s.hi) keys = {std::min(keys.lo, region.lo + s.lo), std::max(keys.hi, region.lo + s.hi)};
    }
    if (keys.lo >= keys.hi) keys = {0, n_kv};  // rows with no key: ggml's NaNs, from whole rows
    const int64_t lo = keys.lo / kStep * kStep, hi = std::min(n_kv, (keys.hi + kStep - 1) / kStep * kStep);
    const int64_t n = hi - lo;

    Buffer<float> & queries = thread_buffer<float, 6>();
    Buffer<float> & kq = thread_buffer<float, 2>();
    Buffer<float> & probs = thread_buffer<float, 3>();
    Buffer<float> & out = thread_buffer<float, 7>();
    queries.resize((size_t) (n_acts * hd));
    kq.resize((size_t) (n_acts * n));
    probs.resize((size_t) (n_acts * n));
    out.resize((size_t) (n_acts * hd));
    for (int64_t p = p_lo; p < p_hi; ++p) {
        std::memcpy(queries.data() + (p - p_lo) * hd, at(q, p / rows, r0 + p % rows), (size_t) hd * sizeof(float));
    }
    // The values' rows on their way to L2 while K·q runs: each row is read
    // whole from its start, where V·p's own fetches (kFetchAhead) begin late.
    // SmolLM2, one process alternating, same bits: one-row steps 0.978 (38 of
    // 50 faster), 8-row verifies 0.990 (33 of 50); the keys' first rows
    // fetched the same way gained nothing.
    const ggml_fp16_t * values_at = (const ggml_fp16_t *) at(v, 0, kv_head) + lo;  // the V·p kernel's rows
    for (int64_t r = 0; r < hd; ++r) {
        const char * row = (const char *) values_at + r * v->nb[1];
        for (int64_t b = 0; b < n * 2; b += 64) __builtin_prefetch(row + b, 0, 2);
    }
    const bool avx512 = row_kernels_avx512(par.path);
    // The mask lets the kernel skip the keys it hides from a row, where the
    // pairs are one head's rows, evenly apart. Across heads it cannot: an
    // output it would have skipped is finite (F16 keys and queries), and the
    // mask's -inf zeroes it the same.
    const bool one_head = p_lo / rows == (p_hi - 1) / rows;
    const int64_t mask_stride = one_head ? (int64_t) (mask->nb[1] / sizeof(float)) : 0;
    const DotRowsJob scores{GGML_TYPE_F16, at(k, lo, kv_head), k->nb[1], (const uint8_t *) queries.data(),
                            (size_t) hd * sizeof(float), GGML_TYPE_F16, hd, n_acts, kq.data(), n,
                            one_head ? mask_row(p_lo) + lo : nullptr, mask_stride};
    half_dot_rows(scores, 0, n, avx512);
    for (int64_t p = p_lo; p < p_hi; ++p) {
        const int64_t i = p - p_lo;
        soft_max_row(kq.data() + i * n, mask_row(p) + lo, probs.data() + i * n, n, par.scale);
    }
    const DotRowsJob values{GGML_TYPE_F16, values_at, v->nb[1], (const uint8_t *) probs.data(),
                            n * sizeof(float), GGML_TYPE_F16, n, n_acts, out.data(), hd};
    half_dot_rows(values, 0, hd, avx512);
    for (int64_t p = p_lo; p < p_hi; ++p) {
        float * row = (float *) ((char *) dst->data + (r0 + p % rows) * dst->nb[1]) + (p / rows) * hd;
        std::memcpy(row, out.data() + (p - p_lo) * hd, (size_t) hd * sizeof(float));
    }
}

// The most pairs a call takes several heads of a KV head for: a verify's, whose
// keys and values then come from memory once. A prefill chunk's heads go one
// at a time: Gemma 3's 64-row chunks with its 4 query heads together (256
// pairs, their scores and probabilities beyond L2 at 512 positions) ran a
// 512-token prefill 9% slower.
constexpr int64_t kGroupedPairs = 32;

// The rows of a sequence from r0, up to kActChunk of them: rows of one
// sequence are adjacent and share their region's start.
int64_t chunk_end(const int32_t * regions, int64_t r0, int64_t n) {
    int64_t end = r0 + 1;
    while (end < n && end - r0 < kActChunk && regions[2 * end] == regions[2 * r0]) ++end;
    return end;
}

// Each chunk's (row, head) pairs, ordered by head, then row, in one
// contiguous share per thread: a thread's heads are neighbours, so it reads
// the keys and values of about 1/nth of the KV heads, not of all of them, and
// a head split between two threads splits its rows. Against units of a head
// dealt to the threads in turn (each thread read every KV head twice or more
// when SmolLM2's 3 query heads share one), one process alternating, same
// bits: SmolLM2's one-row step 0.964 (80 of 100 faster), its 8-row verify
// 0.974 (83 of 100). Every chunk is shared out so (a causal prefill's later
// chunks see more keys: one share of all the pairs made its 512-token
// prefill 6% slower), the shares rotating between the threads from one
// chunk to the next, so that a batch of one-row sequences does not give the
// same thread the larger share each time. regions: each row's region of the
// view [lo, hi).
void fused_attention_op(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const Params & par = *(const Params *) userdata;
    const auto * regions = (const int32_t *) dst->src[4]->data;
    const int64_t n_head = dst->src[0]->ne[1], n = dst->src[0]->ne[2];
    const int64_t group = n_head / dst->src[1]->ne[2];  // query heads a KV head
    for (int64_t r0 = 0, chunk = 0; r0 < n; ++chunk) {
        const int64_t end = chunk_end(regions, r0, n), rows = end - r0, pairs = rows * n_head;
        const int64_t share = (ith + chunk) % nth, first = pairs * share / nth, last = pairs * (share + 1) / nth;
        const Span region{regions[2 * r0], regions[2 * r0 + 1]};
        const int64_t heads = std::clamp<int64_t>(kGroupedPairs / rows, 1, group);  // a call's, of one KV head
        for (int64_t kv = first / (group * rows); kv * group * rows < last; ++kv) {
            for (int64_t h = kv * group; h < (kv + 1) * group; h += heads) {
                const int64_t lo = std::max(first, h * rows);
                const int64_t hi = std::min({last, (h + heads) * rows, (kv + 1) * group * rows});
                if (lo < hi) attend_pairs(dst, r0, rows, lo, hi, region, par);
            }
        }
        r0 = end;
    }
}

bool fits(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const ggml_tensor * mask,
          const ggml_tensor * regions) {
    const int64_t hd = q->ne[0], n_kv = k->ne[1];
    return q->type == GGML_TYPE_F32 && q->nb[0] == sizeof(float) && q->ne[3] == 1 && k->type == GGML_TYPE_F16 &&
           v->type == GGML_TYPE_F16 && k->nb[0] == 2 && v->nb[0] == 2 && k->ne[0] == hd && v->ne[1] == hd &&
           v->ne[0] == n_kv && k->ne[2] == v->ne[2] && q->ne[1] % k->ne[2] == 0 && n_kv % kStep == 0 &&
           attention_mask_fits(mask, n_kv, q->ne[2]) && regions && regions->type == GGML_TYPE_I32 &&
           ggml_is_contiguous(regions) && ggml_nelements(regions) == 2 * q->ne[2];
}

ggml_tensor * custom_op(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                        ggml_tensor * regions, const Params & par) {
    ggml_tensor * args[5] = {q, k, v, mask, regions};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0] * q->ne[1], q->ne[2], 1, 1, args, 5, fused_attention_op,
                          GGML_N_TASKS_MAX, (void *) interned(par));
}

// The unfused chain as a one-sequence forward builds it on the kernel paths.
ggml_tensor * chain(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                    float scale, RowKernels path) {
    ggml_tensor * kq = row_mul_mat(ctx, k, ggml_permute(ctx, q, 0, 2, 1, 3), path, mask);
    kq = masked_soft_max(ctx, kq, mask, scale, path);
    ggml_tensor * kqv = row_mul_mat(ctx, v, kq, path);
    return ggml_cont_2d(ctx, ggml_permute(ctx, kqv, 0, 2, 1, 3), q->ne[0] * q->ne[1], q->ne[2]);
}

// A batch of three sequences' rows over regions of 64 keys (a verify, a decode
// step, a sliding-window row, and a row whose region starts past the others),
// with two query heads per KV head, against the chain: any differing bit
// disables the op.
bool probe() {
    const int64_t hd = 64, n_head = 4, n_head_kv = 2, n_kv = 256, n = 7;
    ggml_init_params params{64 << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    if (!ctx) return false;
    ggml_tensor * q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hd, n_head, n);
    ggml_tensor * kc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, hd * n_head_kv, n_kv);
    ggml_tensor * vc = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, hd * n_head_kv);
    ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, n);
    ggml_tensor * regions = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 2 * n);
    std::mt19937 rng(20261202);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < ggml_nelements(q); ++i) ((float *) q->data)[i] = normal(rng);
    for (ggml_tensor * c : {kc, vc}) {
        for (int64_t i = 0; i < ggml_nelements(c); ++i) ((ggml_fp16_t *) c->data)[i] = ggml_fp32_to_fp16(normal(rng));
    }
    // row -> (region start, first and last key seen)
    const int64_t seen[n][3] = {{0, 0, 40}, {0, 0, 41}, {0, 0, 42}, {64, 64, 64 + 9}, {128, 128 + 20, 128 + 27},
                                {192, 192, 192 + 63}, {192, 192 + 3, 192 + 50}};
    for (int64_t r = 0; r < n; ++r) {
        float * row = (float *) mask->data + r * n_kv;
        for (int64_t j = 0; j < n_kv; ++j) row[j] = j >= seen[r][1] && j <= seen[r][2] ? 0.0f : -INFINITY;
        ((int32_t *) regions->data)[2 * r] = (int32_t) seen[r][0];
        ((int32_t *) regions->data)[2 * r + 1] = (int32_t) seen[r][0] + 64;
    }
    ggml_tensor * k = ggml_permute(ctx, ggml_view_3d(ctx, kc, hd, n_head_kv, n_kv, hd * 2, kc->nb[1], 0), 0, 2, 1, 3);
    ggml_tensor * v = ggml_view_3d(ctx, vc, n_kv, hd, n_head_kv, vc->nb[1], vc->nb[1] * hd, 0);
    Params par{0.125f, RowKernels::avx2};
    const bool same = op_matches_ggml(ctx, chain(ctx, q, k, v, mask, par.scale, par.path), {q, k, v, mask, regions},
                                      fused_attention_op, &par);
    ggml_free(ctx);
    return same;
}
#endif

}  // namespace

bool fused_attention_usable() {
#if GGSPEC_X86_KERNEL
    static const bool same = row_kernels_cpu(RowKernels::avx2) && masked_soft_max_usable() &&
                             row_kernel_usable(GGML_TYPE_F16, RowKernels::avx2) &&
                             op_probe_passes(probe, "the fused attention differs from the unfused chain; using the chain");
    return same;
#else
    return false;
#endif
}

ggml_tensor * fused_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                              ggml_tensor * mask, ggml_tensor * regions, float scale, RowKernels path) {
#if GGSPEC_X86_KERNEL
    if (path != RowKernels::off && fits(q, k, v, mask, regions) && fused_attention_usable()) {
        return custom_op(ctx, q, k, v, mask, regions, Params{scale, path});
    }
#endif
    (void) ctx, (void) q, (void) k, (void) v, (void) mask, (void) regions, (void) scale, (void) path;
    return nullptr;
}

}  // namespace ggspec
