"""The first oracle for llama.cpp's `qwen35` architecture (Qwen 3.5 dense) and its
`qwen35moe` variant: a NumPy forward pass of the hybrid trunk and of its MTP/NextN
block, over a GGUF file.

It follows llama.cpp's src/models/qwen35.cpp and delta-net-base.cpp and ggml's CPU
`gated_delta_net` and `ssm_conv`, and knows nothing of ggspec's C++ code. Weight
products, RMSNorms, RoPE, softmax attention and SiLU reuse numpy_model's bit-exact
emulations of ggml's CPU kernels; the GatedDeltaNet recurrence, the conv, the
sigmoid and softplus are plain float32 NumPy, so comparisons with it use a
tolerance.

    trunk layer:  h = x + mixer(rmsnorm(x) * attn_norm);  x' = h + ffn(rmsnorm(h) * post_attention_norm)
    mixer, attention (every full_attention_interval-th layer, or per attention.recurrent_layers):
                  q|gate = per head halves of attn_q x; q, k RMSNormed per head, then NEOX RoPE over the
                  first rope.dimension_count dims (llama.cpp's IMROPE with text positions t = h = w);
                  out = attn_output(softmax(q k^T / sqrt(D)) v * sigmoid(gate))
    mixer, GatedDeltaNet: qkv = attn_qkv x (rows q | k | v), z = attn_gate x,
                  beta = sigmoid(ssm_beta x), g = softplus(ssm_alpha x + ssm_dt.bias) * ssm_a;
                  conv: causal depthwise over [conv state (Kc-1 columns) | qkv], then SiLU;
                  q, k L2-normed; value head h reads key head h % n_k_heads (llama.cpp's tiled order);
                  per head, per token: S *= exp(g); d = (v - S^T k) * beta; S += k d^T; o = S^T q / sqrt(dk);
                  out = ssm_out(rmsnorm(o) * ssm_norm * silu(z))
    MTP block (blk.n_layer): u = eh_proj([rmsnorm(embed(tok_p)) * enorm ; rmsnorm(h_{p-1}) * hnorm]),
                  one attention layer + FFN as above, hout = rmsnorm(u) * (shared_head_norm or output_norm),
                  logits = (shared_head_head or output or token_embd) hout.
    ffn, qwen35moe (llama.cpp's build_moe_ffn, softmax gating, weights normalized): p = softmax(ffn_gate_inp x);
                  the n_expert_used largest p, renormalized to sum 1, weight their experts'
                  down_e(silu(gate_e x) * up_e x), summed best first; plus the shared expert
                  down_s(silu(gate_s x) * up_s x) * sigmoid(ffn_gate_inp_shexp . x).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from gguf import GGUFReader

from tests.reference import ggml_cpu
from tests.reference.hparams import REQUIRED, read_key
from tests.reference.numpy_model import ReferenceModel, attention, attention_mask, rms_norm, rope


@dataclass(frozen=True)
class Qwen35HParams:
    n_vocab: int
    n_embd: int
    n_layer: int  # trunk layers; the MTP blocks follow them
    n_nextn: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    n_ff: int
    rms_eps: float
    rope_freq_base: float
    recurrent: tuple[bool, ...]  # per trunk layer
    conv_kernel: int
    ssm_state: int   # dk: key and value head size of the GDN layers
    ssm_groups: int  # key heads
    ssm_v_heads: int
    n_expert_used: int  # 0: dense FFNs (qwen35)


def read_qwen35_hparams(reader: GGUFReader) -> Qwen35HParams:
    arch = reader.get_field("general.architecture").contents()

    def get(key: str, default=REQUIRED):
        return read_key(reader, f"{arch}.{key}", default)

    n_blocks = get("block_count")
    n_nextn = get("nextn_predict_layers", 0)
    n_layer = n_blocks - n_nextn
    n_embd, n_head = get("embedding_length"), get("attention.head_count")
    head_dim = get("attention.key_length", n_embd // n_head)
    flags = reader.get_field(f"{arch}.attention.recurrent_layers")
    if flags is not None:
        recurrent = tuple(bool(f) for f in flags.contents()[:n_layer])
    else:
        interval = get("full_attention_interval", 4)
        recurrent = tuple((i + 1) % interval != 0 for i in range(n_layer))
    return Qwen35HParams(
        n_vocab=len(reader.get_field("tokenizer.ggml.tokens").contents()), n_embd=n_embd, n_layer=n_layer,
        n_nextn=n_nextn, n_head=n_head, n_head_kv=get("attention.head_count_kv", n_head), head_dim=head_dim,
        n_rot=get("rope.dimension_count", head_dim), n_ff=get("feed_forward_length"),
        rms_eps=get("attention.layer_norm_rms_epsilon"), rope_freq_base=get("rope.freq_base", 10000.0),
        recurrent=recurrent, conv_kernel=get("ssm.conv_kernel"), ssm_state=get("ssm.state_size"),
        ssm_groups=get("ssm.group_count"), ssm_v_heads=get("ssm.time_step_rank"),
        n_expert_used=get("expert_used_count", 0))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (np.float32(1) / (np.float32(1) + np.exp(-np.asarray(x, np.float32)))).astype(np.float32)


def softplus(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))).astype(np.float32)


def l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """llama.cpp's build_gdn_l2_norm: rms_norm(x, eps / n) / sqrt(n) = x / sqrt(sum(x^2) + eps)."""
    n = x.shape[-1]
    return rms_norm(x, np.float32(1), eps / n) * np.float32(1 / np.sqrt(n))


def ssm_conv(window: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """ggml_ssm_conv: window [C, Kc - 1 + T] (state columns, then the new rows), weight [C, Kc] -> [T, C]."""
    kc = weight.shape[1]
    n_tokens = window.shape[1] - (kc - 1)
    return np.stack([np.sum(window[:, t:t + kc] * weight, axis=1, dtype=np.float32) for t in range(n_tokens)])


def gated_delta_net(q, k, v, g, beta, state):
    """ggml_gated_delta_net for one sequence. q, k [T, Hk, dk]; v [T, Hv, dk]; g, beta [T, Hv];
    state [Hv, dk, dk] as S[i = k index][j = v index]. Returns (out [T, Hv, dk], states
    [T, Hv, dk, dk]: the state after each token)."""
    n_tokens, n_v_heads, dk = v.shape
    n_k_heads = q.shape[1]
    scale = np.float32(1 / np.sqrt(np.float32(dk)))
    s = np.array(state, dtype=np.float32)
    out = np.zeros_like(v, dtype=np.float32)
    states = np.zeros((n_tokens,) + s.shape, np.float32)
    for t in range(n_tokens):
        for h in range(n_v_heads):
            kh = h % n_k_heads
            s[h] *= np.exp(np.float32(g[t, h]))
            delta = (v[t, h] - s[h].T @ k[t, kh]) * np.float32(beta[t, h])
            s[h] += np.outer(k[t, kh], delta)
            out[t, h] = (s[h].T @ q[t, kh]) * scale
        states[t] = s
    return out, states


def routed_experts(model: ReferenceModel, blk: str, cur: np.ndarray, logits: np.ndarray, n_expert_used: int,
                   activation=ggml_cpu.silu) -> np.ndarray:
    """llama.cpp's build_moe_ffn with softmax gating and normalized weights (norm_w, w_scale 1),
    no biases, each row [T, n_embd] of cur its own experts, from the router's logits [T, n_expert]
    (n_expert a multiple of 8, as ggml_cpu.soft_max sums it): p = softmax(logits); the
    n_expert_used largest p (ggml_argsort_top_k: a descending std::sort, whose insertion sort
    keeps ties in index order up to 16 experts); their p over their sum (ggml_sum_rows sums in
    double, then rounds to f32; clamped to 6.103515625e-5) weight their experts'
    down_e(activation(gate_e cur) * up_e cur), each times ffn_down_exps.scale[e] first when the
    file has it (build_lora_mm_id), summed best first. gate_e and up_e are
    ffn_gate_exps[e] and ffn_up_exps[e], or the halves of ffn_gate_up_exps[e].
    activation: ggml_cpu.silu (LLM_FFN_SILU: ggml_swiglu_split) or ggml_cpu.gelu_f16_table
    (LLM_FFN_GELU: ggml_geglu_split)."""
    w = model.weights
    probs = ggml_cpu.soft_max(logits, np.float32(1), np.zeros(logits.shape, bool))
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :n_expert_used]
    fused = blk + "ffn_gate_up_exps.weight" in w
    down_scale = w.get(blk + "ffn_down_exps.scale")
    routed = np.zeros_like(cur)
    for t, experts in enumerate(chosen):
        weights = probs[t, experts]
        weights = weights / max(np.float32(weights.sum(dtype=np.float64)), np.float32(6.103515625e-5))
        row = cur[t:t + 1]
        for rank, e in enumerate(experts):
            if fused:
                gate, up = np.split(model._matmul(row, f"{blk}ffn_gate_up_exps.weight[{e}]"), 2, axis=-1)
            else:
                gate = model._matmul(row, f"{blk}ffn_gate_exps.weight[{e}]")
                up = model._matmul(row, f"{blk}ffn_up_exps.weight[{e}]")
            out = model._matmul(activation(gate) * up, f"{blk}ffn_down_exps.weight[{e}]")[0]
            if down_scale is not None:
                out = out * down_scale[e]
            out = out * weights[rank]
            routed[t] = out if rank == 0 else routed[t] + out
    return routed


@dataclass
class RecurrentState:
    """One GDN layer's state between forwards: the conv window and the delta-rule state."""
    conv: np.ndarray  # [C, Kc - 1]: the last Kc - 1 conv inputs
    ssm: np.ndarray   # [Hv, dk, dk]


class Qwen35Reference(ReferenceModel):
    def __init__(self, path: str | Path):
        reader = GGUFReader(path)
        self.hparams = read_qwen35_hparams(reader)
        self._load_tensors(reader)

    def initial_state(self) -> list[RecurrentState | None]:
        hp = self.hparams
        conv_dim = hp.ssm_state * (2 * hp.ssm_groups + hp.ssm_v_heads)
        return [RecurrentState(np.zeros((conv_dim, hp.conv_kernel - 1), np.float32),
                               np.zeros((hp.ssm_v_heads, hp.ssm_state, hp.ssm_state), np.float32))
                if recurrent else None for recurrent in hp.recurrent]

    def forward(self, tokens: list[int]) -> tuple[np.ndarray, dict]:
        """Logits [T, n_vocab] and hidden states of tokens at positions 0..T-1 from an empty
        state: hidden[il] is the input of layer il, hidden["final"] the output of the final
        norm (the MTP head's input), hidden["states"] each GDN layer's state after each token
        ([T] lists of RecurrentState, None for attention layers)."""
        hp, w = self.hparams, self.weights
        tokens = np.asarray(tokens, dtype=np.int64)
        x = w["token_embd.weight"][tokens]
        masked = attention_mask(len(tokens), 0)
        hidden: dict = {"states": []}
        for il in range(hp.n_layer):
            hidden[il] = x
            cur = rms_norm(x, w[f"blk.{il}.attn_norm.weight"], hp.rms_eps)
            if hp.recurrent[il]:
                mixed, states = self._gdn(il, cur, self.initial_state()[il])
                hidden["states"].append(states)
            else:
                mixed = self._attention(il, cur, masked)
                hidden["states"].append(None)
            x = self._ffn(il, x + mixed)
        final = rms_norm(x, w["output_norm.weight"], hp.rms_eps)
        hidden["final"] = final
        return self._matmul(final, self._lm_head()), hidden

    def mtp_forward(self, tokens: list[int], prev_hidden: np.ndarray,
                    unseen: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """The MTP block over rows at positions 0..T-1 (its own causal attention): row p
        reads token p and prev_hidden[p] (the trunk's final hidden at position p - 1, or the
        head's own output for a chained draft). Returns logits [T, n_vocab] and hout [T, n_embd].
        unseen: positions the other rows' attention skips (a head that skipped them)."""
        hp, w = self.hparams, self.weights
        blk = f"blk.{hp.n_layer}."
        embd = w.get(blk + "nextn.embed_tokens.weight", w["token_embd.weight"])[np.asarray(tokens)]
        u = np.concatenate([rms_norm(embd, w[blk + "nextn.enorm.weight"], hp.rms_eps),
                            rms_norm(prev_hidden, w[blk + "nextn.hnorm.weight"], hp.rms_eps)], axis=-1)
        u = self._matmul(u, blk + "nextn.eh_proj.weight")
        cur = rms_norm(u, w[blk + "attn_norm.weight"], hp.rms_eps)
        masked = attention_mask(len(tokens), 0)
        masked[:, list(unseen)] = True
        np.fill_diagonal(masked, False)
        u = self._ffn(hp.n_layer, u + self._attention(hp.n_layer, cur, masked))
        hout = rms_norm(u, w.get(blk + "nextn.shared_head_norm.weight", w["output_norm.weight"]), hp.rms_eps)
        head = blk + "nextn.shared_head_head.weight"
        return self._matmul(hout, head if head in w else self._lm_head()), hout

    def _lm_head(self) -> str:
        return "output.weight" if "output.weight" in self.weights else "token_embd.weight"

    def _ffn(self, il: int, h: np.ndarray) -> np.ndarray:
        w, blk = self.weights, f"blk.{il}."
        cur = rms_norm(h, w[blk + "post_attention_norm.weight"], self.hparams.rms_eps)
        if self.hparams.n_expert_used:
            return h + self._experts(blk, cur)
        return h + self._gated_ffn(cur, blk + "ffn_gate.weight", blk + "ffn_up.weight", blk + "ffn_down.weight")

    def _gated_ffn(self, cur: np.ndarray, gate: str, up: str, down: str) -> np.ndarray:
        return self._matmul(ggml_cpu.silu(self._matmul(cur, gate)) * self._matmul(cur, up), down)

    def _experts(self, blk: str, cur: np.ndarray) -> np.ndarray:
        """The routed experts, each row's own, plus the gated shared expert."""
        w = self.weights
        logits = self._matmul(cur, blk + "ffn_gate_inp.weight")
        routed = routed_experts(self, blk, cur, logits, self.hparams.n_expert_used, ggml_cpu.silu)
        shared = self._gated_ffn(cur, blk + "ffn_gate_shexp.weight", blk + "ffn_up_shexp.weight",
                                 blk + "ffn_down_shexp.weight")
        shared_gate = sigmoid(ggml_cpu.dot_f32(w[blk + "ffn_gate_inp_shexp.weight"][None], cur))
        return routed + shared * shared_gate

    def _attention(self, il: int, cur: np.ndarray, masked: np.ndarray) -> np.ndarray:
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        n_pos, d = cur.shape[0], hp.head_dim
        qg = self._matmul(cur, blk + "attn_q.weight").reshape(n_pos, hp.n_head, 2 * d)
        q, gate = qg[..., :d], qg[..., d:].reshape(n_pos, hp.n_head * d)
        k = self._matmul(cur, blk + "attn_k.weight").reshape(n_pos, hp.n_head_kv, d)
        v = self._matmul(cur, blk + "attn_v.weight").reshape(n_pos, hp.n_head_kv, d)
        q = rope(rms_norm(q, w[blk + "attn_q_norm.weight"], hp.rms_eps), hp.n_rot, "neox", hp.rope_freq_base, 1.0)
        k = rope(rms_norm(k, w[blk + "attn_k_norm.weight"], hp.rms_eps), hp.n_rot, "neox", hp.rope_freq_base, 1.0)
        attn = attention(q, k, v, np.float32(1 / np.sqrt(np.float32(d))), masked)
        return self._matmul(attn * sigmoid(gate), blk + "attn_output.weight")

    def _gdn(self, il: int, cur: np.ndarray, state: RecurrentState) -> tuple[np.ndarray, list[RecurrentState]]:
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        n_pos, dk, hk, hv = cur.shape[0], hp.ssm_state, hp.ssm_groups, hp.ssm_v_heads
        qkv = self._matmul(cur, blk + "attn_qkv.weight")  # [T, C]
        z = self._matmul(cur, blk + "attn_gate.weight").reshape(n_pos, hv, dk)
        beta = sigmoid(self._matmul(cur, blk + "ssm_beta.weight"))
        g = softplus(self._matmul(cur, blk + "ssm_alpha.weight") + w[blk + "ssm_dt.bias"]) * w[blk + "ssm_a"]
        window = np.concatenate([state.conv, qkv.T], axis=1)  # [C, Kc - 1 + T]
        conv = ggml_cpu.silu(ssm_conv(window, w[blk + "ssm_conv1d.weight"]))
        key_dim = dk * hk
        q = l2_norm(conv[:, :key_dim].reshape(n_pos, hk, dk), hp.rms_eps)
        k = l2_norm(conv[:, key_dim:2 * key_dim].reshape(n_pos, hk, dk), hp.rms_eps)
        v = conv[:, 2 * key_dim:].reshape(n_pos, hv, dk)
        o, ssm_states = gated_delta_net(q, k, v, g, beta, state.ssm)
        y = rms_norm(o, w[blk + "ssm_norm.weight"], hp.rms_eps) * ggml_cpu.silu(z)
        kc = hp.conv_kernel
        states = [RecurrentState(window[:, t + 1:t + kc], ssm_states[t]) for t in range(n_pos)]
        return self._matmul(y.reshape(n_pos, hv * dk), blk + "ssm_out.weight"), states
