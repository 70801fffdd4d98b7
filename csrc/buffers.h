// Backend memory for a context's tensors or a graph. A failure is an
// AllocationError that says what needed the memory and how much, never ggml's
// log line and a null buffer.
#pragma once
#include <string>

#include "ggml-alloc.h"
#include "ggml-backend.h"

namespace ggspec {

ggml_backend_buffer_t allocate_tensors(ggml_context * ctx, ggml_backend_buffer_type_t buft, const std::string & what);
void allocate_graph(ggml_gallocr_t allocator, ggml_cgraph * graph, const std::string & what);

}  // namespace ggspec
