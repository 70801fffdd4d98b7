// A split target's forward graph on ggml's scheduler (placement.h): the
// scheduler over its devices, told what it would get wrong, and allocated.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "hparams.h"
#include "recurrent_state.h"

namespace ggspec {

// A node, and the device it runs on: an index into a split's backends.
using NodePin = std::pair<ggml_tensor *, size_t>;

// Which of `backends` holds `t` (a weight, a state tensor, or a view of one),
// or backends.size() when none does.
size_t device_index(const std::vector<ggml_backend_t> & backends, const ggml_tensor * t);

// A scheduler over `backends` (the workers', then `local`) for `graph`, its
// memory allocated. layer_inputs: the residual entering each layer (the
// builder's); sources: each recurrent layer's per-row states; pins: nodes the
// builder placed.
ggml_backend_sched_t schedule_split_graph(ggml_cgraph * graph, size_t max_nodes,
                                          const std::vector<ggml_tensor *> & layer_inputs,
                                          const std::vector<StateSources> & sources, const ModelWeights & w,
                                          const RecurrentState * rs, const std::vector<NodePin> & pins,
                                          std::vector<ggml_backend_t> backends, ggml_backend_t local,
                                          const std::string & what);

}  // namespace ggspec
