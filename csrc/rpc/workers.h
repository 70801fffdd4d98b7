// ggml's RPC workers: the devices a target's layers may be placed on, and the
// server a worker process runs. The protocol has no authentication: a worker
// runs whatever graph a client sends it.
#pragma once
#include <string>

#include "ggml-backend.h"

namespace ggspec::rpc {

// Checks that `endpoint` ("host:port") answers ggml's RPC handshake with this
// build's protocol version, before ggml's client connects (which aborts the
// process on a failed connection). Throws std::invalid_argument naming it.
void probe_worker(const std::string & endpoint, double timeout_s);

// The worker's device (its first), after probe_worker.
ggml_backend_dev_t worker_device(const std::string & endpoint);

// Serves this host's CPU to RPC clients at `endpoint` until the process ends.
// cache_dir: where large tensors a client sends are kept by hash ("": none).
void serve(const std::string & endpoint, const std::string & cache_dir, int n_threads);

}  // namespace ggspec::rpc
