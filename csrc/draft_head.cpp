#include "draft_head.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ggspec {

DraftHead::DraftHead(ggml_backend_dev_t dev, ggml_backend_t backend, const ModelFile & file, const Architecture & arch,
                     const Hparams & trunk, const ModelWeights & trunk_w, const DrafterOptions & opt)
    : dev_(dev), backend_(backend), arch_(arch), opt_(opt) {
    arch.load_nextn(file, trunk, trunk_w, hp_, w_);
    set_n_seqs(opt.n_seqs);
}

void DraftHead::set_n_seqs(int64_t n) {
    runner_.reset();  // its graphs hold views of the old cache: freed first
    kv_.reset();
    opt_.n_seqs = n;
    kv_ = std::make_unique<KvCache>(dev_, hp_, opt_.n_ctx, opt_.max_rows, opt_.kv_type, n);
    runner_ = std::make_unique<GraphRunner>(
        backend_, ModelBody{hp_, w_, *kv_, nullptr, arch_.build_nextn, /*hidden_width=*/hp_.n_embd}, opt_.row_kernels,
        opt_.graph_budget_bytes);
}

void DraftHead::skip(int64_t from, int64_t to, int64_t seq) {
    check_seq(seq);
    if (from < 0 || from > kv_->seq_len(seq) || to < from || to > kv_->n_ctx()) {
        throw std::invalid_argument("draft head skip from " + std::to_string(from) + " to " + std::to_string(to) +
                                    ": it holds " + std::to_string(kv_->seq_len(seq)) + " positions of " +
                                    std::to_string(kv_->n_ctx()));
    }
    kv_->rewind(from, seq);
    kv_->skip(to - from, seq);
}

void DraftHead::check_seq(int64_t seq) const {
    if (seq < 0 || seq >= kv_->n_seqs()) {
        throw std::invalid_argument("draft head sequence " + std::to_string(seq) + " is not one of the target's " +
                                    std::to_string(kv_->n_seqs()));
    }
}

void DraftHead::forward(const int32_t * tokens, const float * hidden, int64_t n, int64_t start, int top_k,
                        const ForwardOutputs & out, int64_t seq) {
    if (n <= 0) throw std::invalid_argument("a draft head forward needs at least one row");
    check_seq(seq);
    if (start < 0 || start > kv_->seq_len(seq)) {
        throw std::invalid_argument("draft head rows start at " + std::to_string(start) + ", but the head holds " +
                                    std::to_string(kv_->seq_len(seq)) + " positions (rows must continue them)");
    }
    if (start + n > kv_->n_ctx()) {
        throw std::invalid_argument("draft head rows up to position " + std::to_string(start + n) +
                                    " exceed the context of " + std::to_string(kv_->n_ctx()));
    }
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) {
            throw std::invalid_argument("draft head token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
        }
    }
    kv_->rewind(start, seq);
    try {
        runner_->run(
            n, opt_.max_rows, tokens, hidden,
            [&](GraphKey & key, const Chunk & c) {
                key.n_out = c.last && top_k > 0 ? 1 : 0;
                key.top_k = key.n_out > 0 ? top_k : 0;
                if (c.last && out.hidden) key.taps = {-1};
            },
            [&](CachedGraph & g, const GraphKey & key, const Chunk & c) {
                if (!c.last) return;
                hidden_rows_.resize((size_t) (c.n_rows * hp_.n_embd));
                ForwardOutputs rows = out;
                rows.hidden = out.hidden ? hidden_rows_.data() : nullptr;
                runner_->read_outputs(g, key, 0, 0, rows);
                if (out.hidden) std::copy(hidden_rows_.end() - hp_.n_embd, hidden_rows_.end(), out.hidden);
            },
            seq);
    } catch (...) {
        kv_->rewind(start, seq);
        throw;
    }
}

}  // namespace ggspec
