// Backend memory for a context's tensors or a graph. A failure is an
// AllocationError that says what needed the memory and how much, never ggml's
// log line and a null buffer.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"

namespace ggspec {

ggml_backend_buffer_t allocate_tensors(ggml_context * ctx, ggml_backend_buffer_type_t buft, const std::string & what);
void allocate_graph(ggml_gallocr_t allocator, ggml_cgraph * graph, const std::string & what);

// The buffer type of each layer's tensors: one device's for a target on one
// device, a worker's for a split target's layers on that worker.
using LayerBufts = std::vector<ggml_backend_buffer_type_t>;
inline LayerBufts on_one_device(ggml_backend_dev_t dev, int64_t n_layer) {
    return LayerBufts((size_t) n_layer, ggml_backend_dev_buffer_type(dev));
}

// The first of `backends` that can compute on `buffer`'s memory (a split
// target's worker, or the local device); null: none.
ggml_backend_t backend_holding(const std::vector<ggml_backend_t> & backends, ggml_backend_buffer_t buffer);

// Tensors kept per layer on the layer's device: a context and a buffer per
// buffer type. Make the tensors in context_for(), then allocate() them all.
class PlacedTensors {
public:
    PlacedTensors() = default;
    PlacedTensors(const PlacedTensors &) = delete;
    PlacedTensors & operator=(const PlacedTensors &) = delete;
    ~PlacedTensors();

    // A context for tensors of buffer type buft, sized for max_tensors of them.
    ggml_context * context_for(ggml_backend_buffer_type_t buft, size_t max_tensors);
    void allocate(const std::string & what);
    void clear(uint8_t value);
    size_t bytes() const;

private:
    std::vector<std::pair<ggml_backend_buffer_type_t, ggml_context *>> contexts_;
    std::vector<ggml_backend_buffer_t> buffers_;
};

}  // namespace ggspec
