#include "kernels/set_columns.h"

#include <algorithm>
#include <vector>

#include "ggml-cpu.h"

namespace ggspec {
namespace {

// Thread ith writes dst rows [d0, d1): its own cache lines, each row's new
// slots side by side. ggml_set_rows converts one element per call; F16's and
// F32's conversions give each element the same bits whatever the run's
// length (one rounding instruction, or a copy), so a row's run converts at
// once. BF16's vector conversion flushes denormals where its scalar one does
// not, so it keeps one element per call.
void set_columns_op(ggml_tensor * dst, const ggml_tensor * /*a*/, const ggml_tensor * src, const ggml_tensor * idx,
                    int ith, int nth, void * /*userdata*/) {
    const int64_t d = src->ne[0], n = src->ne[1];
    const int64_t d0 = d * ith / nth, d1 = d * (ith + 1) / nth;
    if (d0 >= d1) return;
    const ggml_from_float_t convert = ggml_get_type_traits_cpu(dst->type)->from_float;
    const size_t el = ggml_type_size(dst->type);
    const int64_t run = dst->type == GGML_TYPE_BF16 ? 1 : d1 - d0;
    thread_local std::vector<char> converted;
    converted.resize((size_t) (d1 - d0) * el);
    for (int64_t r = 0; r < n; ++r) {
        const float * row = (const float *) ((const char *) src->data + r * src->nb[1]);
        for (int64_t j = d0; j < d1; j += run) convert(row + j, converted.data() + (j - d0) * el, run);
        const int64_t slot = ((const int64_t *) idx->data)[r];
        for (int64_t j = d0; j < d1; ++j) {
            std::copy_n(converted.data() + (j - d0) * el, el, (char *) dst->data + j * dst->nb[1] + slot * el);
        }
    }
}

}  // namespace

ggml_tensor * set_columns(ggml_context * ctx, ggml_tensor * dst, ggml_tensor * src, ggml_tensor * idx,
                          ggml_tensor * element_idx, RowKernels path) {
    if (path != RowKernels::off) {
        return ggml_map_custom3_inplace(ctx, dst, src, idx, set_columns_op, GGML_N_TASKS_MAX, nullptr);
    }
    return ggml_set_rows(ctx, ggml_reshape_2d(ctx, dst, 1, ggml_nelements(dst)),
                         ggml_reshape_2d(ctx, src, 1, ggml_nelements(src)), element_idx);
}

}  // namespace ggspec
