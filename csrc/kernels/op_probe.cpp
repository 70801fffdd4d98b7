#include "kernels/op_probe.h"

#include <cstdio>
#include <cstring>

#include "ggml-cpu.h"
#include "kernels/row_matmul.h"

namespace ggspec {

bool op_matches_ggml(ggml_context * ctx, ggml_tensor * want, std::initializer_list<ggml_tensor *> sources,
                     ggml_custom_op_t op, void * userdata) {
    ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, want);
    if (ggml_graph_compute_with_ctx(ctx, graph, 1) != GGML_STATUS_SUCCESS) return false;
    ggml_tensor * got = ggml_dup_tensor(ctx, want);
    int i = 0;
    for (ggml_tensor * source : sources) got->src[i++] = source;
    op(got, 0, 1, userdata);
    return std::memcmp(got->data, want->data, ggml_nbytes(want)) == 0;
}

bool op_probe_passes(bool (*probe)(), const char * failure) {
    if (!row_kernels_cpu(RowKernels::avx2)) return false;
    const bool ok = probe();
    if (!ok) std::fprintf(stderr, "ggspec: %s\n", failure);
    return ok;
}

}  // namespace ggspec
