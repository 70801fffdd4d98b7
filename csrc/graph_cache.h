// Persistent forward graphs, keyed by their shape, built once and replayed.
//
// A graph's shape is everything that changes its nodes: the row count, the KV
// lengths it attends over, which rows reach the LM head and in what form, and
// the hidden taps. Positions, masks and cache slots are input tensors, so one
// graph serves every step of that shape (and a backend can capture it).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "models/forward_graph.h"
#include "recurrent_state.h"

namespace ggspec {

struct GraphKey {
    int64_t n_rows = 0;
    int64_t n_kv_full = 0;
    int64_t n_kv_swa = 0;
    int64_t n_out = 0;  // rows through the LM head: 0, 1 (the last) or n_rows
    int top_k = 0;      // 0: full logits; k: the top k ids and logits
    std::vector<int> taps;  // layer indices; -1 = after the final norm
    // Recurrent layers: each sequence's rows, in order (empty: none).
    std::vector<RecurrentSegment> recurrent;

    bool operator<(const GraphKey & o) const {
        return std::tie(n_rows, n_kv_full, n_kv_swa, n_out, top_k, taps, recurrent) <
               std::tie(o.n_rows, o.n_kv_full, o.n_kv_swa, o.n_out, o.top_k, o.taps, o.recurrent);
    }
};

struct CachedGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * graph = nullptr;
    ggml_gallocr_t allocator = nullptr;    // its memory on one device, or
    ggml_backend_sched_t sched = nullptr;  // on each device of a split target, and how it runs there
    ggml_tensor * tokens = nullptr;
    ggml_tensor * positions = nullptr;
    ggml_tensor * hidden_in = nullptr;  // F32 [hidden width, n_rows], a drafter's
    ggml_tensor * out_rows = nullptr;   // I32 [n_out]: the rows the LM head reads, when not all
    AttentionInputs full, swa;
    ggml_tensor * logits = nullptr;  // [n_vocab, n_out]
    ggml_tensor * ids = nullptr;     // I32 [top_k, n_out]
    ggml_tensor * values = nullptr;  // [top_k, n_out]
    ggml_tensor * hidden = nullptr;  // [n_taps * n_embd, n_rows]
    std::vector<ggml_tensor *> body_outputs;  // ForwardGraph::outputs
    std::vector<StateSources> state_sources;  // per recurrent layer and sequence
    // by (sequence, row), built on first use
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<StateCommitGraph>> state_commits;
    uint64_t last_use = 0;

    CachedGraph() = default;
    CachedGraph(const CachedGraph &) = delete;
    CachedGraph & operator=(const CachedGraph &) = delete;
    ~CachedGraph();
    size_t bytes() const;
};

class GraphCache {
public:
    explicit GraphCache(size_t budget_bytes) : budget_(budget_bytes) {}

    // The graph for `key`, built by `build` on a miss. Least recently used
    // graphs are freed while the cache holds more than its budget.
    CachedGraph & get(const GraphKey & key, const std::function<std::unique_ptr<CachedGraph>()> & build);

    uint64_t builds() const { return builds_; }
    size_t size() const { return graphs_.size(); }
    void clear() { graphs_.clear(); }

private:
    void evict_over_budget(const CachedGraph * keep);

    size_t budget_;
    uint64_t builds_ = 0;
    uint64_t clock_ = 0;
    std::map<GraphKey, std::unique_ptr<CachedGraph>> graphs_;
};

}  // namespace ggspec
