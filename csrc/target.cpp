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
    const ggml_type kv_type = kv_type_from_name(opt.kv_type);
    const RowKernels row_kernels = row_kernels_from_name(opt.row_kernels);  // a bad name fails before the load
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
    file_->bind(dev_);
    if (opt_.graph_budget_bytes == 0) opt_.graph_budget_bytes = auto_graph_budget(file_->weight_bytes());

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
    const int64_t max_rows = std::max(opt.prefill_chunk, opt.max_verify_rows);
    kv_ = std::make_unique<KvCache>(dev_, hp_, opt.n_ctx, max_rows, kv_type);
    max_verify_rows_ = opt.max_verify_rows;
    if (hp_.has_recurrent()) {
        rs_ = std::make_unique<RecurrentState>(dev_, hp_);
        int64_t per_row = 0;  // a kept row costs a delta-rule state per recurrent layer
        for (int64_t il = 0; il < hp_.n_layer; ++il) {
            if (hp_.recurrent(il)) per_row += (int64_t) ggml_nbytes(rs_->ssm(il));
        }
        const int64_t rows = std::max<int64_t>(2, std::min(opt.max_verify_rows, opt.prefill_chunk));
        max_verify_rows_ = std::clamp<int64_t>((int64_t) opt.recurrent_snapshot_bytes / per_row, 2, rows);
    }
    runner_ = std::make_unique<GraphRunner>(
        backend_.get(), ModelBody{hp_, w_, *kv_, rs_.get(), arch_->build_trunk}, row_kernels_,
        opt_.graph_budget_bytes);
    if (hp_.n_nextn > 0 && arch_->load_nextn) {
        head_ = std::make_unique<DraftHead>(dev_, backend_.get(), *file_, *arch_, hp_, w_, drafter_options());
    }
    file_->check_all_used("ggspec's " + arch_name + " graph");
}

DrafterOptions Target::drafter_options() const {
    return DrafterOptions{opt_.n_ctx, std::max(opt_.prefill_chunk, opt_.max_verify_rows),
                          kv_type_from_name(opt_.kv_type), row_kernels_, opt_.graph_budget_bytes};
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
    const bool keep_rows = rs_ && req.all_rows && n <= max_verify_rows() &&
                           rollback_ != Rollback::reforward;
    try {
        int64_t pos0 = 0;
        runner_->run(
            n, opt_.prefill_chunk, req.tokens, nullptr,
            [&](GraphKey & key, const Chunk & c) {
                key.n_out = req.all_rows ? c.n_rows : (c.last ? 1 : 0);
                key.top_k = key.n_out > 0 ? req.top_k : 0;
                key.taps = req.taps;
                key.state_slots = keep_rows ? c.n_rows : 1;
                key.writes_state = !keep_rows || rollback_ == Rollback::snapshots_host;
                pos0 = kv_->seq_len();
            },
            [&](CachedGraph & g, const GraphKey & key, const Chunk & c) {
                if (rs_) {
                    state_len_ = key.writes_state ? pos0 + c.n_rows : pos0;
                    pending_ = keep_rows ? PendingState{&g, pos0, c.n_rows, key.writes_state} : PendingState{};
                }
                runner_->read_outputs(g, key, c.done, req.all_rows ? c.done : 0, out);
            });
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
    if (head_) head_->reset();
    if (drafter_) drafter_->reset();
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

void Target::set_recurrent_rollback(const std::string & name) {
    const Rollback next = rollback_from_name(name);
    if (rs_) settle_state(kv_->seq_len());
    rollback_ = next;
    snapshot_len_ = -1;
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
    // IQ2_XXS and IQ2_XS quantize only with an importance matrix: give every column the same weight
    const std::vector<float> uniform(ggml_quantize_requires_imatrix(type) ? (size_t) n_per_row : 0, 1.0f);
    std::vector<uint8_t> out(ggml_row_size(type, n_per_row) * rows);
    ggml_quantize_chunk(type, data, out.data(), 0, rows, n_per_row, uniform.empty() ? nullptr : uniform.data());
    return out;
}

}  // namespace ggspec
