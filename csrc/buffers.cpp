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

ggml_backend_t backend_holding(const std::vector<ggml_backend_t> & backends, ggml_backend_buffer_t buffer) {
    for (ggml_backend_t b : backends) {
        if (buffer && ggml_backend_supports_buft(b, ggml_backend_buffer_get_type(buffer))) return b;
    }
    return nullptr;
}

PlacedTensors::~PlacedTensors() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
    for (auto & c : contexts_) ggml_free(c.second);
}

ggml_context * PlacedTensors::context_for(ggml_backend_buffer_type_t buft, size_t max_tensors) {
    for (auto & c : contexts_) {
        if (c.first == buft) return c.second;
    }
    ggml_init_params params = {ggml_tensor_overhead() * max_tensors, nullptr, true};
    contexts_.emplace_back(buft, ggml_init(params));
    return contexts_.back().second;
}

void PlacedTensors::allocate(const std::string & what) {
    for (auto & c : contexts_) {
        if (ggml_backend_buffer_t b = allocate_tensors(c.second, c.first, what)) buffers_.push_back(b);
    }
}

void PlacedTensors::clear(uint8_t value) {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_clear(b, value);
}

size_t PlacedTensors::bytes() const {
    size_t total = 0;
    for (ggml_backend_buffer_t b : buffers_) total += ggml_backend_buffer_get_size(b);
    return total;
}

}  // namespace ggspec
