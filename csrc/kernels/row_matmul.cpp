#include "kernels/row_matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "kernels/q8_dot_rows.h"

namespace ggspec {
namespace {

constexpr int64_t kWeightRowAlign = 8;  // the kernel's weight tile

void q8_dot_rows_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * a = dst->src[1];
    const Q8DotRows job{w->type,    w->data,    w->nb[1], a->data, a->nb[1], w->ne[0] / ggml_blck_size(w->type),
                        a->ne[1], (float *) dst->data, dst->ne[0]};
    const int64_t n = w->ne[1];
    const int64_t per = ((n + nth - 1) / nth + kWeightRowAlign - 1) / kWeightRowAlign * kWeightRowAlign;
    const int64_t begin = std::min(n, ith * per);
    q8_dot_rows(job, begin, std::min(n, begin + per));
}

// What ggml quantizes the activations to for this weight type (its vec_dot_type).
ggml_type activation_type(ggml_type weight_type) {
    return weight_type == GGML_TYPE_Q4_1 ? GGML_TYPE_Q8_1 : GGML_TYPE_Q8_0;
}

// Random weights and activations through both ggml's vec_dot and the kernel,
// at 1..9 activation rows; any differing bit disables the kernel for the type.
bool probe(ggml_type type) {
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
    const ggml_type act_type = activation_type(type);
    const ggml_type_traits_cpu * act_traits = ggml_get_type_traits_cpu(act_type);
    if (!traits->vec_dot || !act_traits->from_float || traits->vec_dot_type != act_type) return false;
    const int64_t k = 640, n_w = 24, n_a = 9;
    const size_t row = ggml_row_size(type, k), act_row = ggml_row_size(act_type, k);
    std::mt19937 rng(20261129);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values((size_t) (k * std::max(n_w, n_a)));
    std::vector<uint8_t> weights(row * n_w), acts(act_row * n_a);
    for (float & v : values) v = normal(rng) * 0.05f;
    ggml_quantize_chunk(type, values.data(), weights.data(), 0, n_w, k, nullptr);
    for (float & v : values) v = normal(rng) * 3.0f;
    for (int64_t a = 0; a < n_a; ++a) act_traits->from_float(values.data() + a * k, acts.data() + a * act_row, k);

    for (int64_t rows = 1; rows <= n_a; ++rows) {
        std::vector<float> got((size_t) (rows * n_w));
        q8_dot_rows(Q8DotRows{type, weights.data(), row, acts.data(), act_row, k / 32, rows, got.data(), n_w}, 0, n_w);
        for (int64_t a = 0; a < rows; ++a) {
            for (int64_t w = 0; w < n_w; ++w) {
                float want;
                traits->vec_dot((int) k, &want, 0, weights.data() + w * row, 0, acts.data() + a * act_row, 0, 1);
                if (std::memcmp(&want, &got[a * n_w + w], sizeof(float)) != 0) return false;
            }
        }
    }
    return true;
}

}  // namespace

bool row_kernel_usable(ggml_type weight_type) {
    if (!q8_dot_rows_handles(weight_type)) return false;
    static const std::map<ggml_type, bool> usable = [] {
        std::map<ggml_type, bool> m;
        const bool cpu = q8_dot_rows_supported();
        for (ggml_type t : {GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1}) {
            m[t] = cpu && probe(t);
            if (cpu && !m[t]) {
                std::fprintf(stderr, "ggspec: the multi-row %s kernel differs from this ggml's vec_dot; using ggml_mul_mat\n",
                             ggml_type_name(t));
            }
        }
        return m;
    }();
    return usable.at(weight_type);
}

ggml_tensor * row_mul_mat(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, bool allow_kernel) {
    const bool kernel = allow_kernel && x->type == GGML_TYPE_F32 && ggml_n_dims(x) <= 2 && ggml_n_dims(w) == 2 &&
                        x->ne[1] >= kRowKernelMinRows && ggml_is_contiguous(w) && row_kernel_usable(w->type);
    if (!kernel) return ggml_mul_mat(ctx, w, x);
    // ggml_cpy quantizes each row with the same from_float that ggml_mul_mat applies.
    ggml_tensor * xq = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, activation_type(w->type), x->ne[0], x->ne[1]));
    ggml_tensor * args[2] = {w, xq};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, args, 2, q8_dot_rows_op, GGML_N_TASKS_MAX,
                          nullptr);
}

}  // namespace ggspec
