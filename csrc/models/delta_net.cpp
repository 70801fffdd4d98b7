#include "models/delta_net.h"

#include <cmath>
#include <stdexcept>

#include "models/layers.h"

namespace ggspec {

namespace {

// x / sqrt(sum(x^2) + eps) per row, in llama.cpp's form (an RMS norm rescaled)
// so that both engines round the same way.
ggml_tensor * l2_norm(ggml_context * ctx, ggml_tensor * x, float eps) {
    const float n = (float) x->ne[0];
    return ggml_scale(ctx, ggml_rms_norm(ctx, x, eps / n), 1.0f / std::sqrt(n));
}

}  // namespace

ggml_tensor * delta_net(ForwardGraph & g, int64_t il, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const Hparams & hp = g.hp;
    const LayerWeights & l = g.w.layers[il];
    const int64_t n = g.n_rows, dk = hp.ssm_head_dim, hk = hp.ssm_k_heads, hv = hp.ssm_v_heads;
    const int64_t channels = hp.ssm_conv_channels();
    const size_t f = sizeof(float);

    // The products run over every sequence's rows at once (each row's bits are its own).
    const std::vector<ggml_tensor *> in = g.matmuls({l.ssm_in, l.ssm_z, l.ssm_beta, l.ssm_alpha}, x);
    ggml_tensor * qkv = ggml_reshape_3d(ctx, in[0], channels, n, 1);
    ggml_tensor * z = ggml_reshape_4d(ctx, in[1], dk, hv, n, 1);
    ggml_tensor * beta = ggml_sigmoid(ctx, ggml_reshape_4d(ctx, in[2], 1, hv, n, 1));
    // The log-decay per head and row: softplus(alpha + dt_bias) * -exp(A_log) <= 0.
    ggml_tensor * decay = ggml_mul(ctx, ggml_softplus(ctx, ggml_add(ctx, in[3], l.ssm_dt)), l.ssm_a);
    decay = ggml_reshape_4d(ctx, decay, 1, hv, n, 1);

    // The recurrence runs per sequence, on its own state, exactly as that
    // sequence alone would run it; one sequence takes the tensors whole.
    if (g.recurrent.empty()) throw std::logic_error("a recurrent layer's graph key names no sequence's rows");
    const bool whole = g.recurrent.size() == 1;
    ggml_tensor * o = nullptr;  // [dk, hv, n, 1]
    int64_t row0 = 0;
    for (const RecurrentSegment & seg : g.recurrent) {
        const int64_t m = seg.n_rows;
        auto rows = [&](ggml_tensor * t) {  // rows [row0, row0 + m) of a [.., .., n, 1] tensor
            return whole ? t : ggml_cont(ctx, ggml_view_4d(ctx, t, t->ne[0], t->ne[1], m, 1, t->nb[1], t->nb[2],
                                                            t->nb[3], row0 * t->nb[2]));
        };
        ggml_tensor * seg_qkv = whole ? qkv : ggml_view_3d(ctx, qkv, channels, m, 1, qkv->nb[1], qkv->nb[2],
                                                             row0 * qkv->nb[1]);
        // The conv sees the sequence's kept Kc-1 inputs, then its rows. The
        // state tensors are read as they are, [Kc-1, channels, 1] and [dk, dk,
        // hv, 1], not through reshape nodes: a view node joins whatever split
        // of ggml's scheduler precedes it, which on a split target can be
        // another worker's (which then cannot resolve it).
        ggml_tensor * conv_input = ggml_concat(ctx, g.rs->conv(il, seg.seq), ggml_transpose(ctx, seg_qkv), 0);
        ggml_tensor * conv = ggml_silu(ctx, ggml_ssm_conv(ctx, conv_input, l.ssm_conv1d));       // [channels, m, 1]

        auto heads = [&](int64_t n_heads, int64_t first_channel) {
            return ggml_view_4d(ctx, conv, dk, n_heads, m, 1, dk * f, channels * f, channels * m * f,
                                first_channel * f);
        };
        ggml_tensor * q = l2_norm(ctx, heads(hk, 0), hp.rms_eps);
        ggml_tensor * k = l2_norm(ctx, heads(hk, hp.ssm_k_dim()), hp.rms_eps);
        ggml_tensor * v = heads(hv, 2 * hp.ssm_k_dim());

        ggml_tensor * result =
            ggml_gated_delta_net(ctx, q, k, v, rows(decay), rows(beta), g.rs->ssm(il, seg.seq), seg.state_slots);
        ggml_set_output(result);  // read again after the forward, by a rollback
        ggml_set_output(conv_input);
        const StateSources sources{il, seg.seq, result, conv_input, seg.state_slots};
        g.state_sources.push_back(sources);
        if (seg.writes_state) {
            const StateViews after = state_after_row(ctx, hp, sources, m, m - 1);
            g.writes.push_back(ggml_cpy(ctx, after.ssm, g.rs->ssm(il, seg.seq)));
            g.writes.push_back(ggml_cpy(ctx, after.conv, g.rs->conv(il, seg.seq)));
        }
        ggml_tensor * seg_o = ggml_view_4d(ctx, result, dk, hv, m, 1, dk * f, dk * hv * f, dk * hv * m * f, 0);
        o = o ? ggml_concat(ctx, o, seg_o, 2) : seg_o;
        row0 += m;
    }

    ggml_tensor * y = ggml_mul(ctx, rms_norm(g, o, l.ssm_norm), ggml_silu(ctx, z));
    return g.matmul(l.ssm_out, ggml_reshape_2d(ctx, y, hp.ssm_v_dim(), n));
}

}  // namespace ggspec
