#include "draft_head.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ggspec {

DraftHead::DraftHead(ggml_backend_dev_t dev, ggml_backend_t backend, HeadModel model, const DrafterOptions & opt)
    : dev_(dev), backend_(backend), opt_(opt), m_(std::move(model)) {
    set_n_seqs(opt.n_seqs, opt.trunk_kv);
}

void DraftHead::set_n_seqs(int64_t n, KvCache * trunk_kv) {
    runner_.reset();  // their graphs hold views of the old cache: freed first
    chained_.reset();
    kv_.reset();
    opt_.n_seqs = n;
    opt_.trunk_kv = trunk_kv;
    if (!m_.reads_trunk_kv) {
        kv_ = std::make_unique<KvCache>(on_one_device(dev_, m_.hp.n_layer), m_.hp, opt_.n_ctx, opt_.max_rows,
                                        opt_.kv_type, n);
    }
    KvCache & kv = kv_ ? *kv_ : *trunk_kv;
    auto body = [&](const BuildBody & build, int64_t width) {
        ModelBody b{m_.hp, m_.w, kv, nullptr, build, width};
        b.writes_kv = kv_ != nullptr;
        return b;
    };
    runner_ = std::make_unique<GraphRunner>(backend_, body(m_.build, m_.trunk_width), opt_.row_kernels,
                                            opt_.graph_budget_bytes);
    if (m_.build_chained) {
        chained_ = std::make_unique<GraphRunner>(backend_, body(m_.build_chained, m_.chained_width()),
                                                 opt_.row_kernels, opt_.graph_budget_bytes);
    }
}

void DraftHead::skip(int64_t from, int64_t to, int64_t seq) {
    check_seq(seq);
    if (!kv_) return;  // nothing held: the trunk's cache is what it reads
    if (from < 0 || from > seq_len(seq) || to < from || to - m_.first_token > kv_->n_ctx()) {
        throw std::invalid_argument("draft head skip from " + std::to_string(from) + " to " + std::to_string(to) +
                                    ": it holds " + std::to_string(seq_len(seq)) + " positions of " +
                                    std::to_string(kv_->n_ctx()));
    }
    const int64_t kv_from = std::max<int64_t>(from - m_.first_token, 0);
    const int64_t kv_to = std::max<int64_t>(to - m_.first_token, 0);
    kv_->rewind(kv_from, seq);
    kv_->skip(kv_to - kv_from, seq);
}

void DraftHead::check_seq(int64_t seq) const {
    if (seq < 0 || seq >= opt_.n_seqs) {
        throw std::invalid_argument("draft head sequence " + std::to_string(seq) + " is not one of the target's " +
                                    std::to_string(opt_.n_seqs));
    }
}

void DraftHead::forward(const int32_t * tokens, const float * hidden, int64_t n, int64_t start, int top_k,
                        const ForwardOutputs & out, int64_t seq, bool chained) {
    if (n <= 0) throw std::invalid_argument("a draft head forward needs at least one row");
    check_seq(seq);
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= m_.hp.n_vocab) {
            throw std::invalid_argument("draft head token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
        }
    }
    const int64_t width = chained ? m_.chained_width() : m_.trunk_width;
    if (!kv_) {
        if (top_k == 0 && !out.hidden) return;  // a catch-up: there is nothing to hold
        const int64_t next = opt_.trunk_kv->seq_len(seq), last = start + n - 1;
        if (chained ? last < next : last != next) {
            throw std::invalid_argument("a draft head over its target's cache drafts from the target's next position " +
                                        std::to_string(next) + ", not from a token at " + std::to_string(last));
        }
        run_rows(tokens + n - 1, hidden + (n - 1) * width, 1, top_k, out, seq, chained);
        return;
    }
    if (start < 0 || start > seq_len(seq)) {
        throw std::invalid_argument("draft head rows start at " + std::to_string(start) + ", but the head holds " +
                                    std::to_string(seq_len(seq)) + " positions (rows must continue them)");
    }
    if (start + n - m_.first_token > kv_->n_ctx()) {
        throw std::invalid_argument("draft head rows up to position " + std::to_string(start + n) +
                                    " exceed the context of " + std::to_string(kv_->n_ctx()));
    }
    const int64_t dropped = std::min(n, std::max<int64_t>(m_.first_token - start, 0));  // tokens with no row
    if (dropped == n && top_k > 0) {
        throw std::invalid_argument("the draft head has no row for token position " + std::to_string(start + n - 1) +
                                    " (its rows begin at " + std::to_string(m_.first_token) + ")");
    }
    const int64_t kv_start = start + dropped - m_.first_token;
    kv_->rewind(kv_start, seq);
    if (dropped == n) return;
    try {
        run_rows(tokens + dropped, hidden + dropped * width, n - dropped, top_k, out, seq, chained);
    } catch (...) {
        kv_->rewind(kv_start, seq);
        throw;
    }
}

void DraftHead::run_rows(const int32_t * tokens, const float * hidden, int64_t n, int top_k, const ForwardOutputs & out,
                         int64_t seq, bool chained) {
    GraphRunner & runner = chained && chained_ ? *chained_ : *runner_;
    top_k = (int) std::min<int64_t>(top_k, m_.head_rows());
    runner.run(
        n, opt_.max_rows, tokens, hidden,
        [&](GraphKey & key, const Chunk & c) {
            key.n_out = c.last && top_k > 0 ? 1 : 0;
            key.top_k = key.n_out > 0 ? top_k : 0;
            if (c.last && out.hidden) key.taps = {m_.chain_tap};
        },
        [&](CachedGraph & g, const GraphKey & key, const Chunk & c) {
            if (!c.last) return;
            hidden_rows_.resize((size_t) (c.n_rows * m_.chained_width()));
            ForwardOutputs rows = out;
            rows.hidden = out.hidden ? hidden_rows_.data() : nullptr;
            runner.read_outputs(g, key, 0, 0, rows);
            if (out.hidden) std::copy(hidden_rows_.end() - m_.chained_width(), hidden_rows_.end(), out.hidden);
        },
        seq);
    if (top_k > 0 && out.ids && !m_.head_to_token.empty()) {  // a reduced head's rows as target tokens
        for (int i = 0; i < top_k; ++i) out.ids[i] = (int32_t) m_.head_to_token[(size_t) out.ids[i]];
    }
}

}  // namespace ggspec
