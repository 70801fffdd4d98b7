#include "target.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "errors.h"
#include "ggml-cpu.h"
#include "kernels/row_matmul.h"
#include "log.h"

namespace ggspec {

namespace {

ggml_backend_dev_t pick_device(const std::string & name) {
    const size_t n = ggml_backend_dev_count();
    if (name == "auto") {
        for (size_t i = 0; i < n; ++i) {
            ggml_backend_dev_t dev = ggml_backend_dev_get(i);
            if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU) return dev;
        }
    }
    if (name == "auto" || name == "cpu" || name == "CPU") {
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (cpu) return cpu;
    }
    std::string available;
    for (size_t i = 0; i < n; ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (strcasecmp(ggml_backend_dev_name(dev), name.c_str()) == 0) return dev;
        available += (available.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev));
    }
    throw std::invalid_argument("unknown device '" + name + "'; this build has: auto, cpu, " + available);
}

ggml_type kv_type_from_name(const std::string & name) {
    if (name == "f16") return GGML_TYPE_F16;
    if (name == "f32") return GGML_TYPE_F32;
    if (name == "bf16") return GGML_TYPE_BF16;
    throw std::invalid_argument("unsupported KV cache type '" + name + "' (use f16, bf16 or f32)");
}

Target::Rollback rollback_from_name(const std::string & name) {
    if (name == "snapshots") return Target::Rollback::snapshots;
    if (name == "snapshots-host") return Target::Rollback::snapshots_host;
    if (name == "reforward") return Target::Rollback::reforward;
    throw std::invalid_argument("unknown recurrent rollback '" + name + "' (use snapshots, snapshots-host or reforward)");
}

}  // namespace

void ThreadpoolDeleter::operator()(ggml_threadpool * p) const { ggml_threadpool_free(p); }

static size_t auto_graph_budget(size_t weight_bytes) {
    // A graph's working memory grows with the model (its widths and vocabulary), so
    // the cache may hold about the weights' size: a small model's process stays small.
    return std::clamp(weight_bytes, size_t(256) << 20, size_t(1) << 30);
}

Target::Target(const std::string & path, const TargetOptions & opt) : opt_(opt) {
    install_ggml_log();
    if (opt.n_ctx <= 0) throw std::invalid_argument("n_ctx must be positive, got " + std::to_string(opt.n_ctx));
    if (opt.prefill_chunk <= 0) throw std::invalid_argument("prefill_chunk must be positive");
    if (opt.max_verify_rows <= 0) throw std::invalid_argument("max_verify_rows must be positive");
    if (opt.n_threads < 0) throw std::invalid_argument("n_threads must be >= 0");
    // a bad name fails before the load
    (void) kv_type_from_name(opt.kv_type);
    const RowKernels row_kernels = row_kernels_from_name(opt.row_kernels);
    rollback_ = rollback_from_name(opt.recurrent_rollback);
    dev_ = pick_device(opt.device);

    file_ = std::make_unique<ModelFile>(path);
    if (!file_->has_key("general.architecture")) {
        throw ModelFormatError("GGUF '" + path + "' has no general.architecture key");
    }
    const std::string arch_name = file_->get_str("general.architecture");
    arch_ = find_architecture(arch_name);
    if (!arch_) {
        throw ModelFormatError("unsupported architecture '" + arch_name + "' in '" + path +
                               "' (supported: " + supported_architectures() + ")");
    }
    arch_->load(*file_, hp_, w_);
    choose_rope_factors(hp_, opt.n_ctx, w_);

    backend_.reset(ggml_backend_dev_init(dev_, nullptr));
    if (!backend_) throw std::runtime_error("cannot initialise device " + device_name());
    if (ggml_backend_is_cpu(backend_.get())) {
        n_threads_ = opt.n_threads > 0 ? opt.n_threads : (int) std::max(1u, std::thread::hardware_concurrency());
        ggml_threadpool_params tp = ggml_threadpool_params_default(n_threads_);
        threadpool_.reset(ggml_threadpool_new(&tp));
        ggml_backend_cpu_set_n_threads(backend_.get(), n_threads_);
        ggml_backend_cpu_set_threadpool(backend_.get(), threadpool_.get());
        row_kernels_ = row_kernels;  // other backends run ggml's own kernels
    }
    const HostWeights host_weights = opt.mmap ? HostWeights::mapped : HostWeights::copied;
    if (opt.rpc.empty()) {
        placement_ = std::make_unique<Placement>(dev_, backend_.get(), hp_.n_layer);
        file_->bind(dev_, {}, host_weights);
    } else {
        if (!ggml_backend_is_cpu(backend_.get())) {
            throw std::invalid_argument("a target split over RPC workers runs its local layers on the CPU "
                                        "(device='cpu'), not " + device_name());
        }
        placement_ = std::make_unique<Placement>(dev_, backend_.get(), hp_.n_layer, opt.rpc, opt.tensor_split,
                                                 opt.rpc_timeout_s);
        // The local layers and the LM head keep ggspec's kernels; the workers'
        // layers run ggml's own ops, or a ggspec worker's kernels for their
        // weight products (ForwardGraph::products_for).
        file_->bind(dev_, [this](const std::string & name) { return placement_->remote_buft_of(name); },
                    host_weights);
    }
    w_.lane_packs->drop_file_pages(host_weights == HostWeights::mapped);
    if (opt_.graph_budget_bytes == 0) opt_.graph_budget_bytes = auto_graph_budget(file_->weight_bytes());
    max_verify_rows_ = opt.max_verify_rows;
    if (hp_.has_recurrent()) {
        const int64_t per_row = (int64_t) RecurrentState::row_bytes(hp_);  // a delta-rule state per recurrent layer
        const int64_t rows = std::max<int64_t>(2, std::min(opt.max_verify_rows, opt.prefill_chunk));
        max_verify_rows_ = std::clamp<int64_t>((int64_t) opt.recurrent_snapshot_bytes / per_row, 2, rows);
    }
    make_cache(1);
    if (hp_.n_nextn > 0 && arch_->load_nextn) {
        head_ = std::make_unique<DraftHead>(dev_, backend_.get(), nextn_head_model(*file_, *arch_, hp_, w_),
                                            drafter_options());
    }
    file_->check_all_used("ggspec's " + arch_name + " graph");
}

void Target::make_cache(int64_t n_seqs) {
    runner_.reset();  // the graphs hold views of the old cache and state: freed first
    kv_.reset();
    rs_.reset();
    seq_states_.assign((size_t) n_seqs, SeqState{});
    const LayerBufts bufts = placement_->layer_bufts();
    kv_ = std::make_unique<KvCache>(bufts, hp_, opt_.n_ctx, max_batch_rows(), kv_type_from_name(opt_.kv_type), n_seqs);
    if (hp_.has_recurrent()) rs_ = std::make_unique<RecurrentState>(bufts, hp_, n_seqs);
    runner_ = std::make_unique<GraphRunner>(
        backend_.get(), ModelBody{hp_, w_, *kv_, rs_.get(), arch_->build_trunk}, row_kernels_,
        opt_.graph_budget_bytes, placement_->split() ? placement_->backends() : std::vector<ggml_backend_t>{},
        placement_->worker_kernels(row_kernels_));
    if (head_) head_->set_n_seqs(n_seqs, kv_.get());
    if (drafter_) drafter_->set_n_seqs(n_seqs);
}

void Target::set_n_seqs(int64_t n) {
    if (n < 1) throw std::invalid_argument("a target holds at least one sequence, got " + std::to_string(n));
    if (n == n_seqs()) return;
    const int64_t old = n_seqs();
    try {
        make_cache(n);
    } catch (...) {
        make_cache(old);  // never left without a cache
        throw;
    }
}

DrafterOptions Target::drafter_options() const {
    return DrafterOptions{opt_.n_ctx, std::max(opt_.prefill_chunk, opt_.max_verify_rows), n_seqs(),
                          kv_type_from_name(opt_.kv_type), row_kernels_, opt_.graph_budget_bytes, kv_.get()};
}

void Target::attach_draft_head(const std::string & path) {
    HeadModel model = attached_head_model(path, hp_, w_, dev_);
    for (int64_t il = 0; model.reads_trunk_kv && il < model.hp.n_layer; ++il) {
        const int64_t read = model.hp.cache_layer(il);
        if (!placement_->layer_is_local(read)) {
            throw std::invalid_argument("the draft head '" + path + "' reads the target's cache of layer " +
                                        std::to_string(read) + ", which this split keeps on an RPC worker (" +
                                        placement_->describe() + "); give the local device that layer");
        }
    }
    // built before the head it replaces goes: a file that fails leaves the target as it was
    head_ = std::make_unique<DraftHead>(dev_, backend_.get(), std::move(model), drafter_options());
}

void Target::attach_drafter(const std::string & path, bool use_conv, bool use_selector, bool fused) {
    drafter_.reset();  // its memory first
    drafter_ = std::make_unique<BlockDrafter>(path, dev_, backend_.get(), hp_, w_, drafter_options(), use_conv,
                                              use_selector, fused);
}

std::string Target::device_name() const { return ggml_backend_dev_name(dev_); }

bool Target::lm_head_row_kernel() const { return row_kernel_usable(w_.output->type, row_kernels_); }

void Target::ensure_capacity(int64_t n) const {
    if (n > n_ctx()) {
        throw ContextOverflowError("a sequence of " + std::to_string(n) + " tokens exceeds the context of " +
                                   std::to_string(n_ctx()) + " (create the target with a larger n_ctx)");
    }
}

void Target::check_seq(int64_t seq) const {
    if (seq < 0 || seq >= n_seqs()) {
        throw std::invalid_argument("sequence " + std::to_string(seq) + " is not one of this target's " +
                                    std::to_string(n_seqs()) + " (set_n_seqs)");
    }
}

void Target::check_tokens(const int32_t * tokens, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab) {
            throw std::invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                        " is outside the vocabulary [0, " + std::to_string(hp_.n_vocab) + ")");
        }
    }
}

void Target::check_taps_top_k(const std::vector<int> & taps, int top_k) const {
    for (int tap : taps) {
        if (tap < -1 || tap >= hp_.n_layer) {
            throw std::invalid_argument("hidden tap " + std::to_string(tap) + " is not a layer of this " +
                                        std::to_string(hp_.n_layer) + "-layer model");
        }
    }
    if (top_k < 0 || top_k > hp_.n_vocab) throw std::invalid_argument("top_k must be in [0, n_vocab]");
}

void Target::check_request(const ForwardRequest & req) const {
    const int64_t n = req.n_tokens;
    check_seq(req.seq);
    if (n <= 0) throw std::invalid_argument("forward needs at least one token");
    ensure_capacity(kv_->seq_len(req.seq) + n);
    check_tokens(req.tokens, n);
    check_taps_top_k(req.taps, req.top_k);
}

void Target::check_batch(const std::vector<BatchItem> & items, int top_k, const std::vector<int> & taps) const {
    if (items.empty()) throw std::invalid_argument("a batch needs at least one sequence");
    std::vector<bool> seen((size_t) n_seqs(), false);
    for (const BatchItem & item : items) {
        check_seq(item.seq);
        const std::string which = "sequence " + std::to_string(item.seq);
        if (seen[item.seq]) throw std::invalid_argument(which + " appears twice in one batch");
        seen[item.seq] = true;
        if (item.n_tokens <= 0) throw std::invalid_argument(which + " has no tokens in the batch");
        if (item.n_tokens > max_batch_rows()) {
            throw std::invalid_argument(which + " has " + std::to_string(item.n_tokens) +
                                        " rows in the batch; one forward appends at most " +
                                        std::to_string(max_batch_rows()) + " to a sequence");
        }
        if (kv_->seq_len(item.seq) + item.n_tokens > n_ctx()) {
            throw ContextOverflowError(which + " would hold " + std::to_string(kv_->seq_len(item.seq) + item.n_tokens) +
                                       " tokens, more than the context of " + std::to_string(n_ctx()));
        }
        check_tokens(item.tokens, item.n_tokens);
    }
    check_taps_top_k(taps, top_k);
}

void Target::forward_batch(const std::vector<BatchItem> & items, int top_k, const std::vector<int> & taps,
                           const ForwardOutputs & out) {
    check_batch(items, top_k, taps);
    if (rs_) {
        settle_pending();
        for (const BatchItem & item : items) settle_state(kv_->seq_len(item.seq), item.seq);  // where each must be
    }
    std::vector<Segment> segments;
    std::vector<int32_t> tokens, out_rows;
    std::vector<int64_t> start_lens;
    GraphKey key;
    auto keeps = [&](const BatchItem & item) { return keeps_rows(item.n_tokens, item.head == BatchItem::Head::all); };
    for (const BatchItem & item : items) {
        const int32_t row0 = (int32_t) tokens.size();
        segments.push_back({item.seq, item.n_tokens});
        start_lens.push_back(kv_->seq_len(item.seq));
        if (rs_) key.recurrent.push_back(recurrent_segment(item.seq, item.n_tokens, keeps(item)));  // as alone
        tokens.insert(tokens.end(), item.tokens, item.tokens + item.n_tokens);
        if (item.head == BatchItem::Head::all) {
            for (int64_t r = 0; r < item.n_tokens; ++r) out_rows.push_back(row0 + (int32_t) r);
        } else if (item.head == BatchItem::Head::last) {
            out_rows.push_back(row0 + (int32_t) item.n_tokens - 1);
        }
    }
    key.n_rows = (int64_t) tokens.size();
    key.n_out = (int64_t) out_rows.size();
    key.top_k = key.n_out > 0 ? top_k : 0;
    key.taps = taps;
    runner_->size_kv(key, segments);
    bool computing = false;
    try {
        CachedGraph & g = runner_->prepare(key, segments, tokens.data(), nullptr, out_rows.data());
        computing = true;
        runner_->compute(g);
        for (size_t i = 0; i < key.recurrent.size(); ++i) {
            record_state(key.recurrent[i], start_lens[i], keeps(items[i]), g);
        }
        runner_->read_outputs(g, key, 0, 0, out);
    } catch (...) {
        for (size_t i = 0; i < items.size(); ++i) {
            // a recurrent state the graph began to write: that sequence starts over
            if (rs_ && computing) reset_seq(items[i].seq);
            else kv_->rewind(start_lens[i], items[i].seq);  // never the ring's limit
        }
        throw;
    }
}

void Target::forward(const ForwardRequest & req, const ForwardOutputs & out) {
    check_request(req);
    const int64_t n = req.n_tokens;
    const int64_t start_len = kv_->seq_len(req.seq);
    if (rs_) {
        settle_pending();
        settle_state(start_len, req.seq);  // where the state must be
    }
    const bool keep_rows = rs_ && keeps_rows(n, req.all_rows);
    try {
        int64_t pos0 = 0;
        runner_->run(
            n, opt_.prefill_chunk, req.tokens, nullptr,
            [&](GraphKey & key, const Chunk & c) {
                key.n_out = req.all_rows ? c.n_rows : (c.last ? 1 : 0);
                key.top_k = key.n_out > 0 ? req.top_k : 0;
                key.taps = req.taps;
                if (rs_) key.recurrent = {recurrent_segment(req.seq, c.n_rows, keep_rows)};
                pos0 = kv_->seq_len(req.seq);
            },
            [&](CachedGraph & g, const GraphKey & key, const Chunk & c) {
                if (rs_) record_state(key.recurrent[0], pos0, keep_rows, g);
                runner_->read_outputs(g, key, c.done, req.all_rows ? c.done : 0, out);
            },
            req.seq);
    } catch (...) {
        // The cache holds nothing usable past the start; rewind if the ring still allows it.
        try {
            if (rs_) settle_state(start_len, req.seq);
            kv_->rewind(start_len, req.seq);
        } catch (const std::exception &) {
            reset_seq(req.seq);
        }
        throw;
    }
}

void Target::rewind(int64_t length, int64_t seq) {
    check_seq(seq);
    if (length < 0 || length > kv_->seq_len(seq)) {
        throw std::invalid_argument("rewind length " + std::to_string(length) + " is outside [0, " +
                                    std::to_string(kv_->seq_len(seq)) + "]");
    }
    if (rs_) settle_state(length, seq);
    kv_->rewind(length, seq);
}

void Target::reset() {
    kv_->clear();
    if (head_) head_->reset();
    if (drafter_) drafter_->reset();
    if (rs_) rs_->clear();
    for (SeqState & st : seq_states_) st.empty();
}

void Target::reset_seq(int64_t seq) {
    check_seq(seq);
    kv_->clear_seq(seq);
    if (head_) head_->reset_seq(seq);
    if (drafter_) drafter_->reset_seq(seq);
    if (rs_) rs_->clear(seq);
    seq_states_[seq].empty();
}

void Target::pause_threads() {
    if (threadpool_) ggml_threadpool_pause(threadpool_.get());
}

void Target::settle_state(int64_t length, int64_t seq) {
    SeqState & st = seq_states_[seq];
    if (st.pending.graph) {
        const int64_t row = length - st.pending.start - 1;
        if (row >= 0 && row < st.pending.n_rows) {
            if (!(st.pending.live_is_last && row == st.pending.n_rows - 1)) commit_row(row, seq);
            st.len = length;
            st.pending = {};
            return;
        }
    }
    if (st.len != length) {
        throw std::invalid_argument(
            "cannot rewind to " + std::to_string(length) + ": this model's recurrent state is at position " +
            std::to_string(st.len) + " and keeps only the rows of its last verify (reset and re-forward instead)");
    }
    st.pending = {};
}

bool Target::keeps_rows(int64_t n, bool all_rows) const {
    return all_rows && n <= max_verify_rows() && rollback_ != Rollback::reforward;
}

RecurrentSegment Target::recurrent_segment(int64_t seq, int64_t rows, bool keep) const {
    // A kept verify stores no live state unless the host path copies from it anyway.
    return {seq, rows, keep ? rows : 1, !keep || rollback_ == Rollback::snapshots_host};
}

void Target::record_state(const RecurrentSegment & seg, int64_t start, bool keep, CachedGraph & g) {
    SeqState & st = seq_states_[seg.seq];
    st.len = seg.writes_state ? start + seg.n_rows : start;
    st.pending = keep ? PendingState{&g, start, seg.n_rows, seg.writes_state} : PendingState{};
}

void Target::settle_pending() {
    for (int64_t seq = 0; seq < n_seqs(); ++seq) {
        if (seq_states_[seq].pending.graph) settle_state(kv_->seq_len(seq), seq);
    }
}

uint64_t Target::state_transfer_bytes(int64_t seq) const {
    check_seq(seq);
    return seq_states_[seq].transfer_bytes;
}

void Target::move_state_bytes(size_t bytes, int64_t seq) {
    state_transfer_bytes_ += bytes;
    seq_states_[seq].transfer_bytes += bytes;
}

void Target::commit_row(int64_t row, int64_t seq) {
    PendingState & p = seq_states_[seq].pending;
    if (rollback_ == Rollback::snapshots) {
        std::unique_ptr<StateCommitGraph> & commit = p.graph->state_commits[{seq, row}];
        if (!commit) {
            commit = std::make_unique<StateCommitGraph>(placement_->backends(), *rs_, p.graph->state_sources, seq,
                                                        p.n_rows, row);
        }
        commit->run();
    } else {
        move_state_bytes(commit_state_through_host(*rs_, p.graph->state_sources, seq, p.n_rows, row), seq);
    }
    ++state_commits_;
}

void Target::set_recurrent_rollback(const std::string & name) {
    const Rollback next = rollback_from_name(name);
    if (rs_) settle_pending();
    rollback_ = next;
    for (SeqState & st : seq_states_) st.snapshot_len = -1;
}

void Target::snapshot_recurrent(int64_t seq) {
    check_seq(seq);
    if (!rs_ || rollback_ != Rollback::reforward) return;  // the verify keeps its own per-row states
    SeqState & st = seq_states_[seq];
    settle_state(kv_->seq_len(seq), seq);
    st.snapshot.resize(rs_->seq_bytes());
    rs_->download(st.snapshot.data(), seq);
    move_state_bytes(st.snapshot.size(), seq);
    st.snapshot_len = kv_->seq_len(seq);
}

void Target::restore_recurrent(int64_t seq) {
    check_seq(seq);
    if (!rs_ || rollback_ != Rollback::reforward) return;
    SeqState & st = seq_states_[seq];
    if (st.snapshot_len < 0) throw std::logic_error("restore_recurrent without a snapshot");
    rs_->upload(st.snapshot.data(), seq);
    move_state_bytes(st.snapshot.size(), seq);
    st.len = st.snapshot_len;
    st.pending = {};
}

size_t Target::seq_state_bytes() const { return rs_ ? rs_->seq_bytes() : 0; }

void Target::read_prefix(int64_t seq, int64_t pos, const std::vector<KvCache::HostCopy> & kv, uint8_t * state) {
    check_seq(seq);
    kv_->read_positions(seq, pos, kv);
    int64_t n = 0;
    for (const KvCache::HostCopy & c : kv) n += c.n;
    if (state) {
        if (!rs_) throw std::invalid_argument("an attention-only trunk has no recurrent state to read");
        if (pos + n != kv_->seq_len(seq)) {
            throw std::invalid_argument("the recurrent state is the one after the sequence's last position (" +
                                        std::to_string(kv_->seq_len(seq)) + "), not after " +
                                        std::to_string(pos + n));
        }
        settle_state(kv_->seq_len(seq), seq);
        rs_->download(state, seq);
    }
}

void Target::append_prefix(int64_t seq, const std::vector<KvCache::HostCopy> & kv, const uint8_t * state) {
    check_seq(seq);
    if (rs_ && seq_states_[seq].pending.graph) settle_state(kv_->seq_len(seq), seq);
    kv_->append_positions(seq, kv);
    if (!rs_) return;
    SeqState & st = seq_states_[seq];
    if (state) {
        rs_->upload(state, seq);
        st.len = kv_->seq_len(seq);
    }
    // without a state the sequence cannot run until one comes: forwards check st.len
}

std::vector<std::vector<float>> Target::read_recurrent_state(int64_t seq) {
    check_seq(seq);
    std::vector<std::vector<float>> out;
    if (!rs_) return out;
    settle_state(kv_->seq_len(seq), seq);
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {rs_->conv(il, seq), rs_->ssm(il, seq)}) {
            if (!t) continue;
            out.emplace_back((size_t) ggml_nelements(t));
            ggml_backend_tensor_get(t, out.back().data(), 0, ggml_nbytes(t));
        }
    }
    return out;
}

std::vector<uint8_t> quantize_rows(const std::string & type_name, const float * data, int64_t rows, int64_t n_per_row) {
    ggml_type type = GGML_TYPE_COUNT;
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * name = ggml_type_name((ggml_type) t);
        if (name && strcasecmp(name, type_name.c_str()) == 0 && ggml_get_type_traits((ggml_type) t)->blck_size > 0) {
            type = (ggml_type) t;
        }
    }
    if (type == GGML_TYPE_COUNT) throw std::invalid_argument("unknown ggml type '" + type_name + "'");
    if (n_per_row % ggml_blck_size(type) != 0) {
        throw std::invalid_argument(type_name + " needs rows of a multiple of " + std::to_string(ggml_blck_size(type)) +
                                    " values, got " + std::to_string(n_per_row));
    }
    // IQ2_XXS and IQ2_XS quantize only with an importance matrix: give every column the same weight
    const std::vector<float> uniform(ggml_quantize_requires_imatrix(type) ? (size_t) n_per_row : 0, 1.0f);
    std::vector<uint8_t> out(ggml_row_size(type, n_per_row) * rows);
    ggml_quantize_chunk(type, data, out.data(), 0, rows, n_per_row, uniform.empty() ? nullptr : uniform.data());
    return out;
}

}  // namespace ggspec
