#include "graph_cache.h"

namespace ggspec {

CachedGraph::~CachedGraph() {
    state_commits.clear();  // they view this graph's tensors
    if (allocator) ggml_gallocr_free(allocator);
    if (sched) ggml_backend_sched_free(sched);
    if (ctx) ggml_free(ctx);
}

size_t CachedGraph::bytes() const {
    size_t total = allocator ? ggml_gallocr_get_buffer_size(allocator, 0) : 0;
    for (int i = 0; sched && i < ggml_backend_sched_get_n_backends(sched); ++i) {
        total += ggml_backend_sched_get_buffer_size(sched, ggml_backend_sched_get_backend(sched, i));
    }
    return total;
}

CachedGraph & GraphCache::get(const GraphKey & key, const std::function<std::unique_ptr<CachedGraph>()> & build) {
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        it = graphs_.emplace(key, build()).first;
        ++builds_;
        evict_over_budget(it->second.get());
    }
    it->second->last_use = ++clock_;
    return *it->second;
}

void GraphCache::evict_over_budget(const CachedGraph * keep) {
    for (;;) {
        size_t total = 0;
        auto oldest = graphs_.end();
        for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
            total += it->second->bytes();
            if (it->second.get() != keep && (oldest == graphs_.end() || it->second->last_use < oldest->second->last_use)) {
                oldest = it;
            }
        }
        if (total <= budget_ || oldest == graphs_.end()) return;
        graphs_.erase(oldest);
    }
}

}  // namespace ggspec
