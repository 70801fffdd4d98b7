"""The first oracle: an independent NumPy forward pass over a GGUF model file.

It follows llama.cpp's semantics for the llama, qwen3 and gemma3 architectures
(src/models/*.cpp there) and knows nothing of ggspec's C++ code, so ggspec's logits
and hidden states are checked against it. It runs the whole sequence from position 0
with causal attention, no KV cache, so it is simple rather than fast.

Precision: weights are dequantized once to float32 with gguf-py, and the matrix
products run in float32; everything between them (norms, rope, attention scores,
softmax, residual stream) is float64. The exact formulas are used where ggml rounds:
for a quantized weight ggml's CPU matmul first quantizes the activations (Q8_0/Q8_1,
or Q8_K for K-quants), for an f16 weight it rounds them to f16, and its GELU is an f16
table. Checked against llama.cpp (CPU, f32 KV cache): f32 llama/qwen3 models and an f32
copy of SmolLM2 agree to ~1e-5 in the logits, gemma3 to ~1e-2 (the GELU table);
quantized files differ by up to a few tenths of a logit, through activation rounding.

Per architecture:
    llama:  RMSNorm; rope NORMAL (adjacent pairs); GQA attention scaled 1/sqrt(head_dim);
            SwiGLU FFN down(silu(gate x) * up x); LM head = token_embd when output.weight is absent.
    qwen3:  llama plus per-head RMSNorm of q and k before rope; rope NEOX (x[i], x[i + n_rot/2]).
    gemma3: embeddings times sqrt(n_embd); per-head q/k RMSNorm, then NEOX rope; sliding-window
            layers (own rope base, no rope scaling, keys p0 hidden from p1 when p1 - p0 >= window);
            post-attention and post-FFN RMSNorms before each residual add; GELU(tanh) FFN;
            optional final logit soft-capping.
"""

from pathlib import Path

import numpy as np
from gguf import GGUFReader, quants

from tests.reference.hparams import HParams, read_hparams

_LAYER_TENSORS = {
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
}
_ARCH_LAYER_TENSORS = {
    "llama": set(),
    "qwen3": {"attn_q_norm", "attn_k_norm"},
    "gemma3": {"attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"},
}


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """ggml_rms_norm then the weight: over the last axis."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x: np.ndarray, n_rot: int, mode: str, freq_base: float, freq_scale: float) -> np.ndarray:
    """Rotate x [T, n_heads, head_dim] at positions 0..T-1, as ggml_rope_ext with ext_factor 0.

    Pair i (i < n_rot/2) turns by pos * freq_scale * freq_base^(-2i/n_rot); dims past
    n_rot are left as they are.
    """
    n_pos = x.shape[0]
    inv_freq = freq_base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    theta = (np.arange(n_pos, dtype=np.float64) * freq_scale)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    out = np.array(x, dtype=np.float64)
    if mode == "normal":
        x0, x1 = out[..., 0:n_rot:2].copy(), out[..., 1:n_rot:2].copy()
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    else:
        half = n_rot // 2
        x0, x1 = out[..., :half].copy(), out[..., half:n_rot].copy()
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    return out


def attention_mask(n_pos: int, n_swa: int) -> np.ndarray:
    """True where query p1 (row) must not see key p0 (column): the future, and with a
    window, keys with p1 - p0 >= n_swa (llama.cpp's LLAMA_SWA_TYPE_STANDARD)."""
    p1 = np.arange(n_pos)[:, None]
    p0 = np.arange(n_pos)[None, :]
    masked = p0 > p1
    if n_swa > 0:
        masked |= p1 - p0 >= n_swa
    return masked


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, masked: np.ndarray) -> np.ndarray:
    """softmax(scale * q k^T) v per head; q head h reads kv head h // (n_head / n_head_kv),
    as ggml's broadcasting matmul does. q [T, n_head, d], k/v [T, n_head_kv, d] -> [T, n_head * d_v]."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) * scale
    scores = np.where(masked[None, :, :], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.einsum("hts,shd->thd", probs, v)
    return out.reshape(out.shape[0], -1)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


class ReferenceModel:
    """A GGUF model held as dequantized float32 tensors, with a NumPy forward pass."""

    def __init__(self, model: str | Path | GGUFReader):
        # An open reader may be passed in: GGUFReader takes most of the load time on
        # large vocabularies (~25 s for Gemma 3's 262k tokens), so callers can share one.
        reader = model if isinstance(model, GGUFReader) else GGUFReader(model)
        self.hparams: HParams = read_hparams(reader)
        # np.array copies out of the file's memory map, once per tensor.
        self.weights = {t.name: np.array(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
                        for t in reader.tensors}
        self._check_tensor_names()

    def _check_tensor_names(self) -> None:
        """Refuse files with tensors this forward would silently ignore (biases, rope factors, ...)."""
        per_layer = _LAYER_TENSORS | _ARCH_LAYER_TENSORS[self.hparams.arch]
        known = {"token_embd.weight", "output_norm.weight", "output.weight"}
        known |= {f"blk.{i}.{name}.weight" for i in range(self.hparams.n_layer) for name in per_layer}
        unknown = sorted(set(self.weights) - known)
        if unknown:
            raise NotImplementedError(f"tensors not supported by the reference: {unknown[:8]}")
        missing = sorted(known - {"output.weight"} - set(self.weights))
        if missing:
            raise ValueError(f"model file lacks tensors: {missing[:8]}")

    def _matmul(self, x: np.ndarray, name: str) -> np.ndarray:
        """x @ W^T in float32, W stored [n_out, n_in] like ggml's mul_mat(W, x).

        Written as (W @ x^T)^T: with few rows, OpenBLAS runs that several times faster.
        """
        return (self.weights[name] @ x.astype(np.float32).T).T.astype(np.float64)

    def forward(self, tokens: list[int]) -> tuple[np.ndarray, dict]:
        """Logits [T, n_vocab] float32 and hidden states for tokens at positions 0..T-1.

        hidden[i] (i < n_layer) is the input of layer i, [T, n_embd]; hidden["final"] is
        the output of the final norm, the LM head's input. All float32.
        """
        hp = self.hparams
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= hp.n_vocab:
            raise ValueError(f"token ids must be in [0, {hp.n_vocab})")

        x = self.weights["token_embd.weight"][tokens].astype(np.float64) * hp.embd_scale
        hidden: dict = {}
        masks = {n_swa: attention_mask(len(tokens), n_swa) for n_swa in {0, hp.n_swa}}
        for il in range(hp.n_layer):
            hidden[il] = x.astype(np.float32)
            x = self._layer(il, x, masks[hp.n_swa if hp.is_swa[il] else 0])

        final = rms_norm(x, self.weights["output_norm.weight"], hp.rms_eps)
        hidden["final"] = final.astype(np.float32)
        logits = self._matmul(final, "output.weight" if "output.weight" in self.weights else "token_embd.weight")
        if hp.final_logit_softcapping:
            cap = hp.final_logit_softcapping
            logits = cap * np.tanh(logits / cap)
        return logits.astype(np.float32), hidden

    def _layer(self, il: int, x: np.ndarray, masked: np.ndarray) -> np.ndarray:
        hp, w = self.hparams, self.weights
        blk = f"blk.{il}."
        n_pos = x.shape[0]

        cur = rms_norm(x, w[blk + "attn_norm.weight"], hp.rms_eps)
        q = self._matmul(cur, blk + "attn_q.weight").reshape(n_pos, hp.n_head, hp.head_dim_k)
        k = self._matmul(cur, blk + "attn_k.weight").reshape(n_pos, hp.n_head_kv, hp.head_dim_k)
        v = self._matmul(cur, blk + "attn_v.weight").reshape(n_pos, hp.n_head_kv, hp.head_dim_v)
        if hp.arch in ("qwen3", "gemma3"):
            q = rms_norm(q, w[blk + "attn_q_norm.weight"], hp.rms_eps)
            k = rms_norm(k, w[blk + "attn_k_norm.weight"], hp.rms_eps)
        q = rope(q, hp.n_rot, hp.rope_mode, hp.rope_freq_base[il], hp.rope_freq_scale[il])
        k = rope(k, hp.n_rot, hp.rope_mode, hp.rope_freq_base[il], hp.rope_freq_scale[il])
        attn = self._matmul(attention(q, k, v, hp.attn_scale, masked), blk + "attn_output.weight")
        if hp.arch == "gemma3":
            attn = rms_norm(attn, w[blk + "post_attention_norm.weight"], hp.rms_eps)
        x = x + attn

        cur = rms_norm(x, w[blk + "ffn_norm.weight"], hp.rms_eps)
        gate = self._matmul(cur, blk + "ffn_gate.weight")
        up = self._matmul(cur, blk + "ffn_up.weight")
        act = gelu_tanh(gate) if hp.arch == "gemma3" else silu(gate)
        ffn = self._matmul(act * up, blk + "ffn_down.weight")
        if hp.arch == "gemma3":
            ffn = rms_norm(ffn, w[blk + "post_ffw_norm.weight"], hp.rms_eps)
        return x + ffn
