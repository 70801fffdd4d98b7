// The target adapter: a GGUF model on one ggml device, with a KV cache, run
// as batched forwards whose row i is bit-identical to the one-row step at
// that position. This is what speculative decoding verifies with.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "block_drafter.h"
#include "draft_head.h"
#include "forward_runner.h"
#include "hparams.h"
#include "kv_cache.h"
#include "model_file.h"
#include "placement.h"
#include "recurrent_state.h"
#include "models/forward_graph.h"

struct ggml_threadpool;

namespace ggspec {

struct ThreadpoolDeleter {
    void operator()(ggml_threadpool * p) const;
};

struct TargetOptions {
    int64_t n_ctx = 4096;
    int n_threads = 0;                 // 0 = every hardware thread
    std::string device = "auto";       // "auto", "cpu", or a ggml device name such as "CUDA0"
    std::string kv_type = "f16";
    int64_t prefill_chunk = 512;
    int64_t max_verify_rows = 65;      // sizes the sliding-window ring
    size_t graph_budget_bytes = 0;  // 0: scaled to the weights (auto_graph_budget)
    // ggspec's multi-row CPU kernels where they give ggml's bits: "auto", "vnni", "avx2" or "off"
    std::string row_kernels = "auto";
    // On the CPU, weights read through the file's memory map, or copied into
    // huge pages (HostWeights::copied in model_file.h).
    bool mmap = true;
    // How a recurrent trunk rolls back a partly accepted verify:
    //   "snapshots":      the verify keeps the state after every row; the kept
    //                     row's is copied into the live state on the device;
    //   "snapshots-host": the same snapshots, copied through the host;
    //   "reforward":      snapshot the state before the verify, restore it and
    //                     re-forward the kept rows.
    std::string recurrent_rollback = "snapshots";
    // The memory a verify's per-row recurrent snapshots may take: it bounds how
    // many rows a verify on a recurrent trunk can have (max_verify_rows()).
    size_t recurrent_snapshot_bytes = size_t(512) << 20;
    // ggml RPC workers ("host:port") that run runs of the trunk's layers
    // (placement.h); empty: every layer on `device`.
    std::vector<std::string> rpc;
    std::vector<float> tensor_split;  // one share per worker, then the local device's; empty: by free memory
    double rpc_timeout_s = 0;         // a worker silent this long ends the process; 0: wait forever
};

struct ForwardRequest {
    int64_t seq = 0;  // which sequence of the cache the tokens continue
    const int32_t * tokens = nullptr;
    int64_t n_tokens = 0;
    bool all_rows = false;  // LM head on every row, or only on the last
    int top_k = 0;
    std::vector<int> taps;  // -1 = after the final norm
};

// One sequence's part of a batched forward: rows appended to it, each through
// the LM head (a verify) or only its last (a decode step, a prompt's end), or
// none (a prompt chunk before its end).
struct BatchItem {
    int64_t seq = 0;
    const int32_t * tokens = nullptr;
    int64_t n_tokens = 0;
    enum class Head { last, all, none } head = Head::last;
};

class Target {
public:
    Target(const std::string & path, const TargetOptions & opt);
    Target(const Target &) = delete;
    Target & operator=(const Target &) = delete;

    // Appends the tokens at positions [seq_len, seq_len + n) and writes the
    // requested outputs. Prefill runs in chunks of opt.prefill_chunk rows.
    void forward(const ForwardRequest & req, const ForwardOutputs & out);
    // Throws (naming the problem) for a request forward() would refuse.
    void check_request(const ForwardRequest & req) const;
    // Several sequences' rows as ONE forward, in the items' order: each
    // sequence's rows get the bits that sequence alone would get. LM-head rows
    // land in out in item order; hidden rows, every row in order. Each item
    // has at most max_batch_rows() rows; a sequence appears once.
    void forward_batch(const std::vector<BatchItem> & items, int top_k, const std::vector<int> & taps,
                       const ForwardOutputs & out);
    // Throws (naming the problem) for a batch forward_batch() would refuse.
    void check_batch(const std::vector<BatchItem> & items, int top_k, const std::vector<int> & taps) const;
    int64_t max_batch_rows() const { return std::max(opt_.prefill_chunk, opt_.max_verify_rows); }
    // The sequences the cache holds, each n_ctx() positions, with a recurrent
    // state each on a recurrent trunk, and the drafters' regions. Growing or
    // shrinking empties every sequence; if the new size cannot be allocated,
    // the old one is rebuilt (empty) and the error rethrown.
    void set_n_seqs(int64_t n);
    int64_t n_seqs() const { return kv_->n_seqs(); }

    // Keeps the first `length` positions of sequence seq. On a recurrent trunk
    // its state must reach `length`: a row of its last verify, or where it
    // already is; otherwise throws std::invalid_argument and changes nothing.
    // Any forward settles every sequence's last verify at the sequence's
    // length first (the graph it ran in may be replayed or freed), so roll a
    // sequence back before forwarding the others.
    void rewind(int64_t length, int64_t seq = 0);
    void reset();                 // every sequence, and the drafters
    void reset_seq(int64_t seq);  // one sequence of the trunk's cache and state, and of the drafters'
    // Puts the CPU thread pool's workers to sleep now instead of letting them poll for the next
    // graph; the next compute wakes them. Two models taking turns on the same cores (a draft model
    // and its target) pause the idle one's pool, whose polling would take a core from the other.
    void pause_threads();
    // The re-forward rollback path's host copies of a sequence's recurrent
    // state; no-ops on every other path and on attention-only trunks.
    void snapshot_recurrent(int64_t seq = 0);
    void restore_recurrent(int64_t seq = 0);
    // For tests: each recurrent layer's conv and delta-rule state after
    // seq_len(seq) positions (settling a pending verify first, as the next
    // forward would).
    std::vector<std::vector<float>> read_recurrent_state(int64_t seq = 0);
    // A prefix cache's copies (engine/prefix_cache.py owns them): consecutive
    // positions from pos of sequence seq's KV (KvCache::read_positions), which a
    // sliding-window ring must still hold, and with `state` on a recurrent
    // trunk the state after them, which must be the sequence's end
    // (seq_state_bytes()). append_prefix adds such a copy at the sequence's
    // end, as if forwarded; a recurrent trunk's sequence runs again once a
    // copy with a state brought its state to its length.
    void read_prefix(int64_t seq, int64_t pos, const std::vector<KvCache::HostCopy> & kv, uint8_t * state = nullptr);
    void append_prefix(int64_t seq, const std::vector<KvCache::HostCopy> & kv, const uint8_t * state = nullptr);
    size_t kv_position_bytes() const { return kv_->position_bytes(); }
    size_t seq_state_bytes() const;
    // Switches the rollback path (TargetOptions::recurrent_rollback) between
    // generations: what a verify left pending is settled first.
    void set_recurrent_rollback(const std::string & name);
    // The most rows a verify may have and still roll back: the option, and on a
    // recurrent trunk what its snapshot budget holds (at least 2). The budget is
    // per sequence: a batch keeps each verifying sequence's rows.
    int64_t max_verify_rows() const { return max_verify_rows_; }
    // False only on the re-forward path: a rejected draft then costs a re-forward.
    bool verify_persists_accepted_kv() const { return !rs_ || rollback_ != Rollback::reforward; }
    void ensure_capacity(int64_t n) const;

    const Hparams & hparams() const { return hp_; }
    int64_t seq_len(int64_t seq = 0) const { return kv_->seq_len(seq); }
    int64_t n_ctx() const { return kv_->n_ctx(); }
    uint64_t graph_builds() const { return runner_->builds(); }
    size_t graphs_cached() const { return runner_->cached(); }
    DraftHead * draft_head() { return head_.get(); }  // null: the file carries none and none was attached
    // Attaches an EAGLE-3 drafter GGUF as the draft head, in place of the file's own.
    void attach_draft_head(const std::string & path);
    // Attaches a block drafter (DFlash) from its own GGUF, replacing any before.
    void attach_drafter(const std::string & path, bool use_conv = true, bool use_selector = true, bool fused = true);
    BlockDrafter * block_drafter() { return drafter_.get(); }  // null: none attached
    std::string device_name() const;
    size_t weight_bytes() const { return file_->weight_bytes(); }
    size_t kv_bytes() const { return kv_->bytes(); }
    size_t recurrent_state_bytes() const { return rs_ ? rs_->bytes() : 0; }
    // What a verify keeps per row for its rollback (0: an attention-only trunk).
    size_t state_row_bytes() const { return rs_ ? RecurrentState::row_bytes(hp_) : 0; }
    // Recurrent-state bytes moved through ggml_backend_tensor_get/_set, and
    // rollbacks that took a kept row's state, since the target was made; the
    // bytes moved for one sequence since the cache was sized (set_n_seqs).
    uint64_t state_transfer_bytes() const { return state_transfer_bytes_; }
    uint64_t state_transfer_bytes(int64_t seq) const;
    uint64_t state_commits() const { return state_commits_; }
    int n_threads() const { return n_threads_; }
    // Whether multi-row LM-head products run on ggspec's own kernel (kernels/row_matmul.h).
    bool lm_head_row_kernel() const;
    // Bytes of weights this target's graphs so far have packed for their kernels
    // (kernels/lane_packs.h: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K on vnni-block).
    size_t packed_weight_bytes() const { return w_.lane_packs->bytes(); }
    // The kernel path this target chose ("vnni", "avx2" or "off"); each weight
    // type runs on it where it has a kernel whose probe matched ggml's bits.
    const char * row_kernels() const { return row_kernels_name(row_kernels_); }
    // Where the trunk's layers run ("layers 0-5 on RPC0 (host:port), 6-11 on CPU").
    std::string placement() const { return placement_->describe(); }

    enum class Rollback { snapshots, snapshots_host, reforward };

private:
    // A finished forward whose per-row states are still readable.
    struct PendingState {
        CachedGraph * graph = nullptr;
        int64_t start = 0;   // sequence length before it
        int64_t n_rows = 0;
        bool live_is_last = false;  // the graph already stored its last row's state
    };

    // A sequence's recurrent-state bookkeeping.
    struct SeqState {
        PendingState pending;
        int64_t len = 0;                // the sequence length its live state describes
        std::vector<uint8_t> snapshot;  // the re-forward path's host copy
        int64_t snapshot_len = -1;
        uint64_t transfer_bytes = 0;

        void empty() { *this = SeqState{{}, 0, {}, -1, transfer_bytes}; }  // the bytes moved stay counted
    };

    // Makes sequence seq's live recurrent state the state after `length`
    // positions, or throws std::invalid_argument and changes nothing.
    void settle_state(int64_t length, int64_t seq);
    // Every sequence's pending verify, at the sequence's length: before a forward.
    void settle_pending();
    // Whether a forward of n rows keeps the state after each of them: a verify
    // that may roll back without a re-forward.
    bool keeps_rows(int64_t n, bool all_rows) const;
    // How `rows` of sequence seq run through the recurrent layers.
    RecurrentSegment recurrent_segment(int64_t seq, int64_t rows, bool keep) const;
    // After a forward in graph g: the sequence's live state and its pending rows.
    void record_state(const RecurrentSegment & seg, int64_t start, bool keep, CachedGraph & g);
    DrafterOptions drafter_options() const;
    void commit_row(int64_t row, int64_t seq);
    void move_state_bytes(size_t bytes, int64_t seq);
    void check_seq(int64_t seq) const;
    void check_tokens(const int32_t * tokens, int64_t n) const;
    void check_taps_top_k(const std::vector<int> & taps, int top_k) const;
    void make_cache(int64_t n_seqs);

    // Declared in the order they must be built; destroyed in reverse: the
    // graphs and the cache before the backend, the weights' file last.
    TargetOptions opt_;
    std::unique_ptr<ModelFile> file_;
    const Architecture * arch_ = nullptr;
    Hparams hp_;
    ModelWeights w_;
    ggml_backend_dev_t dev_ = nullptr;
    std::unique_ptr<ggml_threadpool, ThreadpoolDeleter> threadpool_;
    ggml_backend_ptr backend_;
    int n_threads_ = 1;
    RowKernels row_kernels_ = RowKernels::off;
    std::unique_ptr<Placement> placement_;  // before what it places: freed after it
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<RecurrentState> rs_;  // null: an attention-only trunk
    Rollback rollback_ = Rollback::snapshots;
    std::unique_ptr<GraphRunner> runner_;
    std::unique_ptr<DraftHead> head_;
    std::unique_ptr<BlockDrafter> drafter_;
    std::vector<SeqState> seq_states_;  // per sequence (recurrent trunks)
    int64_t max_verify_rows_ = 0;
    uint64_t state_transfer_bytes_ = 0;
    uint64_t state_commits_ = 0;
};

// ggml's quantization of a [rows, n_per_row] f32 matrix, for tests that write
// K-quant GGUFs. Returns rows * row_size bytes.
std::vector<uint8_t> quantize_rows(const std::string & type_name, const float * data, int64_t rows, int64_t n_per_row);

}  // namespace ggspec
