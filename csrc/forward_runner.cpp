#include "forward_runner.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "buffers.h"
#include "ggml-alloc.h"
#include "kernels/row_argmax.h"

namespace ggspec {

namespace {

ggml_tensor * new_input(ggml_context * ctx, ggml_type type, int64_t ne0, int64_t ne1, const char * name) {
    ggml_tensor * t = ne1 > 0 ? ggml_new_tensor_2d(ctx, type, ne0, ne1) : ggml_new_tensor_1d(ctx, type, ne0);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

// Inputs a graph does not use (an injection pass reads no token ids and no
// mask) were never allocated: there is nothing to set.
void set_input(ggml_tensor * t, const void * data) {
    if (t && t->buffer) ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t));
}

}  // namespace

GraphRunner::GraphRunner(ggml_backend_t backend, const ModelBody & body, RowKernels row_kernels,
                         size_t graph_budget_bytes, std::vector<ggml_backend_t> sched_backends,
                         WorkerKernels worker_kernels)
    : backend_(backend),
      sched_backends_(std::move(sched_backends)),
      worker_kernels_(std::move(worker_kernels)),
      body_(body),
      row_kernels_(row_kernels),
      graphs_(graph_budget_bytes) {
    if (!sched_backends_.empty() && body_.per_op) throw std::logic_error("a split target runs whole graphs");
}

ggml_tensor * GraphRunner::concat_taps(const ForwardGraph & g, ggml_tensor * trunk, const std::vector<int> & taps,
                                       std::vector<NodePin> & pins) const {
    const size_t local = sched_backends_.size() - 1;  // unused on one device
    ggml_tensor * all = nullptr;
    ggml_tensor * run = nullptr;
    size_t run_device = 0;
    auto end_run = [&] {
        if (!run) return;
        all = all ? ggml_concat(g.ctx, all, run, 0) : run;
        if (all != run) pins.emplace_back(all, local);
    };
    for (int tap : taps) {
        ggml_tensor * t = tap < 0 ? trunk : g.layer_inputs[tap];
        const ggml_tensor * maker = tap > 0 ? g.w.layers[tap - 1].attn_norm : nullptr;  // a weight of the layer before
        const size_t device = sched_backends_.empty() || !maker ? local : device_index(sched_backends_, maker);
        if (run && device == run_device && device != local) {
            run = ggml_concat(g.ctx, run, t, 0);
            pins.emplace_back(run, device);
            continue;
        }
        end_run();
        run = t;
        run_device = device;
    }
    end_run();
    return all;
}

std::unique_ptr<CachedGraph> GraphRunner::build(const GraphKey & key) const {
    const Hparams & hp = body_.hp;
    const ModelWeights & w = body_.w;
    auto cg = std::make_unique<CachedGraph>();
    // A recurrent layer adds its per-sequence chain (views, conv, delta rule, state
    // writes, the output's concat: about 25 nodes) for each sequence in the batch.
    const size_t max_nodes = 96 * (size_t) hp.n_layer + 512 + 32 * (size_t) (hp.n_layer * key.recurrent.size());
    ggml_init_params params = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false),
                               nullptr, true};
    cg->ctx = ggml_init(params);
    ggml_context * ctx = cg->ctx;
    const int64_t n = key.n_rows;

    cg->tokens = new_input(ctx, GGML_TYPE_I32, n, 0, "tokens");
    cg->positions = new_input(ctx, GGML_TYPE_I32, n * hp.n_pos_per_token, 0, "positions");
    auto attention_inputs = [&](int64_t n_kv, bool ring, int64_t window, int64_t kv_width) {
        AttentionInputs a;
        a.mask = new_input(ctx, GGML_TYPE_F32, n_kv, n, "kq_mask");
        a.k_idx = new_input(ctx, GGML_TYPE_I64, n, 0, "k_idx");
        a.v_idx = new_input(ctx, GGML_TYPE_I64, n * kv_width, 0, "v_idx");
        a.kv_width = kv_width;
        // where each row's sequence's region is (kernels/fused_attention.h)
        a.regions = new_input(ctx, GGML_TYPE_I32, 2 * n, 0, "kv_regions");
        a.n_kv = n_kv;
        a.ring = ring;
        a.window = window;
        return a;
    };
    cg->full = attention_inputs(key.n_kv_full, false, 0, hp.n_embd_kv_kind(false));
    if (hp.n_swa > 0) cg->swa = attention_inputs(key.n_kv_swa, body_.kv.has_ring(), hp.n_swa, hp.n_embd_kv_kind(true));

    if (body_.hidden_width > 0) cg->hidden_in = new_input(ctx, GGML_TYPE_F32, body_.hidden_width, n, "hidden_in");

    ForwardGraph fg{ctx, hp, w, body_.kv, n, cg->tokens, cg->positions, cg->hidden_in, cg->full, cg->swa, {}, row_kernels_};
    fg.rs = body_.rs;
    fg.worker_kernels = worker_kernels_;
    fg.dealer = &dealer_;
    fg.recurrent = key.recurrent;
    if (key.n_out == 0) fg.top_k = key.top_k;  // no LM head of the runner's: the body ranks its own rows
    ggml_tensor * trunk = body_.build(fg);
    cg->graph = ggml_new_graph_custom(ctx, max_nodes, false);
    std::vector<NodePin> pins;  // a split target's tap concatenations (concat_taps)
    cg->hidden = concat_taps(fg, trunk, key.taps, pins);
    if (sched_backends_.empty()) {
        ggml_build_forward_expand(cg->graph, trunk);  // the KV writes of every layer hang off it
        // after every node that reads the live state
        for (ggml_tensor * write : fg.writes) ggml_build_forward_expand(cg->graph, write);
    } else {
        // Each state write right after the layer that read the state (its
        // sources are its only readers), and each worker's concatenated taps
        // right after that worker's layers: at the graph's end either would
        // make a second split on the worker, whose whole graph ggml's RPC client
        // then sends on every step (it resends only the graph it did not send last).
        const size_t local = sched_backends_.size() - 1;
        std::vector<NodePin> worker_taps;
        for (const NodePin & pin : pins) {
            if (pin.second != local) worker_taps.push_back(pin);
        }
        size_t next = 0;
        auto expand_taps_before = [&](size_t device) {  // devices hold layers in order
            for (; next < worker_taps.size() && worker_taps[next].second < device; ++next) {
                ggml_build_forward_expand(cg->graph, worker_taps[next].first);
            }
        };
        for (ggml_tensor * write : fg.writes) {
            expand_taps_before(device_index(sched_backends_, write));
            ggml_build_forward_expand(cg->graph, write);
        }
        expand_taps_before(local);
        ggml_build_forward_expand(cg->graph, trunk);
    }
    cg->state_sources = std::move(fg.state_sources);
    for (ggml_tensor * t : fg.outputs) {
        ggml_set_output(t);
        ggml_build_forward_expand(cg->graph, t);
    }
    cg->body_outputs = std::move(fg.outputs);

    if (cg->hidden) {
        ggml_set_output(cg->hidden);
        ggml_build_forward_expand(cg->graph, cg->hidden);
    }
    if (key.n_out > 0) {
        ggml_tensor * rows = trunk;
        if (key.n_out < n) {  // a copy of the rows: the LM head sees the same bits
            cg->out_rows = new_input(ctx, GGML_TYPE_I32, key.n_out, 0, "out_rows");
            rows = ggml_get_rows(ctx, trunk, cg->out_rows);
        }
        ggml_tensor * logits = fg.matmul(w.output, rows);
        if (hp.logit_scale != 1.0f) logits = ggml_scale(ctx, logits, hp.logit_scale);
        if (hp.final_softcap > 0.0f) {
            logits = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, logits, 1.0f / hp.final_softcap)), hp.final_softcap);
        }
        if (key.top_k == 0) {
            cg->logits = logits;
            ggml_set_output(logits);
            ggml_build_forward_expand(cg->graph, logits);
        } else {
            cg->ids = key.top_k == 1 ? ggml_reshape_2d(ctx, row_argmax(ctx, logits, row_kernels_), 1, key.n_out)
                                     : ggml_top_k(ctx, logits, key.top_k);
            cg->values = ggml_reshape_2d(
                ctx, ggml_get_rows(ctx, ggml_reshape_3d(ctx, logits, 1, logits->ne[0], key.n_out), cg->ids), key.top_k,
                key.n_out);
            ggml_set_output(cg->ids);
            ggml_set_output(cg->values);
            ggml_build_forward_expand(cg->graph, cg->ids);
            ggml_build_forward_expand(cg->graph, cg->values);
        }
    }
    const std::string what = "a forward graph of " + std::to_string(n) + " rows on " + device_name();
    if (sched_backends_.empty()) {
        cg->allocator = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
        allocate_graph(cg->allocator, cg->graph, what);
        return cg;
    }
    // A scheduler per graph, as an allocator per graph above: allocated once,
    // its splits and their buffers kept for every replay.
    cg->sched = schedule_split_graph(cg->graph, max_nodes, fg.layer_inputs, cg->state_sources, body_.w, body_.rs,
                                     pins, sched_backends_, backend_, what);
    return cg;
}

void GraphRunner::fill_attention_inputs(const AttentionInputs & in, const std::vector<Segment> & segments,
                                        int64_t n) {
    const KvCache & kv = body_.kv;
    const int64_t d = in.kv_width;
    mask_.resize((size_t) (in.n_kv * n));
    idx_.resize((size_t) (n * d));
    regions_.resize((size_t) (2 * n));
    int64_t row0 = 0;
    for (const Segment & seg : segments) {
        const SlotMap & slots = kv.slots(in.ring, seg.seq);
        const int64_t base = kv.base(in.ring, seg.seq);
        const int32_t * positions = positions_.data() + row0;
        // a non-causal body's rows see up to the forward's last position
        slots.fill_mask(mask_.data() + row0 * in.n_kv, in.n_kv, base, positions, seg.n_rows, in.window,
                        body_.causal ? -1 : positions[seg.n_rows - 1]);
        for (int64_t r = 0; r < seg.n_rows; ++r) {
            idx_[row0 + r] = base + slots.slot(positions[r]);
            regions_[2 * (row0 + r)] = (int32_t) base;
            regions_[2 * (row0 + r) + 1] = (int32_t) std::min(in.n_kv, base + slots.n_slots());
        }
        row0 += seg.n_rows;
    }
    set_input(in.mask, mask_.data());
    if (in.regions) set_input(in.regions, regions_.data());
    set_input(in.k_idx, idx_.data());
    if (!in.v_idx->buffer) return;  // the kernel paths write V from k_idx
    const int64_t n_slots = kv.total_slots(in.ring);  // the transposed V's row stride
    for (int64_t r = n - 1; r >= 0; --r) {  // backwards: idx_[r] is read before row r is overwritten
        const int64_t slot = idx_[r];
        for (int64_t j = d - 1; j >= 0; --j) idx_[r * d + j] = j * n_slots + slot;
    }
    set_input(in.v_idx, idx_.data());
}

void GraphRunner::size_kv(GraphKey & key, const std::vector<Segment> & segments) const {
    key.n_kv_full = key.n_kv_swa = 0;
    for (const Segment & seg : segments) {
        key.n_kv_full = std::max(key.n_kv_full, body_.kv.n_kv_full(seg.n_rows, seg.seq));
        if (body_.hp.n_swa > 0) key.n_kv_swa = std::max(key.n_kv_swa, body_.kv.n_kv_ring(seg.n_rows, seg.seq));
    }
}

void GraphRunner::run(int64_t n, int64_t max_rows, const int32_t * tokens, const float * hidden_in,
                      const ShapeChunk & shape, const ReadChunk & read, int64_t seq) {
    std::vector<int32_t> no_tokens;
    if (!tokens) {
        no_tokens.assign((size_t) std::min(n, max_rows), 0);
    }
    for (int64_t done = 0; done < n;) {
        const Chunk chunk{done, std::min(max_rows, n - done), done + std::min(max_rows, n - done) == n};
        const std::vector<Segment> segments{{seq, chunk.n_rows}};
        GraphKey key;
        key.n_rows = chunk.n_rows;
        size_kv(key, segments);
        if (shape) shape(key, chunk);
        CachedGraph & g = prepare(key, segments, tokens ? tokens + done : no_tokens.data(),
                                  hidden_in ? hidden_in + done * body_.hidden_width : nullptr);
        compute(g);
        if (read) read(g, key, chunk);
        done += chunk.n_rows;
    }
}

CachedGraph & GraphRunner::prepare(const GraphKey & key, const std::vector<Segment> & segments,
                                   const int32_t * tokens, const float * hidden_in, const int32_t * out_rows) {
    const Hparams & hp = body_.hp;
    CachedGraph & g = graphs_.get(key, [&] { return build(key); });
    const int64_t n = key.n_rows;
    // Section-major when a token has several positions; text repeats its
    // position in all but the last section, which stays 0 (llama.cpp's rule).
    const int64_t sections = hp.n_pos_per_token;
    positions_.assign((size_t) (n * sections), 0);
    int64_t row0 = 0;
    for (const Segment & seg : segments) {
        const int64_t pos0 = body_.kv.seq_len(seg.seq);
        for (int64_t s = 0; s < std::max<int64_t>(1, sections - 1); ++s) {
            const auto first = positions_.begin() + s * n + row0;
            if (body_.writes_kv) {
                std::iota(first, first + seg.n_rows, (int32_t) pos0);
            } else {
                std::fill(first, first + seg.n_rows, (int32_t) pos0);
            }
        }
        if (body_.writes_kv) body_.kv.advance(seg.n_rows, seg.seq);
        row0 += seg.n_rows;
    }
    set_input(g.tokens, tokens);
    set_input(g.positions, positions_.data());
    set_input(g.hidden_in, hidden_in);
    if (g.out_rows) {
        const int32_t last = (int32_t) (n - 1);
        set_input(g.out_rows, out_rows ? out_rows : &last);
    }
    fill_attention_inputs(g.full, segments, n);
    if (g.swa.mask) fill_attention_inputs(g.swa, segments, n);
    return g;
}

void GraphRunner::compute(CachedGraph & g) {
    if (g.sched) {
        if (ggml_backend_sched_graph_compute(g.sched, g.graph) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("graph compute failed on " + device_name() + " and its RPC workers");
        }
        ++computes_;
        return;
    }
    if (!body_.per_op) {
        if (ggml_backend_graph_compute(backend_, g.graph) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("graph compute failed on " + device_name());
        }
        ++computes_;
        return;
    }
    if (!single_) {
        ggml_init_params params = {ggml_graph_overhead_custom(1, false), nullptr, true};
        single_ctx_.reset(ggml_init(params));
        single_ = ggml_new_graph_custom(single_ctx_.get(), 1, false);
    }
    for (int i = 0; i < ggml_graph_n_nodes(g.graph); ++i) {
        ggml_graph_clear(single_);
        ggml_graph_add_node(single_, ggml_graph_node(g.graph, i));
        if (ggml_backend_graph_compute(backend_, single_) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("graph compute failed on " + device_name());
        }
    }
    ++computes_;
}

void GraphRunner::read_outputs(const CachedGraph & g, const GraphKey & key, int64_t row0, int64_t out_row0,
                          const ForwardOutputs & out) const {
    const Hparams & hp = body_.hp;
    if (g.hidden && out.hidden) {
        const int64_t width = g.hidden->ne[0];  // the taps' widths, concatenated
        ggml_backend_tensor_get(g.hidden, out.hidden + row0 * width, 0, ggml_nbytes(g.hidden));
    }
    if (g.logits && out.logits) {
        ggml_backend_tensor_get(g.logits, out.logits + out_row0 * hp.n_vocab, 0, ggml_nbytes(g.logits));
    }
    if (g.ids && out.ids) {
        const int k = key.top_k;
        std::vector<int32_t> ids((size_t) (k * key.n_out));
        std::vector<float> values(ids.size());
        ggml_backend_tensor_get(g.ids, ids.data(), 0, ggml_nbytes(g.ids));
        ggml_backend_tensor_get(g.values, values.data(), 0, ggml_nbytes(g.values));
        order_top_k(ids.data(), values.data(), key.n_out, k);
        std::copy(ids.begin(), ids.end(), out.ids + out_row0 * k);
        if (out.values) std::copy(values.begin(), values.end(), out.values + out_row0 * k);
    }
}

void order_top_k(int32_t * ids, float * values, int64_t rows, int k) {
    std::vector<int> order((size_t) k);
    std::vector<int32_t> row_ids((size_t) k);
    std::vector<float> row_values((size_t) k);
    for (int64_t r = 0; r < rows; ++r) {
        int32_t * rid = ids + r * k;
        float * rval = values + r * k;
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) {
            return rval[a] != rval[b] ? rval[a] > rval[b] : rid[a] < rid[b];
        });
        for (int j = 0; j < k; ++j) {
            row_ids[j] = rid[order[j]];
            row_values[j] = rval[order[j]];
        }
        std::copy(row_ids.begin(), row_ids.end(), rid);
        std::copy(row_values.begin(), row_values.end(), rval);
    }
}

}  // namespace ggspec
