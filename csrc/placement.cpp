#include "placement.h"

#include <cmath>
#include <numeric>
#include <stdexcept>

#ifdef GGSPEC_RPC
#include "rpc/wire.h"
#include "rpc/workers.h"
#endif

namespace ggspec {

namespace {

constexpr double kProbeSeconds = 5.0;

// Layer il goes to the first device whose running share of the layers passes it.
std::vector<int> assign_layers(int64_t n_layer, const std::vector<float> & split) {
    const double total = std::accumulate(split.begin(), split.end(), 0.0);
    std::vector<int> device(n_layer);
    double end = 0.0;
    int64_t il = 0;
    for (size_t d = 0; d < split.size(); ++d) {
        end += split[d] / total;
        const int64_t last = d + 1 == split.size() ? n_layer : (int64_t) std::llround(end * (double) n_layer);
        for (; il < last; ++il) device[il] = (int) d;
    }
    return device;
}

}  // namespace

Placement::Placement(ggml_backend_dev_t local, ggml_backend_t local_backend, int64_t n_layer)
    : local_(local), local_backend_(local_backend), device_of_layer_(n_layer, 0) {}

Placement::Placement(ggml_backend_dev_t local, ggml_backend_t local_backend, int64_t n_layer,
                     const std::vector<std::string> & workers, std::vector<float> split, double answer_timeout_s)
    : local_(local), local_backend_(local_backend) {
#ifndef GGSPEC_RPC
    (void) answer_timeout_s;
    if (!workers.empty()) {
        throw std::invalid_argument("this ggspec was built without ggml's RPC backend (GGML_RPC=off): no --rpc");
    }
#else
    if (!split.empty() && split.size() != workers.size() + 1) {
        throw std::invalid_argument("tensor_split has " + std::to_string(split.size()) + " shares; " +
                                    std::to_string(workers.size() + 1) +
                                    " expected (one per RPC worker, then the local device)");
    }
    for (float share : split) {
        if (!(share >= 0.0f) || !std::isfinite(share)) {
            throw std::invalid_argument("tensor_split shares must be finite and >= 0");
        }
    }
    if (!split.empty() && std::accumulate(split.begin(), split.end(), 0.0) <= 0.0) {
        throw std::invalid_argument("tensor_split shares must not all be 0");
    }
    for (const std::string & endpoint : workers) {
        for (const Worker & w : workers_) {
            if (w.endpoint == endpoint) throw std::invalid_argument("RPC worker " + endpoint + " is listed twice");
        }
        rpc::probe_worker(endpoint, kProbeSeconds);
        rpc::exit_cleanly_on_lost_worker();
        rpc::set_answer_timeout(answer_timeout_s);
        Worker w{endpoint, rpc::worker_device(endpoint), nullptr, nullptr, 0};
        w.backend.reset(ggml_backend_dev_init(w.dev, nullptr));
        if (!w.backend) throw std::runtime_error("cannot start a backend on RPC worker " + endpoint);
        w.kernel_paths = rpc::worker_kernel_paths(w.backend.get(), w.connection);
        workers_.push_back(std::move(w));
    }
    if (split.empty()) {
        for (size_t d = 0; d <= workers_.size(); ++d) {
            size_t free = 0, total = 0;
            ggml_backend_dev_memory(device((int) d), &free, &total);
            split.push_back((float) free);
        }
    }
    device_of_layer_ = assign_layers(n_layer, split);
#endif
}

LayerBufts Placement::layer_bufts() const {
    LayerBufts bufts;
    for (int d : device_of_layer_) bufts.push_back(ggml_backend_dev_buffer_type(device(d)));
    return bufts;
}

ggml_backend_buffer_type_t Placement::remote_buft_of(const std::string & name) const {
    if (!split() || name.rfind("blk.", 0) != 0) return nullptr;
    const size_t dot = name.find('.', 4);
    int64_t il = -1;
    try {
        il = std::stoll(name.substr(4, dot - 4));
    } catch (...) {
        return nullptr;
    }
    // Blocks past the trunk's (a NextN head's) are a drafter's: local.
    if (il < 0 || il >= (int64_t) device_of_layer_.size() || layer_is_local(il)) return nullptr;
    return ggml_backend_dev_buffer_type(device(device_of_layer_[il]));
}

WorkerKernels Placement::worker_kernels(RowKernels local) const {
    WorkerKernels out;
    for (const Worker & w : workers_) {
        // Every path gives vec_dot's bits: a worker without AVX512-VNNI runs the
        // AVX2 kernels for a client that has it.
        auto served = [&](RowKernels p) { return local != RowKernels::off && (w.kernel_paths & (1 << (int) p)); };
        const RowKernels path = served(local) ? local : served(RowKernels::avx2) ? RowKernels::avx2 : RowKernels::off;
        out.emplace_back(ggml_backend_dev_buffer_type(w.dev), path);
    }
    return out;
}

std::vector<ggml_backend_t> Placement::backends() const {
    std::vector<ggml_backend_t> out;
    for (const Worker & w : workers_) out.push_back(w.backend.get());
    out.push_back(local_backend_);
    return out;
}

std::string Placement::describe() const {
    std::string out;
    const int64_t n = (int64_t) device_of_layer_.size();
    for (int64_t first = 0; first < n;) {
        int64_t last = first;
        while (last + 1 < n && device_of_layer_[last + 1] == device_of_layer_[first]) ++last;
        const int d = device_of_layer_[first];
        out += (out.empty() ? "" : ", ") +
               (first == last ? "layer " + std::to_string(first)
                              : "layers " + std::to_string(first) + "-" + std::to_string(last)) +
               " on " + ggml_backend_dev_name(device(d));
        if (d < (int) workers_.size()) {
            out += " (" + workers_[d].endpoint + (workers_[d].kernel_paths ? ", ggspec kernels)" : ")");
        }
        first = last + 1;
    }
    return out;
}

}  // namespace ggspec
