// A per-token draft head stored in the target's own GGUF (MTP / NextN): one
// block after the trunk's that reads a token and the trunk's final hidden row
// before it, and predicts the token after. It keeps its own KV cache and
// borrows what it lacks (embeddings, LM head, final norm) from the trunk's
// bound weights, never copying them.
#pragma once
#include <cstdint>
#include <memory>

#include "forward_runner.h"
#include "kv_cache.h"
#include "model_file.h"

namespace ggspec {

struct DrafterOptions {
    int64_t n_ctx;
    int64_t max_rows;      // the most rows one graph takes (longer catch-ups run in chunks)
    int64_t n_seqs;        // the target's sequences: the drafter keeps a KV region for each
    ggml_type kv_type;
    RowKernels row_kernels;
    size_t graph_budget_bytes;
};

class DraftHead {
public:
    DraftHead(ggml_backend_dev_t dev, ggml_backend_t backend, const ModelFile & file, const Architecture & arch,
              const Hparams & trunk, const ModelWeights & trunk_w, const DrafterOptions & opt);

    // Rows of sequence `seq` at positions start.., each a token and the hidden
    // row before it ([n, n_embd]). The head first forgets that sequence's KV
    // from `start` on (positions there held chained drafts). For the last row
    // it writes the top_k ids and logits (top_k > 0) and its output hidden row
    // (out.hidden, n_embd floats).
    void forward(const int32_t * tokens, const float * hidden, int64_t n, int64_t start, int top_k,
                 const ForwardOutputs & out, int64_t seq = 0);
    // Forgets sequence `seq`'s head positions from `from` on and goes on at `to`:
    // positions between stay empty, masked from attention (rows the head was not
    // worth catching up on while drafting was parked).
    void skip(int64_t from, int64_t to, int64_t seq = 0);
    void reset() { kv_->clear(); }
    void reset_seq(int64_t seq) { kv_->clear_seq(seq); }
    // One KV region per sequence of the target (Target::set_n_seqs); empties every one.
    void set_n_seqs(int64_t n);

    const Hparams & hparams() const { return hp_; }
    int64_t seq_len(int64_t seq = 0) const { return kv_->seq_len(seq); }
    uint64_t graph_calls() const { return runner_->computes(); }
    uint64_t graph_builds() const { return runner_->builds(); }

private:
    void check_seq(int64_t seq) const;

    ggml_backend_dev_t dev_;
    ggml_backend_t backend_;
    const Architecture & arch_;
    DrafterOptions opt_;
    Hparams hp_;
    ModelWeights w_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<GraphRunner> runner_;
    std::vector<float> hidden_rows_;
};

}  // namespace ggspec
