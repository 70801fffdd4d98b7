#include "buffers.h"

#include "errors.h"
#include "log.h"

namespace ggspec {

namespace {

std::string mib(size_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

ggml_backend_buffer_t allocate_tensors(ggml_context * ctx, ggml_backend_buffer_type_t buft, const std::string & what) {
    size_t bytes = 0;
    for (ggml_tensor * t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) {
        bytes += ggml_backend_buft_get_alloc_size(buft, t);
    }
    LogCapture quiet;  // ggml logs its failure; the exception says it instead
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
    if (!buffer && bytes > 0) {
        throw AllocationError("cannot allocate " + mib(bytes) + " of " + ggml_backend_buft_name(buft) +
                              " memory for " + what);
    }
    return buffer;
}

void allocate_graph(ggml_gallocr_t allocator, ggml_cgraph * graph, const std::string & what) {
    LogCapture quiet;
    if (!ggml_gallocr_alloc_graph(allocator, graph)) {
        throw AllocationError("cannot allocate the working memory of " + what);
    }
}

}  // namespace ggspec
