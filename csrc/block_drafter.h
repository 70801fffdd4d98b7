// A block drafter (DFlash) attached to a target from its own GGUF: it reads
// the target's residual rows and drafts a whole block in one forward. It keeps
// its own KV cache of injected context and borrows the target's token
// embedding and LM head (bound weights, never copied) unless it ships its own.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "draft_head.h"
#include "ggml-cpp.h"
#include "forward_runner.h"
#include "kv_cache.h"
#include "model_file.h"
#include "models/dflash.h"

namespace ggspec {

// What pass C returns for the block's rows that draft (DFlash: its MASK rows; an
// anchor-first DSpark block: every row).
struct BlockDraft {
    int64_t rows = 0, k = 0;
    std::vector<int32_t> ids;   // [rows, k]: DFlash, DSpark: top-k, best first; DFlash2: the candidates
    std::vector<float> values;  // [rows, k]: their logits (DSpark's Markov-biased); DFlash2: unary (+ the anchor's
                                // transition on row 0)
    std::vector<float> pairs;   // DFlash2: [rows - 1, k predecessors, k candidates] transitions; else empty
    std::vector<float> confidence;  // DSpark with a confidence head: [rows]; else empty
};

class BlockDrafter {
public:
    // Throws ModelFormatError naming what does not fit the target: the
    // architecture, the width, a target layer out of range, the vocabulary,
    // the mask token.
    // use_conv / use_selector switch DFlash2's extensions off, for attribution;
    // fused false runs the per-op reference path (GraphRunner's per_op).
    BlockDrafter(const std::string & path, ggml_backend_dev_t dev, ggml_backend_t backend, const Hparams & target,
                 const ModelWeights & target_w, const DrafterOptions & opt, bool use_conv, bool use_selector,
                 bool fused);

    // Passes A+B over sequence seq's committed rows at positions start..:
    // features [n, taps * n_embd], the target's inputs of the target_layers.
    // Positions from `start` on are forgotten first; any before it that were
    // never injected stay empty.
    void inject(const float * features, int64_t n, int64_t start, int64_t seq = 0);
    // Pass C: [anchor, MASK x (n_block - 1)] at positions pos0.. of sequence
    // seq; the top_k ids and logits of each row that drafts, or a DFlash2
    // drafter's lattice (k = its selector_top_k). The block's own K/V are dropped afterwards.
    BlockDraft draft(int32_t anchor, int64_t pos0, int64_t n_block, int top_k, int64_t seq = 0);

    const std::string & path() const { return file_->path(); }
    const DFlashParams & params() const { return d_; }
    int64_t head_rows() const { return w_.output->ne[1]; }  // its LM head's (a reduced vocabulary's) rows
    int64_t seq_len(int64_t seq = 0) const { return kv_->seq_len(seq); }
    uint64_t graph_calls() const { return inject_->computes() + block_->computes(); }
    double inject_seconds() const { return inject_seconds_; }
    double draft_seconds() const { return draft_seconds_; }
    uint64_t readback_bytes() const { return readback_bytes_; }  // what pass C copied to the host
    void reset() { kv_->clear(); }
    void reset_seq(int64_t seq) { kv_->clear_seq(seq); }
    // One KV region per sequence of the target (Target::set_n_seqs); empties every one.
    void set_n_seqs(int64_t n);

private:
    // Pass C's outputs: the body's own (DFlash2's lattice, DSpark's rows), or DFlash's top-k per row.
    void read_body_outputs(const CachedGraph & g, BlockDraft & out);
    void read_top_k(const CachedGraph & g, const GraphKey & key, int64_t n_block, int top_k, BlockDraft & out);
    void map_to_target_tokens(std::vector<int32_t> & ids) const;

    void bind_to(const Hparams & target, const ModelWeights & target_w);
    void seek(int64_t position, int64_t seq);  // the KV ends at `position`: rewound, or past empty positions
    void check_seq(int64_t seq) const;
    // With d2t: the rows of the head's tokens of DFlash2's codebooks or DSpark's
    // markov_w1 (the tables the graph indexes by a head row), on the device.
    void reduce_tables(ggml_backend_dev_t dev);

    std::unique_ptr<ModelFile> file_;
    Hparams hp_;
    ModelWeights w_;
    DFlashParams d_;
    DFlashWeights dw_;
    ggml_backend_dev_t dev_;
    ggml_backend_t backend_;
    DrafterOptions opt_;
    bool fused_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<GraphRunner> inject_, block_;
    std::vector<int32_t> tokens_;
    std::vector<int64_t> head_to_token_;  // d2t: a reduced head's rows as target tokens
    ggml_context_ptr table_ctx_;
    ggml_backend_buffer_ptr table_buf_;
    double inject_seconds_ = 0.0, draft_seconds_ = 0.0;
    uint64_t readback_bytes_ = 0;
};

}  // namespace ggspec
