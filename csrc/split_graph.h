// A split target's forward graph on ggml's scheduler (placement.h): the
// scheduler over its devices, told what it would get wrong, and allocated.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "hparams.h"
#include "recurrent_state.h"

namespace ggspec {

// A scheduler over `backends` (the workers', then `local`) for `graph`, its
// memory allocated. layer_inputs: the residual entering each layer (the
// builder's); sources: each recurrent layer's per-row states.
ggml_backend_sched_t schedule_split_graph(ggml_cgraph * graph, size_t max_nodes,
                                          const std::vector<ggml_tensor *> & layer_inputs,
                                          const std::vector<StateSources> & sources, const ModelWeights & w,
                                          const RecurrentState * rs, std::vector<ggml_backend_t> backends,
                                          ggml_backend_t local, const std::string & what);

}  // namespace ggspec
