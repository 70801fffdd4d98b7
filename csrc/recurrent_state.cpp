#include "recurrent_state.h"

#include "ggml-cpp.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "buffers.h"

namespace ggspec {

RecurrentState::RecurrentState(const LayerBufts & bufts, const Hparams & hp, int64_t n_seqs)
    : hp_(hp) {
    const size_t n = (size_t) (n_seqs * hp.n_layer);
    conv_.assign(n, nullptr);
    ssm_.assign(n, nullptr);
    for (int64_t seq = 0; seq < n_seqs; ++seq) {
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            if (!hp.recurrent(il)) continue;
            const size_t i = (size_t) (seq * hp.n_layer + il);
            ggml_context * ctx = tensors_.context_for(bufts[il], 2 * n);
            conv_[i] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_conv_kernel - 1, hp.ssm_conv_channels());
            ssm_[i] = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hp.ssm_head_dim, hp.ssm_head_dim, hp.ssm_v_heads);
            ggml_format_name(conv_[i], "conv_state_l%d_s%d", (int) il, (int) seq);
            ggml_format_name(ssm_[i], "ssm_state_l%d_s%d", (int) il, (int) seq);
        }
    }
    tensors_.allocate("the recurrent state");
    clear();
}

void RecurrentState::clear() { tensors_.clear(0); }

void RecurrentState::clear(int64_t seq) {
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {conv(il, seq), ssm(il, seq)}) {
            if (t) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
        }
    }
}

size_t RecurrentState::bytes() const { return tensors_.bytes(); }

size_t RecurrentState::row_bytes(const Hparams & hp) {
    size_t per_row = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        if (hp.recurrent(il)) per_row += sizeof(float) * (size_t) (hp.ssm_head_dim * hp.ssm_head_dim * hp.ssm_v_heads);
    }
    return per_row;
}

size_t RecurrentState::seq_bytes() const {
    size_t bytes = 0;
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {conv(il, 0), ssm(il, 0)}) {
            if (t) bytes += ggml_nbytes(t);
        }
    }
    return bytes;
}

void RecurrentState::download(uint8_t * host, int64_t seq) const {
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {conv(il, seq), ssm(il, seq)}) {
            if (!t) continue;
            ggml_backend_tensor_get(t, host, 0, ggml_nbytes(t));
            host += ggml_nbytes(t);
        }
    }
}

void RecurrentState::upload(const uint8_t * host, int64_t seq) {
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
        for (ggml_tensor * t : {conv(il, seq), ssm(il, seq)}) {
            if (!t) continue;
            ggml_backend_tensor_set(t, host, 0, ggml_nbytes(t));
            host += ggml_nbytes(t);
        }
    }
}

StateViews state_after_row(ggml_context * ctx, const Hparams & hp, const StateSources & src, int64_t n_rows,
                           int64_t row) {
    // Slot j of the delta net's result holds the state after row n_rows-1-j;
    // the graph kept K = op_params[0] of them.
    const int64_t slot = n_rows - 1 - row;
    if (row < 0 || slot < 0 || slot >= src.kept_rows) {
        throw std::logic_error("the state after row " + std::to_string(row) + " of " + std::to_string(n_rows) +
                               " was not kept (" + std::to_string(src.kept_rows) + " slots)");
    }
    const int64_t dk = hp.ssm_head_dim, hv = hp.ssm_v_heads;
    const size_t ssm_offset = sizeof(float) * (size_t) (dk * hv * n_rows + slot * dk * dk * hv);
    StateViews v;
    v.ssm = ggml_view_1d(ctx, src.delta_net, dk * dk * hv, ssm_offset);
    // The conv window after row r: inputs r+1 .. r+Kc-1 of [state | rows].
    v.conv = ggml_view_2d(ctx, src.conv_input, hp.ssm_conv_kernel - 1, hp.ssm_conv_channels(), src.conv_input->nb[1],
                          sizeof(float) * (size_t) (row + 1));
    return v;
}

StateCommitGraph::StateCommitGraph(const std::vector<ggml_backend_t> & backends, const RecurrentState & rs,
                                   const std::vector<StateSources> & sources, int64_t seq, int64_t n_rows,
                                   int64_t row) {
    for (const StateSources & forward : sources) {
        if (forward.seq != seq) continue;
        // The device whose memory holds this layer's results and state (a split
        // target's worker): its copies run there, as a graph of their own.
        ggml_backend_t on = backend_holding(backends, forward.delta_net->buffer);
        if (!on) throw std::logic_error("no backend holds a recurrent layer's state");
        auto part = std::find_if(parts_.begin(), parts_.end(), [&](const Part & p) { return p.backend == on; });
        if (part == parts_.end()) {
            const size_t max_nodes = 8 * sources.size() + 8;  // two aliases, two views, two copies per layer
            ggml_init_params params = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false),
                                       nullptr, true};
            Part p;
            p.backend = on;
            p.ctx.reset(ggml_init(params));
            p.graph = ggml_new_graph_custom(p.ctx.get(), max_nodes, false);
            part = parts_.insert(parts_.end(), std::move(p));
        }
        ggml_context * ctx = part->ctx.get();
        // Leaves that alias the forward's results: a view of the results themselves
        // would pull the whole forward into this graph.
        auto alias = [&](ggml_tensor * t) {
            ggml_tensor * a = ggml_dup_tensor(ctx, t);
            if (ggml_backend_tensor_alloc(t->buffer, a, t->data) != GGML_STATUS_SUCCESS) {
                throw std::runtime_error("cannot alias a forward's recurrent state");
            }
            return a;
        };
        const StateSources src{forward.il, seq, alias(forward.delta_net), alias(forward.conv_input),
                               forward.kept_rows};
        const StateViews v = state_after_row(ctx, rs.hparams(), src, n_rows, row);
        ggml_build_forward_expand(part->graph, ggml_cpy(ctx, v.ssm, rs.ssm(src.il, seq)));
        ggml_build_forward_expand(part->graph, ggml_cpy(ctx, v.conv, rs.conv(src.il, seq)));
    }
    for (Part & p : parts_) {
        p.allocator.reset(ggml_gallocr_new(ggml_backend_get_default_buffer_type(p.backend)));
        allocate_graph(p.allocator.get(), p.graph, "a state commit graph");
    }
}

void StateCommitGraph::run() {
    for (Part & p : parts_) {
        if (ggml_backend_graph_compute(p.backend, p.graph) != GGML_STATUS_SUCCESS) {
            throw std::runtime_error("recurrent state commit failed");
        }
    }
}

size_t commit_state_through_host(RecurrentState & rs, const std::vector<StateSources> & sources, int64_t seq,
                                 int64_t n_rows, int64_t row) {
    const Hparams & hp = rs.hparams();
    const int64_t window = hp.ssm_conv_kernel - 1, channels = hp.ssm_conv_channels();
    size_t moved = 0;
    std::vector<float> host, window_rows((size_t) (window * channels));
    ggml_init_params params = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context_ptr views(ggml_init(params));  // offsets only; nothing is computed in it
    ggml_context * ctx = views.get();
    for (const StateSources & src : sources) {
        if (src.seq != seq) continue;
        const StateViews v = state_after_row(ctx, hp, src, n_rows, row);
        host.resize((size_t) ggml_nelements(v.ssm));
        ggml_backend_tensor_get(src.delta_net, host.data(), v.ssm->view_offs, ggml_nbytes(v.ssm));
        ggml_backend_tensor_set(rs.ssm(src.il, seq), host.data(), 0, ggml_nbytes(v.ssm));

        const int64_t width = src.conv_input->ne[0];
        host.resize((size_t) (width * channels));
        ggml_backend_tensor_get(src.conv_input, host.data(), 0, ggml_nbytes(src.conv_input));
        for (int64_t c = 0; c < channels; ++c) {
            std::memcpy(&window_rows[c * window], &host[c * width + row + 1], sizeof(float) * window);
        }
        ggml_backend_tensor_set(rs.conv(src.il, seq), window_rows.data(), 0, ggml_nbytes(rs.conv(src.il, seq)));
        moved += 2 * ggml_nbytes(v.ssm) + ggml_nbytes(src.conv_input) + ggml_nbytes(rs.conv(src.il, seq));
        ggml_reset(ctx);
    }
    return moved;
}

}  // namespace ggspec
