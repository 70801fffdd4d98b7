// Runs the persistent forward graphs of one model body (a trunk, or a draft
// head) over its caches: builds each graph shape once (graph_cache.h), fills a
// step's positions, masks, cache slots and inputs, computes, and copies the
// requested outputs out. Policy (chunking, rollback) stays with the caller.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "graph_cache.h"
#include "kv_cache.h"
#include "models/forward_graph.h"
#include "recurrent_state.h"
#include "split_graph.h"

namespace ggspec {

// Where read_outputs writes; null fields are not requested.
struct ForwardOutputs {
    float * logits = nullptr;   // [n_out, n_vocab], when top_k == 0
    int32_t * ids = nullptr;    // [n_out, top_k], best first, when top_k > 0
    float * values = nullptr;   // [n_out, top_k]
    float * hidden = nullptr;   // [n_rows, taps.size() * n_embd]
};

struct ModelBody {
    const Hparams & hp;
    const ModelWeights & w;
    KvCache & kv;
    const RecurrentState * rs;  // null: no recurrent layers
    BuildBody build;
    int64_t hidden_width = 0;   // a drafter's: each row also reads a hidden row this wide (0: none)
    bool causal = true;         // false: every row also sees the forward's later rows (a block drafter)
    // A reference path: every node dispatched as a graph of its own, so no
    // backend fuses ops or captures the graph (GGSPEC_DFLASH_FUSED=0).
    bool per_op = false;
    // false: the rows only read kv as it is, all at position kv.seq_len(seq), and
    // write nothing (a drafter over its target's cache).
    bool writes_kv = true;
};

// One sequence's rows in a forward: n_rows at positions kv.seq_len(seq)..
struct Segment {
    int64_t seq;
    int64_t n_rows;
};

// One graph of a call that run() splits: rows [done, done + n_rows) of it.
struct Chunk {
    int64_t done;
    int64_t n_rows;
    bool last;
};

// ggml's top-k is unordered: sorts each of `rows` rows of k (ids, values) in place,
// best first, ties to the lower id.
void order_top_k(int32_t * ids, float * values, int64_t rows, int k);

class GraphRunner {
public:
    // sched_backends: a split target's devices (placement.h), for ggml's
    // scheduler; empty: every graph runs on `backend`. worker_kernels: the
    // path its products take on each worker.
    GraphRunner(ggml_backend_t backend, const ModelBody & body, RowKernels row_kernels, size_t graph_budget_bytes,
                std::vector<ggml_backend_t> sched_backends = {}, WorkerKernels worker_kernels = {});

    // The one loop every caller runs: n rows at positions kv.seq_len(seq).. as graphs of at
    // most max_rows. Each chunk's key gets its row count and KV lengths here and the
    // rest from `shape` (called before the chunk is prepared); `read` then takes the
    // chunk's outputs. tokens: [n] (null: the body reads none); hidden_in: [n,
    // hidden_width] when the body takes hidden rows.
    using ShapeChunk = std::function<void(GraphKey & key, const Chunk & chunk)>;
    using ReadChunk = std::function<void(CachedGraph & g, const GraphKey & key, const Chunk & chunk)>;
    void run(int64_t n, int64_t max_rows, const int32_t * tokens, const float * hidden_in, const ShapeChunk & shape,
             const ReadChunk & read, int64_t seq = 0);

    // The graph for `key` with its inputs set for the segments' rows, in order
    // (key.n_rows in all), each sequence's at its positions kv.seq_len(seq)..,
    // which it advances past them. hidden_in: [n_rows, hidden_width] when the
    // body takes hidden rows. out_rows: the key.n_out rows the LM head reads,
    // when fewer than all (null: the last).
    CachedGraph & prepare(const GraphKey & key, const std::vector<Segment> & segments, const int32_t * tokens,
                          const float * hidden_in, const int32_t * out_rows = nullptr);
    // Sets key's KV lengths: what the segments' sequences attend over.
    void size_kv(GraphKey & key, const std::vector<Segment> & segments) const;
    void compute(CachedGraph & g);
    // Hidden rows land at row0; LM-head rows at out_row0.
    void read_outputs(const CachedGraph & g, const GraphKey & key, int64_t row0, int64_t out_row0,
                      const ForwardOutputs & out) const;

    uint64_t builds() const { return graphs_.builds(); }
    size_t cached() const { return graphs_.size(); }
    uint64_t computes() const { return computes_; }

private:
    std::unique_ptr<CachedGraph> build(const GraphKey & key) const;
    // The hidden taps (layer inputs; -1: the trunk's output), concatenated in
    // order. On a split target each run of taps one worker made is
    // concatenated there first (`pins`), so that a worker's taps cross the
    // network as one tensor: a round trip a worker, not a tap.
    ggml_tensor * concat_taps(const ForwardGraph & g, ggml_tensor * trunk, const std::vector<int> & taps,
                              std::vector<NodePin> & pins) const;
    void fill_attention_inputs(const AttentionInputs & in, const std::vector<Segment> & segments, int64_t n);
    std::string device_name() const { return ggml_backend_name(backend_); }

    ggml_backend_t backend_;
    std::vector<ggml_backend_t> sched_backends_;
    WorkerKernels worker_kernels_;
    ModelBody body_;
    ggml_context_ptr single_ctx_;  // per_op: the one-node graph each node runs in
    ggml_cgraph * single_ = nullptr;
    RowKernels row_kernels_;
    mutable RunDealer dealer_;  // its graphs' products share their last weight rows through it (while computing)
    GraphCache graphs_;
    uint64_t computes_ = 0;

    // host staging, reused across steps
    std::vector<int32_t> positions_;
    std::vector<float> mask_;
    std::vector<int64_t> idx_;
    std::vector<int32_t> regions_;
};

}  // namespace ggspec
