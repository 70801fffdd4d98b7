// A per-token draft head (models/head_model.h: a NextN block of the target's
// GGUF, or an EAGLE-3 or Gemma 4 assistant GGUF): each row reads a token and the
// trunk's row(s) before it, or a chained draft's own output row, and predicts the
// token after. It keeps its own KV cache (the Gemma 4 assistant attends over the
// trunk's instead) and borrows what it lacks (embeddings, LM head, final norm)
// from the trunk's bound weights, never copying them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "forward_runner.h"
#include "kv_cache.h"
#include "models/head_model.h"

namespace ggspec {

struct DrafterOptions {
    int64_t n_ctx;
    int64_t max_rows;      // the most rows one graph takes (longer catch-ups run in chunks)
    int64_t n_seqs;        // the target's sequences: the drafter keeps a KV region for each
    ggml_type kv_type;
    RowKernels row_kernels;
    size_t graph_budget_bytes;
    KvCache * trunk_kv;    // the target's cache, which a head without KV of its own attends over
};

class DraftHead {
public:
    DraftHead(ggml_backend_dev_t dev, ggml_backend_t backend, HeadModel model, const DrafterOptions & opt);

    // Rows of sequence `seq` for the tokens at positions start.., each a token and the
    // row before it: the trunk's ([n, trunk_width()]), or for a chained draft the
    // head's own output row ([n, chained_width()]). Positions are the tokens'; rows
    // before first_token() have no head row and are dropped. The head first forgets
    // that sequence's rows from `start` on (they held chained drafts). For the last
    // row it writes the top_k ids (target tokens) and logits (top_k > 0; at most
    // head_rows()) and its output row (out.hidden, chained_width() floats). A head
    // over the trunk's cache holds nothing to catch up: a catch-up (no outputs asked)
    // does nothing, a draft runs the last row alone, at the trunk's next position,
    // which a first row's token must be at (a chained one's at or past it).
    void forward(const int32_t * tokens, const float * hidden, int64_t n, int64_t start, int top_k,
                 const ForwardOutputs & out, int64_t seq = 0, bool chained = false);
    // Forgets sequence `seq`'s rows from token position `from` on and goes on at `to`:
    // positions between stay empty, masked from attention (rows the head was not
    // worth catching up on while drafting was parked).
    void skip(int64_t from, int64_t to, int64_t seq = 0);
    void reset() {
        if (kv_) kv_->clear();
    }
    void reset_seq(int64_t seq) {
        if (kv_) kv_->clear_seq(seq);
    }
    // One KV region per sequence of the target (Target::set_n_seqs), whose cache is now
    // trunk_kv; empties every one.
    void set_n_seqs(int64_t n, KvCache * trunk_kv);

    const Hparams & hparams() const { return m_.hp; }
    const HeadModel & model() const { return m_; }
    int64_t trunk_width() const { return m_.trunk_width; }
    int64_t chained_width() const { return m_.chained_width(); }
    int64_t head_rows() const { return m_.head_rows(); }
    // The token positions sequence `seq` holds rows for, from 0 (those before first_token have none).
    // A head over the trunk's cache reads every position the trunk holds.
    int64_t seq_len(int64_t seq = 0) const {
        return kv_ ? kv_->seq_len(seq) + m_.first_token : opt_.trunk_kv->seq_len(seq);
    }
    uint64_t graph_calls() const { return runner_->computes() + (chained_ ? chained_->computes() : 0); }
    uint64_t graph_builds() const { return runner_->builds() + (chained_ ? chained_->builds() : 0); }

private:
    void check_seq(int64_t seq) const;
    // The rows through the runner reading trunk rows or chained ones; outputs of the last.
    void run_rows(const int32_t * tokens, const float * hidden, int64_t n, int top_k, const ForwardOutputs & out,
                  int64_t seq, bool chained);

    ggml_backend_dev_t dev_;
    ggml_backend_t backend_;
    DrafterOptions opt_;
    HeadModel m_;
    std::unique_ptr<KvCache> kv_;           // null: the head attends over opt_.trunk_kv
    std::unique_ptr<GraphRunner> runner_;   // rows reading trunk rows
    std::unique_ptr<GraphRunner> chained_;  // rows reading the head's own output; null: runner_ builds both
    std::vector<float> hidden_rows_;
};

}  // namespace ggspec
