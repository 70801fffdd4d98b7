#include "models/delta_net.h"

#include <cmath>

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

    ggml_tensor * qkv = ggml_reshape_3d(ctx, g.matmul(l.ssm_in, x), channels, n, 1);
    ggml_tensor * z = ggml_reshape_4d(ctx, g.matmul(l.ssm_z, x), dk, hv, n, 1);
    ggml_tensor * beta = ggml_sigmoid(ctx, ggml_reshape_4d(ctx, g.matmul(l.ssm_beta, x), 1, hv, n, 1));
    // The log-decay per head and row: softplus(alpha + dt_bias) * -exp(A_log) <= 0.
    ggml_tensor * decay = ggml_mul(ctx, ggml_softplus(ctx, ggml_add(ctx, g.matmul(l.ssm_alpha, x), l.ssm_dt)), l.ssm_a);
    decay = ggml_reshape_4d(ctx, decay, 1, hv, n, 1);

    // The conv sees its kept Kc-1 inputs, then this forward's rows.
    ggml_tensor * conv_state = ggml_reshape_3d(ctx, g.rs->conv(il), hp.ssm_conv_kernel - 1, channels, 1);
    ggml_tensor * conv_input = ggml_concat(ctx, conv_state, ggml_transpose(ctx, qkv), 0);  // [Kc-1+n, channels]
    ggml_tensor * conv = ggml_silu(ctx, ggml_ssm_conv(ctx, conv_input, l.ssm_conv1d));   // [channels, n, 1]

    auto heads = [&](int64_t n_heads, int64_t first_channel) {
        return ggml_view_4d(ctx, conv, dk, n_heads, n, 1, dk * f, channels * f, channels * n * f, first_channel * f);
    };
    ggml_tensor * q = l2_norm(ctx, heads(hk, 0), hp.rms_eps);
    ggml_tensor * k = l2_norm(ctx, heads(hk, hp.ssm_k_dim()), hp.rms_eps);
    ggml_tensor * v = heads(hv, 2 * hp.ssm_k_dim());

    ggml_tensor * state = ggml_reshape_4d(ctx, g.rs->ssm(il), dk, dk, hv, 1);
    ggml_tensor * result = ggml_gated_delta_net(ctx, q, k, v, decay, beta, state, g.state_slots);
    ggml_set_output(result);  // read again after the forward, by a rollback
    ggml_set_output(conv_input);
    const StateSources sources{il, result, conv_input, g.state_slots};
    g.state_sources.push_back(sources);
    if (g.writes_state) {
        const StateViews after = state_after_row(ctx, hp, sources, n, n - 1);
        g.writes.push_back(ggml_cpy(ctx, after.ssm, g.rs->ssm(il)));
        g.writes.push_back(ggml_cpy(ctx, after.conv, g.rs->conv(il)));
    }

    ggml_tensor * o = ggml_view_4d(ctx, result, dk, hv, n, 1, dk * f, dk * hv * f, dk * hv * n * f, 0);
    ggml_tensor * y = ggml_mul(ctx, rms_norm(g, o, l.ssm_norm), ggml_silu(ctx, z));
    return g.matmul(l.ssm_out, ggml_reshape_2d(ctx, y, hp.ssm_v_dim(), n));
}

}  // namespace ggspec
