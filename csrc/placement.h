// Where a target's layers live and run. On one device, all of them. Split
// over ggml's RPC workers, contiguous runs of layers on each worker in the
// order given, then the rest on the local device; the token embedding, the
// output norm, the LM head and whatever a drafter reads or borrows stay local.
// A layer's weights, KV cache and recurrent state live where it runs, and a
// forward runs on ggml's scheduler over every device (graph_runner.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "buffers.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "kernels/row_matmul.h"

namespace ggspec {

class Placement {
public:
    // Everything on `local`.
    Placement(ggml_backend_dev_t local, ggml_backend_t local_backend, int64_t n_layer);
    // Layers split over the workers ("host:port", each probed first) and the
    // local device. split: one share per worker then one for the local device
    // (empty: by each device's free memory).
    Placement(ggml_backend_dev_t local, ggml_backend_t local_backend, int64_t n_layer,
              const std::vector<std::string> & workers, std::vector<float> split, double answer_timeout_s);

    bool split() const { return !workers_.empty(); }
    LayerBufts layer_bufts() const;
    // The buffer type a weight of the model file goes to, by its name; null: local.
    ggml_backend_buffer_type_t remote_buft_of(const std::string & tensor_name) const;
    // The path weight products take on each worker, where this host's take
    // `local`: a ggspec worker runs them on the same kernels, or on AVX2's where
    // it lacks local's (kernels/portable_op.h); any other, ggml's own ops.
    WorkerKernels worker_kernels(RowKernels local) const;
    // What ggml's scheduler runs over: the workers' backends, the local one last.
    std::vector<ggml_backend_t> backends() const;
    bool layer_is_local(int64_t il) const { return device_of_layer_[il] == (int) workers_.size(); }
    // "layers 0-5 on RPC0 (127.0.0.1:50052), layers 6-11 on CPU"
    std::string describe() const;

private:
    ggml_backend_dev_t device(int d) const { return d < (int) workers_.size() ? workers_[d].dev : local_; }

    struct Worker {
        std::string endpoint;
        ggml_backend_dev_t dev;
        ggml_backend_ptr backend;
        // ggml's RPC client keeps a worker's connection while a buffer on it
        // lives: without one, each query before the weights' opened its own.
        // The kernel query's buffer (rpc::worker_kernel_paths).
        ggml_backend_buffer_ptr connection;
        int32_t kernel_paths;  // the row-kernel paths it serves: bit (1 << RowKernels value)
    };
    ggml_backend_dev_t local_;
    ggml_backend_t local_backend_;
    std::vector<Worker> workers_;
    std::vector<int> device_of_layer_;  // index into workers_, or workers_.size() for the local device
};

}  // namespace ggspec
