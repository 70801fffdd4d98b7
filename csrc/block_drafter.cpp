#include "block_drafter.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "buffers.h"
#include "errors.h"
#include "models/drafter_file.h"

namespace ggspec {

BlockDrafter::BlockDrafter(const std::string & path, ggml_backend_dev_t dev, ggml_backend_t backend,
                           const Hparams & target, const ModelWeights & target_w, const DrafterOptions & opt,
                           bool use_conv, bool use_selector, bool fused)
    : dev_(dev), backend_(backend), opt_(opt), fused_(fused) {
    file_ = std::make_unique<ModelFile>(path);
    const std::string arch = file_->has_key("general.architecture") ? file_->get_str("general.architecture") : "";
    if (arch != "dflash") {
        throw ModelFormatError("'" + path + "' is not a DFlash drafter (general.architecture '" + arch + "')");
    }
    load_dflash(*file_, hp_, w_, d_, dw_);
    file_->check_all_used("the DFlash drafter");
    d_.use_conv = use_conv;
    d_.use_selector = use_selector;
    bind_to(target, target_w);
    file_->bind(dev);
    if (dw_.d2t && (d_.dflash2() || d_.dspark)) reduce_tables(dev);
    set_n_seqs(opt.n_seqs);
}

void BlockDrafter::set_n_seqs(int64_t n) {
    inject_.reset();  // their graphs hold views of the old cache: freed first
    block_.reset();
    kv_.reset();
    opt_.n_seqs = n;
    kv_ = std::make_unique<KvCache>(on_one_device(dev_, hp_.n_layer), hp_, opt_.n_ctx, opt_.max_rows, opt_.kv_type, n);
    inject_ = std::make_unique<GraphRunner>(
        backend_,
        ModelBody{hp_, w_, *kv_, nullptr, [this](ForwardGraph & g) { return build_dflash_inject(g, dw_); },
                  /*hidden_width=*/(int64_t) d_.target_layers.size() * hp_.n_embd, /*causal=*/true,
                  /*per_op=*/!fused_},
        opt_.row_kernels, opt_.graph_budget_bytes);
    block_ = std::make_unique<GraphRunner>(
        backend_,
        ModelBody{hp_, w_, *kv_, nullptr, [this](ForwardGraph & g) { return build_dflash_block(g, d_, dw_); },
                  /*hidden_width=*/0, /*causal=*/d_.causal, /*per_op=*/!fused_},
        opt_.row_kernels, opt_.graph_budget_bytes);
}

void BlockDrafter::check_seq(int64_t seq) const {
    if (seq < 0 || seq >= kv_->n_seqs()) {
        throw std::invalid_argument("drafter sequence " + std::to_string(seq) + " is not one of the target's " +
                                    std::to_string(kv_->n_seqs()));
    }
}

void BlockDrafter::bind_to(const Hparams & target, const ModelWeights & target_w) {
    const std::string & path = file_->path();
    if (hp_.n_embd != target.n_embd) {
        throw ModelFormatError("drafter '" + path + "' is " + std::to_string(hp_.n_embd) +
                               " wide, but its target's residual is " + std::to_string(target.n_embd));
    }
    for (int64_t layer : d_.target_layers) {
        if (layer < 0 || layer >= target.n_layer) {
            throw ModelFormatError("drafter '" + path + "' taps target layer " + std::to_string(layer) +
                                   " (dflash.target_layers), but the target has layers 0.." +
                                   std::to_string(target.n_layer - 1));
        }
    }
    require_target_vocabulary(*file_, hp_.n_vocab, target.n_vocab, "drafter");
    if (dw_.predecessor && dw_.predecessor->ne[1] != target.n_vocab) {
        throw ModelFormatError("drafter '" + path + "' has selector codebooks over " +
                               std::to_string(dw_.predecessor->ne[1]) + " tokens, its target " +
                               std::to_string(target.n_vocab));
    }
    if (w_.output && !dw_.d2t && w_.output->ne[1] != target.n_vocab) {
        throw ModelFormatError("drafter '" + path + "' has an LM head over " + std::to_string(w_.output->ne[1]) +
                               " tokens, its target " + std::to_string(target.n_vocab));
    }
    if (d_.mask_token < 0 || d_.mask_token >= target.n_vocab) {
        throw ModelFormatError("drafter '" + path + "' names mask token " + std::to_string(d_.mask_token) +
                               ", outside the vocabulary of " + std::to_string(target.n_vocab));
    }
    if (dw_.d2t) head_to_token_ = read_token_map(*file_, dw_.d2t, target.n_vocab, "drafter");
    // Borrowed from the target: its embedding, and its LM head unless the
    // drafter ships one (tied to its own embedding when it ships only that).
    hp_.n_vocab = target.n_vocab;
    if (!w_.output) w_.output = w_.tok_embd ? w_.tok_embd : target_w.output;
    if (!w_.tok_embd) w_.tok_embd = target_w.tok_embd;
    if (d_.dflash2() && d_.selector_top_k > w_.output->ne[1]) {
        throw ModelFormatError("drafter '" + path + "' keeps the top " + std::to_string(d_.selector_top_k) +
                               " candidates (dflash.selector_top_k) of a head over only " +
                               std::to_string(w_.output->ne[1]) + " tokens");
    }
    if (d_.dspark && dw_.markov_w1->ne[1] != target.n_vocab) {
        throw ModelFormatError("DSpark drafter '" + path + "' has Markov codes for " +
                               std::to_string(dw_.markov_w1->ne[1]) + " tokens (markov_w1.weight), its target " +
                               std::to_string(target.n_vocab));
    }
    if (d_.dspark && dw_.markov_w2->ne[1] != head_rows()) {
        throw ModelFormatError("DSpark drafter '" + path + "' biases " + std::to_string(dw_.markov_w2->ne[1]) +
                               " tokens (markov_w2.weight), its LM head ranks " + std::to_string(head_rows()));
    }
}

void BlockDrafter::reduce_tables(ggml_backend_dev_t dev) {
    std::vector<std::pair<ggml_tensor *, ggml_tensor **>> tables;  // [width, n_vocab] -> its head rows
    if (d_.dflash2()) {
        tables = {{dw_.predecessor, &dw_.candidate_predecessor}, {dw_.successor, &dw_.candidate_successor}};
    }
    if (d_.dspark) tables = {{dw_.markov_w1, &dw_.markov_chain}};
    const int64_t rows = (int64_t) head_to_token_.size();
    ggml_init_params params = {ggml_tensor_overhead() * tables.size(), nullptr, true};
    table_ctx_.reset(ggml_init(params));
    std::vector<ggml_tensor *> out;
    for (const auto & [table, _] : tables) {
        out.push_back(ggml_new_tensor_2d(table_ctx_.get(), GGML_TYPE_F32, table->ne[0], rows));
    }
    table_buf_.reset(allocate_tensors(table_ctx_.get(), ggml_backend_dev_buffer_type(dev),
                                      "the drafter's tables reduced to its head's tokens"));
    std::vector<float> full, reduced;
    for (size_t i = 0; i < tables.size(); ++i) {
        const ggml_tensor * table = tables[i].first;
        const int64_t width = table->ne[0];
        std::vector<uint8_t> raw(ggml_nbytes(table));
        file_->read_tensor(table, raw.data());
        full.resize((size_t) ggml_nelements(table));
        if (table->type == GGML_TYPE_F32) {
            std::memcpy(full.data(), raw.data(), raw.size());
        } else if (ggml_get_type_traits(table->type)->to_float) {
            ggml_get_type_traits(table->type)->to_float(raw.data(), full.data(), ggml_nelements(table));
        } else {
            throw ModelFormatError("'" + std::string(table->name) + "' of type " + ggml_type_name(table->type) +
                                   " cannot be reduced to the d2t rows");
        }
        reduced.resize((size_t) (width * rows));
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(&reduced[r * width], &full[head_to_token_[r] * width], width * sizeof(float));
        }
        ggml_backend_tensor_set(out[i], reduced.data(), 0, ggml_nbytes(out[i]));
        *tables[i].second = out[i];
    }
}

void BlockDrafter::seek(int64_t position, int64_t seq) {
    if (position < kv_->seq_len(seq)) {
        kv_->rewind(position, seq);
    } else {
        kv_->skip(position - kv_->seq_len(seq), seq);
    }
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void BlockDrafter::inject(const float * features, int64_t n, int64_t start, int64_t seq) {
    check_seq(seq);
    const auto t0 = std::chrono::steady_clock::now();
    if (n <= 0 || start < 0 || start + n > kv_->n_ctx()) {
        throw std::invalid_argument("drafter rows [" + std::to_string(start) + ", " + std::to_string(start + n) +
                                    ") do not fit its context of " + std::to_string(kv_->n_ctx()));
    }
    seek(start, seq);
    inject_->run(n, opt_.max_rows, nullptr, features, nullptr, nullptr, seq);  // the pass reads no token ids
    inject_seconds_ += seconds_since(t0);
}

void BlockDrafter::map_to_target_tokens(std::vector<int32_t> & ids) const {
    if (head_to_token_.empty()) return;
    for (int32_t & id : ids) id = (int32_t) head_to_token_[id];
}

void BlockDrafter::read_body_outputs(const CachedGraph & g, BlockDraft & out) {
    out.ids.resize((size_t) (out.rows * out.k));
    out.values.resize(out.ids.size());
    if (d_.selects()) out.pairs.resize((size_t) ((out.rows - 1) * out.k * out.k));
    if (d_.dspark && dw_.conf_proj) out.confidence.resize((size_t) out.rows);
    void * third = d_.selects() ? (void *) out.pairs.data() : out.confidence.data();  // a lattice's pairs, or DSpark's
    void * dst[] = {out.ids.data(), out.values.data(), third};
    for (size_t i = 0; i < g.body_outputs.size(); ++i) {
        ggml_backend_tensor_get(g.body_outputs[i], dst[i], 0, ggml_nbytes(g.body_outputs[i]));
        readback_bytes_ += ggml_nbytes(g.body_outputs[i]);
    }
    // DSpark rows best first; a lattice's candidates stay a set (the host walk scores them all)
    if (d_.dspark) order_top_k(out.ids.data(), out.values.data(), out.rows, (int) out.k);
    map_to_target_tokens(out.ids);
}

void BlockDrafter::read_top_k(const CachedGraph & g, const GraphKey & key, int64_t n_block, int top_k,
                              BlockDraft & out) {
    std::vector<int32_t> ids((size_t) (n_block * top_k));
    std::vector<float> values(ids.size());
    ForwardOutputs rows;
    rows.ids = ids.data();
    rows.values = values.data();
    block_->read_outputs(g, key, 0, 0, rows);
    readback_bytes_ += 2 * ids.size() * sizeof(float);
    out.ids.assign(ids.begin() + top_k, ids.end());  // row 0 is the anchor's
    map_to_target_tokens(out.ids);
    out.values.assign(values.begin() + top_k, values.end());
}

BlockDraft BlockDrafter::draft(int32_t anchor, int64_t pos0, int64_t n_block, int top_k, int64_t seq) {
    check_seq(seq);
    const int64_t least = d_.first_draft_row() + 1;  // a row that drafts
    if (n_block < least || n_block > d_.block_size || n_block > opt_.max_rows) {
        throw std::invalid_argument("a draft block holds " + std::to_string(least) + ".." +
                                    std::to_string(std::min(d_.block_size, opt_.max_rows)) + " rows, got " +
                                    std::to_string(n_block));
    }
    if (pos0 < 0 || pos0 + n_block > kv_->n_ctx()) throw std::invalid_argument("the draft block overflows the context");
    if (anchor < 0 || anchor >= hp_.n_vocab) throw std::invalid_argument("anchor token outside the vocabulary");
    if (top_k < 1 || top_k > head_rows()) throw std::invalid_argument("top_k must be in [1, the head's rows]");
    const auto t0 = std::chrono::steady_clock::now();
    seek(pos0, seq);
    tokens_.assign((size_t) n_block, d_.mask_token);
    tokens_[0] = anchor;
    const bool lattice = d_.selects(), own_outputs = lattice || d_.dspark;  // else the runner's LM head
    BlockDraft out;
    out.rows = n_block - d_.first_draft_row();
    out.k = lattice ? d_.selector_top_k : top_k;
    try {
        block_->run(
            n_block, n_block, tokens_.data(), nullptr,
            [&](GraphKey & key, const Chunk &) {
                key.n_out = own_outputs ? 0 : n_block;
                key.top_k = lattice ? 0 : top_k;  // DSpark ranks its own rows
            },
            [&](CachedGraph & g, const GraphKey & key, const Chunk &) {
                if (own_outputs) read_body_outputs(g, out);
                else read_top_k(g, key, n_block, top_k, out);
            },
            seq);
    } catch (...) {
        kv_->rewind(pos0, seq);
        throw;
    }
    kv_->rewind(pos0, seq);  // the block's own K/V are not context
    draft_seconds_ += seconds_since(t0);
    return out;
}

}  // namespace ggspec
