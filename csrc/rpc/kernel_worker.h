// The device `ggspec rpc-server` serves: this host's CPU, whose backend runs
// the weight products a ggspec client tags (kernels/portable_op.h) on this
// process's own kernels, and answers a client's query for them. A plain ggml
// worker runs ggml's ops only; its clients tag nothing for it.
#pragma once
#include "ggml-backend.h"

namespace ggspec::rpc {

// A device like `cpu` whose backends point tagged products at this process's
// kernels before computing a graph. A graph with any other custom op (a
// function pointer of another process) fails instead of calling it.
ggml_backend_dev_t kernel_worker_device(ggml_backend_dev_t cpu);

}  // namespace ggspec::rpc
