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

ggml_tensor * new_input(ggml_context * ctx, ggml_type type, int64_t ne0, int64_t ne1, const char * name) {
    ggml_tensor * t = ne1 > 0 ? ggml_new_tensor_2d(ctx, type, ne0, ne1) : ggml_new_tensor_1d(ctx, type, ne0);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

}  // namespace

void ThreadpoolDeleter::operator()(ggml_threadpool * p) const { ggml_threadpool_free(p); }

Target::Target(const std::string & path, const TargetOptions & opt) : opt_(opt), graphs_(opt.graph_budget_bytes) {
    install_ggml_log();
    if (opt.n_ctx <= 0) throw std::invalid_argument("n_ctx must be positive, got " + std::to_string(opt.n_ctx));
    if (opt.prefill_chunk <= 0) throw std::invalid_argument("prefill_chunk must be positive");
    if (opt.max_verify_rows <= 0) throw std::invalid_argument("max_verify_rows must be positive");
    if (opt.n_threads < 0) throw std::invalid_argument("n_threads must be >= 0");
    const ggml_type kv_type = kv_type_from_name(opt.kv_type);
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
    file_->bind(dev_);

    backend_.reset(ggml_backend_dev_init(dev_, nullptr));
    if (!backend_) throw std::runtime_error("cannot initialise device " + device_name());
    if (ggml_backend_is_cpu(backend_.get())) {
        n_threads_ = opt.n_threads > 0 ? opt.n_threads : (int) std::max(1u, std::thread::hardware_concurrency());
        ggml_threadpool_params tp = ggml_threadpool_params_default(n_threads_);
        threadpool_.reset(ggml_threadpool_new(&tp));
        ggml_backend_cpu_set_n_threads(backend_.get(), n_threads_);
        ggml_backend_cpu_set_threadpool(backend_.get(), threadpool_.get());
        row_kernels_ = opt.row_kernels;
    }
    const int64_t max_rows = std::max(opt.prefill_chunk, opt.max_verify_rows);
    kv_ = std::make_unique<KvCache>(dev_, hp_, opt.n_ctx, max_rows, kv_type);
    if (hp_.has_recurrent()) rs_ = std::make_unique<RecurrentState>(dev_, hp_);
}

std::string Target::device_name() const { return ggml_backend_dev_name(dev_); }

bool Target::lm_head_row_kernel() const { return row_kernels_ && row_kernel_usable(w_.output->type); }

void Target::ensure_capacity(int64_t n) const {
    if (n > n_ctx()) {
        throw ContextOverflowError("a sequence of " + std::to_string(n) + " tokens exceeds the context of " +
                                   std::to_string(n_ctx()) + " (create the target with a larger n_ctx)");
    }
}

std::unique_ptr<CachedGraph> Target::build_graph(const GraphKey & key) const {
    auto cg = std::make_unique<CachedGraph>();
    const size_t max_nodes = 64 * (size_t) hp_.n_layer + 512;
    ggml_init_params params = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false),
                               nullptr, true};
    cg->ctx = ggml_init(params);
    ggml_context * ctx = cg->ctx;
    const int64_t n = key.n_rows;

    cg->tokens = new_input(ctx, GGML_TYPE_I32, n, 0, "tokens");
    cg->positions = new_input(ctx, GGML_TYPE_I32, n * hp_.n_pos_per_token, 0, "positions");
    auto attention_inputs = [&](int64_t n_kv, bool ring, int64_t window) {
        AttentionInputs a;
        a.mask = new_input(ctx, GGML_TYPE_F32, n_kv, n, "kq_mask");
        a.k_idx = new_input(ctx, GGML_TYPE_I64, n, 0, "k_idx");
        a.v_idx = new_input(ctx, GGML_TYPE_I64, n * hp_.n_embd_kv(), 0, "v_idx");
        a.n_kv = n_kv;
        a.ring = ring;
        a.window = window;
        return a;
    };
    cg->full = attention_inputs(key.n_kv_full, false, 0);
    if (hp_.n_swa > 0) cg->swa = attention_inputs(key.n_kv_swa, kv_->has_ring(), hp_.n_swa);

    ForwardGraph fg{ctx, hp_, w_, *kv_, n, cg->tokens, cg->positions, cg->full, cg->swa, {}, row_kernels_};
    fg.rs = rs_.get();
    fg.state_slots = key.state_slots;
    fg.writes_state = key.writes_state;
    ggml_tensor * trunk = arch_->build_trunk(fg);
    cg->graph = ggml_new_graph_custom(ctx, max_nodes, false);
    ggml_build_forward_expand(cg->graph, trunk);  // the KV writes of every layer hang off it
    // after every node that reads the live state
    for (ggml_tensor * write : fg.state_writes) ggml_build_forward_expand(cg->graph, write);
    cg->state_sources = std::move(fg.state_sources);

    for (int tap : key.taps) {
        ggml_tensor * t = tap < 0 ? trunk : fg.layer_inputs[tap];
        cg->hidden = cg->hidden ? ggml_concat(ctx, cg->hidden, t, 0) : t;
    }
    if (cg->hidden) {
        ggml_set_output(cg->hidden);
        ggml_build_forward_expand(cg->graph, cg->hidden);
    }
    if (key.n_out > 0) {
        ggml_tensor * rows = key.n_out == n ? trunk
                                            : ggml_view_2d(ctx, trunk, hp_.n_embd, 1, trunk->nb[1], (n - 1) * trunk->nb[1]);
        ggml_tensor * logits = fg.matmul(w_.output, rows);
        if (hp_.final_softcap > 0.0f) {
            logits = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, logits, 1.0f / hp_.final_softcap)), hp_.final_softcap);
        }
        if (key.top_k == 0) {
            cg->logits = logits;
            ggml_set_output(logits);
            ggml_build_forward_expand(cg->graph, logits);
        } else {
            cg->ids = key.top_k == 1 ? ggml_reshape_2d(ctx, ggml_argmax(ctx, logits), 1, key.n_out)
                                     : ggml_top_k(ctx, logits, key.top_k);
            cg->values = ggml_reshape_2d(
                ctx, ggml_get_rows(ctx, ggml_reshape_3d(ctx, logits, 1, hp_.n_vocab, key.n_out), cg->ids), key.top_k,
                key.n_out);
            ggml_set_output(cg->ids);
            ggml_set_output(cg->values);
            ggml_build_forward_expand(cg->graph, cg->ids);
            ggml_build_forward_expand(cg->graph, cg->values);
        }
    }
    cg->allocator = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_.get()));
    if (!ggml_gallocr_alloc_graph(cg->allocator, cg->graph)) {
        throw std::runtime_error("cannot allocate a forward graph of " + std::to_string(n) + " rows on " + device_name());
    }
    return cg;
}

void Target::fill_attention_inputs(const AttentionInputs & in, const int32_t * positions, int64_t n) {
    const SlotMap & slots = kv_->slots(in.ring);
    mask_.resize((size_t) (in.n_kv * n));
    slots.fill_mask(mask_.data(), in.n_kv, positions, n, in.window);
    ggml_backend_tensor_set(in.mask, mask_.data(), 0, ggml_nbytes(in.mask));

    const int64_t d = hp_.n_embd_kv();
    idx_.resize((size_t) (n * d));
    for (int64_t r = 0; r < n; ++r) idx_[r] = slots.slot(positions[r]);
    ggml_backend_tensor_set(in.k_idx, idx_.data(), 0, ggml_nbytes(in.k_idx));
    for (int64_t r = n - 1; r >= 0; --r) {  // backwards: idx_[r] is read before row r is overwritten
        const int64_t slot = idx_[r];
        for (int64_t j = d - 1; j >= 0; --j) idx_[r * d + j] = j * slots.n_slots() + slot;
    }
    ggml_backend_tensor_set(in.v_idx, idx_.data(), 0, ggml_nbytes(in.v_idx));
}

void Target::fill_inputs(CachedGraph & g, const int32_t * tokens, int64_t n, int64_t pos0) {
    // Section-major when a token has several positions; text repeats its
    // position in all but the last section, which stays 0 (llama.cpp's rule).
    const int64_t sections = hp_.n_pos_per_token;
    positions_.assign((size_t) (n * sections), 0);
    for (int64_t s = 0; s < std::max<int64_t>(1, sections - 1); ++s) {
        std::iota(positions_.begin() + s * n, positions_.begin() + (s + 1) * n, (int32_t) pos0);
    }
    ggml_backend_tensor_set(g.tokens, tokens, 0, n * sizeof(int32_t));
    ggml_backend_tensor_set(g.positions, positions_.data(), 0, ggml_nbytes(g.positions));
    fill_attention_inputs(g.full, positions_.data(), n);
    if (g.swa.mask) fill_attention_inputs(g.swa, positions_.data(), n);
}

void Target::read_outputs(const CachedGraph & g, const GraphKey & key, int64_t row0, int64_t out_row0,
                          const ForwardOutputs & out) const {
    if (g.hidden && out.hidden) {
        const int64_t width = (int64_t) key.taps.size() * hp_.n_embd;
        ggml_backend_tensor_get(g.hidden, out.hidden + row0 * width, 0, ggml_nbytes(g.hidden));
    }
    if (g.logits && out.logits) {
        ggml_backend_tensor_get(g.logits, out.logits + out_row0 * hp_.n_vocab, 0, ggml_nbytes(g.logits));
    }
    if (g.ids && out.ids) {
        const int k = key.top_k;
        std::vector<int32_t> ids((size_t) (k * key.n_out));
        std::vector<float> values(ids.size());
        ggml_backend_tensor_get(g.ids, ids.data(), 0, ggml_nbytes(g.ids));
        ggml_backend_tensor_get(g.values, values.data(), 0, ggml_nbytes(g.values));
        std::vector<int> order((size_t) k);
        for (int64_t r = 0; r < key.n_out; ++r) {
            // ggml's top-k is unordered: best first, ties to the lower id.
            const int32_t * rid = ids.data() + r * k;
            const float * rval = values.data() + r * k;
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(), [&](int a, int b) {
                return rval[a] != rval[b] ? rval[a] > rval[b] : rid[a] < rid[b];
            });
            for (int j = 0; j < k; ++j) {
                out.ids[(out_row0 + r) * k + j] = rid[order[j]];
                if (out.values) out.values[(out_row0 + r) * k + j] = rval[order[j]];
            }
        }
    }
}

void Target::check_request(const ForwardRequest & req) const {
    const int64_t n = req.n_tokens;
    if (n <= 0) throw std::invalid_argument("forward needs at least one token");
    ensure_capacity(kv_->seq_len() + n);
    for (int64_t i = 0; i < n; ++i) {
        if (req.tokens[i] < 0 || req.tokens[i] >= hp_.n_vocab) {
            throw std::invalid_argument("token id " + std::to_string(req.tokens[i]) + " at index " + std::to_string(i) +
                                        " is outside the vocabulary [0, " + std::to_string(hp_.n_vocab) + ")");
        }
    }
    for (int tap : req.taps) {
        if (tap < -1 || tap >= hp_.n_layer) {
            throw std::invalid_argument("hidden tap " + std::to_string(tap) + " is not a layer of this " +
                                        std::to_string(hp_.n_layer) + "-layer model");
        }
    }
    if (req.top_k < 0 || req.top_k > hp_.n_vocab) throw std::invalid_argument("top_k must be in [0, n_vocab]");
}

void Target::forward(const ForwardRequest & req, const ForwardOutputs & out) {
    check_request(req);
    const int64_t n = req.n_tokens;
    const int64_t start_len = kv_->seq_len();
    if (rs_) settle_state(start_len);  // the last verify kept every row
    // A verify keeps the state after each row, to roll back to without a re-forward.
    const bool keep_rows = rs_ && req.all_rows && n <= std::min(opt_.max_verify_rows, opt_.prefill_chunk) &&
                           rollback_ != Rollback::reforward;
    try {
        for (int64_t done = 0; done < n;) {
            const int64_t m = std::min(opt_.prefill_chunk, n - done);
            const bool last = done + m == n;
            GraphKey key;
            key.n_rows = m;
            key.n_kv_full = kv_->n_kv_full(m);
            key.n_kv_swa = hp_.n_swa > 0 ? kv_->n_kv_ring(m) : 0;
            key.n_out = req.all_rows ? m : (last ? 1 : 0);
            key.top_k = key.n_out > 0 ? req.top_k : 0;
            key.taps = req.taps;
            key.state_slots = keep_rows ? m : 1;
            key.writes_state = !keep_rows || rollback_ == Rollback::snapshots_host;
            CachedGraph & g = graphs_.get(key, [&] { return build_graph(key); });

            const int64_t pos0 = kv_->seq_len();
            kv_->advance(m);
            fill_inputs(g, req.tokens + done, m, pos0);
            if (ggml_backend_graph_compute(backend_.get(), g.graph) != GGML_STATUS_SUCCESS) {
                throw std::runtime_error("graph compute failed on " + device_name());
            }
            if (rs_) {
                state_len_ = key.writes_state ? pos0 + m : pos0;
                pending_ = keep_rows ? PendingState{&g, pos0, m, key.writes_state} : PendingState{};
            }
            read_outputs(g, key, done, req.all_rows ? done : 0, out);
            done += m;
        }
    } catch (...) {
        // The cache holds nothing usable past the start; rewind if the ring still allows it.
        try {
            if (rs_) settle_state(start_len);
            kv_->rewind(start_len);
        } catch (const std::exception &) {
            reset();
        }
        throw;
    }
}

void Target::rewind(int64_t length) {
    if (length < 0 || length > kv_->seq_len()) {
        throw std::invalid_argument("rewind length " + std::to_string(length) + " is outside [0, " +
                                    std::to_string(kv_->seq_len()) + "]");
    }
    if (rs_) settle_state(length);
    kv_->rewind(length);
}

void Target::reset() {
    kv_->clear();
    if (rs_) rs_->clear();
    state_len_ = 0;
    pending_ = {};
}

void Target::settle_state(int64_t length) {
    if (pending_.graph) {
        const int64_t row = length - pending_.start - 1;
        if (row >= 0 && row < pending_.n_rows) {
            if (!(pending_.live_is_last && row == pending_.n_rows - 1)) commit_row(row);
            state_len_ = length;
            pending_ = {};
            return;
        }
    }
    if (state_len_ != length) {
        throw std::invalid_argument(
            "cannot rewind to " + std::to_string(length) + ": this model's recurrent state is at position " +
            std::to_string(state_len_) + " and keeps only the rows of its last verify (reset and re-forward instead)");
    }
    pending_ = {};
}

void Target::commit_row(int64_t row) {
    PendingState & p = pending_;
    if (rollback_ == Rollback::snapshots) {
        std::unique_ptr<StateCommitGraph> & commit = p.graph->state_commits[row];
        if (!commit) commit = std::make_unique<StateCommitGraph>(backend_.get(), *rs_, p.graph->state_sources, p.n_rows, row);
        commit->run(backend_.get());
    } else {
        state_transfer_bytes_ += commit_state_through_host(*rs_, p.graph->state_sources, p.n_rows, row);
    }
    ++state_commits_;
}

void Target::snapshot_recurrent() {
    if (!rs_ || rollback_ != Rollback::reforward) return;  // the verify keeps its own per-row states
    settle_state(kv_->seq_len());
    state_transfer_bytes_ += rs_->download(state_snapshot_);
    snapshot_len_ = kv_->seq_len();
}

void Target::restore_recurrent() {
    if (!rs_ || rollback_ != Rollback::reforward) return;
    if (snapshot_len_ < 0) throw std::logic_error("restore_recurrent without a snapshot");
    state_transfer_bytes_ += rs_->upload(state_snapshot_);
    state_len_ = snapshot_len_;
    pending_ = {};
}

std::vector<std::vector<float>> Target::read_recurrent_state() {
    std::vector<std::vector<float>> out;
    if (!rs_) return out;
    settle_state(kv_->seq_len());
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {rs_->conv(il), rs_->ssm(il)}) {
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
    if (ggml_quantize_requires_imatrix(type)) throw std::invalid_argument(type_name + " needs an importance matrix");
    std::vector<uint8_t> out(ggml_row_size(type, n_per_row) * rows);
    ggml_quantize_chunk(type, data, out.data(), 0, rows, n_per_row, nullptr);
    return out;
}

}  // namespace ggspec
