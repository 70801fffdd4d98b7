// ggml's RPC workers: the devices a target's layers may be placed on, and the
// server a worker process runs. The protocol has no authentication: a worker
// runs whatever graph a client sends it.
#pragma once
#include <string>

#include <cstdint>

#include "ggml-backend.h"
#include "ggml-cpp.h"

namespace ggspec::rpc {

// Checks that `endpoint` ("host:port") answers ggml's RPC handshake with this
// build's protocol version, before ggml's client connects (which aborts the
// process on a failed connection). Throws std::invalid_argument naming it.
void probe_worker(const std::string & endpoint, double timeout_s);

// The worker's device (its first), after probe_worker.
ggml_backend_dev_t worker_device(const std::string & endpoint);

// Asks the worker whether it runs ggspec's kernels (kernels/portable_op.h), by
// a graph a plain ggml worker computes as a copy: the paths it serves, bit
// (1 << RowKernels value), 0 for none. The query's buffer is left in `held`,
// which keeps ggml's connection to the worker open while it lives.
int32_t worker_kernel_paths(ggml_backend_t worker, ggml_backend_buffer_ptr & held);

// Serves this host's CPU to RPC clients at `endpoint` until the process ends.
// cache_dir: where large tensors a client sends are kept by hash ("": none).
// kernels: clients' weight products run on ggspec's kernels here (else
// ggml's own ops, as on any ggml worker).
void serve(const std::string & endpoint, const std::string & cache_dir, int n_threads, bool kernels);

}  // namespace ggspec::rpc
