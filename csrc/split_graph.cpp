#include "split_graph.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "buffers.h"
#include "errors.h"
#include "kernels/portable_op.h"
#include "log.h"

namespace ggspec {

namespace {

bool is_view(const ggml_tensor * t) {
    return t->op == GGML_OP_VIEW || t->op == GGML_OP_RESHAPE || t->op == GGML_OP_PERMUTE ||
           t->op == GGML_OP_TRANSPOSE;
}

// ggml's scheduler starts no split at a view node: a view joins the split
// before it, and ggml's RPC client sends it to that split's worker, which drops
// the connection over a tensor in another worker's memory ("invalid data ptr").
// A builder that makes such a view (of a cache or state tensor, placed early in
// the graph) is caught here, before anything is sent.
void check_views_resolve(ggml_backend_sched_t sched, ggml_cgraph * graph, ggml_backend_t local) {
    ggml_backend_t current = nullptr;
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        ggml_tensor * t = ggml_graph_node(graph, i);
        if (!is_view(t)) {
            current = ggml_backend_sched_get_tensor_backend(sched, t);
            continue;
        }
        const ggml_backend_buffer_t home = t->view_src ? t->view_src->buffer : nullptr;
        if (!current || current == local || !home || ggml_backend_buffer_is_host(home)) continue;
        if (!ggml_backend_supports_buft(current, ggml_backend_buffer_get_type(home))) {
            throw std::logic_error(std::string("a split forward graph views '") + t->view_src->name + "' (on " +
                                   ggml_backend_buffer_name(home) + ") inside a split of " +
                                   ggml_backend_name(current) + ", which cannot resolve it");
        }
    }
}

// The backend holding `t` (a weight, a state tensor, or a view of one), or null.
ggml_backend_t backend_of(const std::vector<ggml_backend_t> & backends, const ggml_tensor * t) {
    const ggml_tensor * home = t->view_src ? t->view_src : t;
    return home->buffer ? backend_holding(backends, home->buffer) : nullptr;
}

// Where a custom op runs: here, or a tagged weight product's worker.
ggml_backend_t product_device(const ggml_tensor * t, const std::vector<ggml_backend_t> & backends,
                              ggml_backend_t local) {
    const OpTag tag = tag_of(t);
    if (tag.kind != TagKind::kernel || tag.id != KernelOpId::dot_rows) return local;
    ggml_backend_t holder = backend_of(backends, t->src[0]);
    return holder ? holder : local;
}

}  // namespace

size_t device_index(const std::vector<ggml_backend_t> & backends, const ggml_tensor * t) {
    return (size_t) (std::find(backends.begin(), backends.end(), backend_of(backends, t)) - backends.begin());
}

ggml_backend_sched_t schedule_split_graph(ggml_cgraph * graph, size_t max_nodes,
                                          const std::vector<ggml_tensor *> & layer_inputs,
                                          const std::vector<StateSources> & sources, const ModelWeights & w,
                                          const RecurrentState * rs, const std::vector<NodePin> & pins,
                                          std::vector<ggml_backend_t> backends, ggml_backend_t local,
                                          const std::string & what) {
    // Its hash set holds the graph's leaves (weights, inputs) as well as its nodes.
    ggml_backend_sched_t sched =
        ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), 2 * max_nodes, false, false);
    // The residual entering layer il crosses to layer il's device alone: what
    // reads it (its norm, the residual add) runs there. The scheduler would put
    // the norm, which has no weight, on the device before, and send both.
    std::unordered_map<const ggml_tensor *, ggml_backend_t> layer_device;
    for (size_t il = 1; il < layer_inputs.size(); ++il) {
        const ggml_tensor * norm = w.layers[il].attn_norm;
        if (ggml_backend_t b = norm ? backend_of(backends, norm) : nullptr) {
            layer_device[layer_inputs[il]] = b;
        }
    }
    try {
        for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
            ggml_tensor * t = ggml_graph_node(graph, i);
            // ggspec's kernels are custom ops holding this process's function
            // pointers: they run here. But a weight product the builder tagged
            // for a ggspec worker (ForwardGraph::products_for) runs where its
            // weight lives, with the quantized activations it reads.
            if (is_custom_op(t)) {
                ggml_backend_t where = product_device(t, backends, local);
                ggml_backend_sched_set_tensor_backend(sched, t, where);
                if (ggml_tensor * acts = t->src[2]; where != local && acts && is_custom_op(acts)) {
                    ggml_backend_sched_set_tensor_backend(sched, acts, where);
                }
            }
            if (t->op == GGML_OP_RMS_NORM || t->op == GGML_OP_NORM) {
                auto it = layer_device.find(t->src[0]);
                if (it != layer_device.end()) ggml_backend_sched_set_tensor_backend(sched, t, it->second);
            }
        }
        for (const auto & [node, device] : pins) ggml_backend_sched_set_tensor_backend(sched, node, backends[device]);
        // A verify's per-row states stay where the layer's state lives, so that
        // committing one is a copy on that device (StateCommitGraph).
        for (const StateSources & src : sources) {
            ggml_backend_t b = backend_holding(backends, rs->ssm(src.il, src.seq)->buffer);
            ggml_backend_sched_set_tensor_backend(sched, src.delta_net, b);
            ggml_backend_sched_set_tensor_backend(sched, src.conv_input, b);
        }
        LogCapture quiet;
        if (!ggml_backend_sched_alloc_graph(sched, graph)) {
            throw AllocationError("cannot allocate the working memory of " + what);
        }
        check_views_resolve(sched, graph, local);
    } catch (...) {
        ggml_backend_sched_free(sched);
        throw;
    }
    return sched;
}

}  // namespace ggspec
