"""The first oracle: an independent NumPy forward pass over a GGUF model file.

It follows llama.cpp's semantics for the llama, qwen2, qwen3, phi3 and gemma3 architectures
(src/models/*.cpp there) and knows nothing of ggspec's C++ code, so ggspec's logits
and hidden states are checked against it. It runs the whole sequence from position 0
with causal attention, no KV cache (as llama.cpp with an f32 KV cache computes it),
so it is simple rather than fast.

Precision: it computes what ggml's CPU backend computes, bit for bit (the x86 AVX2 + FMA
build that ggspec links; ggml_cpu.py holds the emulations): f32 throughout in ggml's order
of operations, double where ggml sums in double. In particular each matmul first rounds
its activations as ggml does for the weight's type (to f16 for f16 weights; to Q8_0, Q8_1
or Q8_K quants for quantized ones, whose dot products then run on the integer quants like
ggml's kernels), and GELU is ggml's f16 table. Exactness is the point: ggml's rounding of
those activations turns an ulp of difference upstream into a different 8-bit quant now
and then, which moves the logits by far more; a merely close reference would sit
hundredths to tenths of a logit away from ggml on quantized models. Checked against
ggspec (f32 KV cache), whose decode is bit-identical to llama.cpp's: the tiny f32, f16,
Q8_0, Q4_K and Q6_K models, SmolLM2 (Q4_1, Q8_0) and Gemma 3 270M (Q4_K_M) give
identical logits.

Per architecture:
    llama:  RMSNorm; rope NORMAL (adjacent pairs), divided by rope_freqs.weight or LongRoPE
            factors; GQA attention scaled 1/sqrt(head_dim); SwiGLU FFN down(silu(gate x) * up x);
            LM head = token_embd when output.weight is absent. Every architecture takes q/k/v
            as three matrices or one attn_qkv, each with an optional bias (create_tensor_qkv).
    qwen2:  llama with q/k/v biases; rope NEOX.
    phi3:   llama with fused attn_qkv and a fused [gate; up] ffn_up; rope NEOX, possibly
            partial, with LongRoPE's long factors past the training context, short ones
            within it; q scaled after rope instead of the scores.
    qwen3:  llama plus per-head RMSNorm of q and k before rope; rope NEOX (x[i], x[i + n_rot/2]).
    gemma3: embeddings times sqrt(n_embd); per-head q/k RMSNorm, then NEOX rope; q scaled
            before the softmax rather than the scores; sliding-window layers (own rope base,
            no rope scaling, keys p0 hidden from p1 when p1 - p0 >= window); post-attention
            and post-FFN RMSNorms before each residual add; GELU(tanh) FFN; optional final
            logit soft-capping.
    muse-glimmer: the embedding RMS-normed without a weight; per-head q/k RMSNorm, NORMAL rope
            on the sliding-window layers only (every 4th layer, global, has no positions);
            the heads times sigmoid(attn_gate x) before attn_output; post-attention and
            post-FFN RMSNorms with eps 1e-8; SwiGLU FFN; logits times logit_scale, then
            optionally soft-capped.
"""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, quants

from tests.reference import ggml_cpu
from tests.reference.hparams import HParams, read_hparams

_LAYER_TENSORS = {"attn_norm", "attn_output", "ffn_norm", "ffn_down"}
_ARCH_LAYER_TENSORS = {
    "llama": {"ffn_gate", "ffn_up"},
    "qwen2": {"ffn_gate", "ffn_up"},
    "qwen3": {"ffn_gate", "ffn_up", "attn_q_norm", "attn_k_norm"},
    "phi3": {"ffn_up"},
    "gemma3": {"ffn_gate", "ffn_up", "attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"},
    "muse-glimmer": {"ffn_gate", "ffn_up", "attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm",
                     "attn_gate"},
}
# q, k and v: three matrices or one, each with an optional bias
_PROJECTIONS = ("attn_q", "attn_k", "attn_v")
_OPTIONAL_LAYER_TENSORS = {f"{name}.{kind}" for name in (*_PROJECTIONS, "attn_qkv") for kind in ("weight", "bias")}
_LONGROPE = ("rope_factors_long.weight", "rope_factors_short.weight")


# ggml's SIMD dot products sum 32 elements at a time before a scalar tail, so the length
# of the key axis decides their order. The target's attention reads a KV view padded past
# the sequence with masked keys, which add exact zeros (ggspec pads to a multiple of 256):
# any multiple of 32 gives the same sums, while no padding would move keys to the tail.
_KEY_PADDING = 32
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """ggml_rms_norm then ggml_mul by the weight, over the last axis: the sum of squares
    in double, as ggml does, everything else in f32."""
    x = np.asarray(x, dtype=np.float32)
    mean = (np.sum(x * x, axis=-1, keepdims=True, dtype=np.float64) / x.shape[-1]).astype(np.float32)
    scale = np.float32(1) / np.sqrt(mean + np.float32(eps))
    return x * scale * weight


def rope(x: np.ndarray, n_rot: int, mode: str, freq_base: float, freq_scale: float,
         freq_factors: np.ndarray | None = None, yarn: ggml_cpu.Yarn = ggml_cpu.Yarn()) -> np.ndarray:
    """Rotate x [T, n_heads, head_dim] at positions 0..T-1, as ggml_rope_ext, in f32.

    Pair i (i < n_rot/2) turns by pos * freq_scale * freq_base^(-2i/n_rot) (with YaRN,
    mixed with the unscaled angle; see ggml_cpu.rope_cache); dims past n_rot are left
    as they are. NORMAL pairs (x[2i], x[2i+1]), NEOX (x[i], x[i + n_rot/2]).
    freq_factors (llama's rope_freqs.weight, LongRoPE's factors) divide each pair's angle.
    """
    factors = None if freq_factors is None else tuple(float(f) for f in freq_factors)  # hashable: cached
    cos, sin = ggml_cpu.rope_cache(x.shape[0], n_rot, freq_base, freq_scale, factors, yarn)
    cos, sin = cos[:, None, :], sin[:, None, :]
    out = np.array(x, dtype=np.float32)
    if mode == "normal":
        first, second = np.s_[..., 0:n_rot:2], np.s_[..., 1:n_rot:2]
    else:
        first, second = np.s_[..., :n_rot // 2], np.s_[..., n_rot // 2:n_rot]
    out[first], out[second] = ggml_cpu.rope_rotate(out[first], out[second], cos, sin)
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


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, kq_scale: np.float32, masked: np.ndarray,
              kv_type: str = "f32") -> np.ndarray:
    """softmax(kq_scale * q k^T) v per head, as ggml's mul_mat, soft_max_ext, mul_mat over the
    KV cache; q head h reads kv head h // (n_head / n_head_kv), as ggml's broadcasting
    matmul does. q [T, n_head, d], k/v [T, n_head_kv, d] -> [T, n_head * d_v]. An f32 cache
    by default; kv_type "f16" is llama.cpp's default cache: k and v (f16 values) meet q,
    then the probabilities, rounded to f16, summed as ggml_vec_dot_f16.
    """
    group = q.shape[1] // k.shape[1]
    n_keys = -(-k.shape[0] // _KEY_PADDING) * _KEY_PADDING
    k, v = (np.pad(np.repeat(kv, group, axis=1), ((0, n_keys - kv.shape[0]), (0, 0), (0, 0))) for kv in (k, v))
    masked = np.pad(masked, ((0, 0), (0, n_keys - masked.shape[1])), constant_values=True)
    if kv_type == "f16":
        scores = ggml_cpu.dot_f16(k.transpose(1, 0, 2), ggml_cpu.to_f16(q.transpose(1, 0, 2)))  # [head, query, key]
        probs = ggml_cpu.soft_max(scores, kq_scale, masked)
        out = ggml_cpu.dot_f16(v.transpose(1, 2, 0), ggml_cpu.to_f16(probs))  # [head, query, d_v]
    else:
        scores = ggml_cpu.dot_f32(k.transpose(1, 0, 2), q.transpose(1, 0, 2))
        probs = ggml_cpu.soft_max(scores, kq_scale, masked)
        out = ggml_cpu.dot_f32(v.transpose(1, 2, 0), probs)
    return out.transpose(1, 0, 2).reshape(q.shape[0], -1)


class ReferenceModel:
    """A GGUF model held as dequantized float32 tensors (quantized matrices also as their
    integer quants), with a NumPy forward pass."""

    def __init__(self, model: str | Path | GGUFReader, n_ctx: int = 4096):
        """n_ctx: the context the model runs with, which picks LongRoPE's factors."""
        # An open reader may be passed in: GGUFReader takes most of the load time on
        # large vocabularies (~25 s for Gemma 3's 262k tokens), so callers can share one.
        reader = model if isinstance(model, GGUFReader) else GGUFReader(model)
        self.hparams: HParams = read_hparams(reader)
        self._load_tensors(reader)
        self._check_tensor_names()
        self.rope_factors = self._rope_factors(n_ctx)

    def _load_tensors(self, reader: GGUFReader) -> None:
        # np.array copies out of the file's memory map, once per tensor.
        self.weights = {t.name: np.array(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
                        for t in reader.tensors}
        self.weight_types = {t.name: t.tensor_type for t in reader.tensors}
        # Quantized matmuls work on the integer quants, as ggml's dot kernels do.
        self.quantized = {t.name: ggml_cpu.QuantizedWeight.from_gguf(t.data, t.tensor_type)
                          for t in reader.tensors if t.tensor_type not in _FLOAT_TYPES and t.data.ndim == 2}
        # A stack of matrices (a MoE layer's experts) is also held as one entry per matrix: name[i].
        for t in reader.tensors:
            if t.data.ndim != 3:
                continue
            for i in range(t.data.shape[0]):
                self.weights[f"{t.name}[{i}]"] = self.weights[t.name][i]
                self.weight_types[f"{t.name}[{i}]"] = t.tensor_type
                if t.tensor_type not in _FLOAT_TYPES:
                    self.quantized[f"{t.name}[{i}]"] = ggml_cpu.QuantizedWeight.from_gguf(t.data[i], t.tensor_type)

    def _check_tensor_names(self) -> None:
        """Refuse files with tensors this forward would silently ignore (rope factors of
        another architecture, sinks, ...), or without the ones it needs."""
        hp = self.hparams
        per_layer = {f"{name}.weight" for name in _LAYER_TENSORS | _ARCH_LAYER_TENSORS[hp.arch]}
        required = {"token_embd.weight", "output_norm.weight"}
        required |= {f"blk.{i}.{name}" for i in range(hp.n_layer) for name in per_layer}
        optional = {"output.weight"} | {f"blk.{i}.{name}" for i in range(hp.n_layer) for name in _OPTIONAL_LAYER_TENSORS}
        if hp.arch == "phi3" or hp.rope_scaling == "longrope":
            optional |= set(_LONGROPE)
        elif hp.arch == "llama":
            optional.add("rope_freqs.weight")
        unknown = sorted(set(self.weights) - required - optional)
        if unknown:
            raise NotImplementedError(f"tensors not supported by the reference: {unknown[:8]}")
        missing = sorted(required - set(self.weights))
        for i in range(hp.n_layer):
            if f"blk.{i}.attn_qkv.weight" not in self.weights:
                missing += [f"blk.{i}.{name}.weight" for name in _PROJECTIONS if f"blk.{i}.{name}.weight" not in self.weights]
        if missing:
            raise ValueError(f"model file lacks tensors: {missing[:8]}")

    def _rope_factors(self, n_ctx: int) -> np.ndarray | None:
        """What divides each pair's angle: rope_freqs.weight, or LongRoPE's long factors when
        the context (padded to 256, as llama.cpp pads it) exceeds the training context."""
        if _LONGROPE[0] in self.weights:
            padded = -(-n_ctx // 256) * 256
            return self.weights[_LONGROPE[0] if padded > self.hparams.yarn.n_ctx_orig else _LONGROPE[1]]
        return self.weights.get("rope_freqs.weight")

    def _matmul(self, x: np.ndarray, name: str) -> np.ndarray:
        """ggml_mul_mat(W, x) = x @ W^T, W stored [n_out, n_in], as ggml's CPU computes it."""
        if name in self.quantized:
            return ggml_cpu.dot_quantized(self.quantized[name], x)
        if self.weight_types[name] == GGMLQuantizationType.F16:
            return ggml_cpu.dot_f16(self.weights[name], ggml_cpu.to_f16(x))  # x rounded to f16 first
        return ggml_cpu.dot_f32(self.weights[name], x)

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

        x = self.weights["token_embd.weight"][tokens] * np.float32(hp.embd_scale)
        if hp.arch == "muse-glimmer":
            x = rms_norm(x, np.float32(1), hp.rms_eps)
        hidden: dict = {}
        masks = {n_swa: attention_mask(len(tokens), n_swa) for n_swa in {0, hp.n_swa}}
        for il in range(hp.n_layer):
            hidden[il] = x
            x = self._layer(il, x, masks[hp.n_swa if hp.is_swa[il] else 0])

        final = rms_norm(x, self.weights["output_norm.weight"], hp.rms_eps)
        hidden["final"] = final
        logits = self._matmul(final, "output.weight" if "output.weight" in self.weights else "token_embd.weight")
        if hp.logit_scale != 1.0:
            logits = logits * np.float32(hp.logit_scale)
        if hp.final_logit_softcapping:
            cap = np.float32(hp.final_logit_softcapping)
            logits = ggml_cpu.tanhf(logits * (np.float32(1) / cap)) * cap
        return logits, hidden

    def _layer(self, il: int, x: np.ndarray, masked: np.ndarray) -> np.ndarray:
        hp, w = self.hparams, self.weights
        blk = f"blk.{il}."
        n_pos = x.shape[0]

        cur = rms_norm(x, w[blk + "attn_norm.weight"], hp.rms_eps)
        q, k, v = self._project_qkv(blk, cur)
        q = q.reshape(n_pos, hp.n_head, hp.head_dim_k)
        k = k.reshape(n_pos, hp.n_head_kv, hp.head_dim_k)
        v = v.reshape(n_pos, hp.n_head_kv, hp.head_dim_v)
        if blk + "attn_q_norm.weight" in w:
            q = rms_norm(q, w[blk + "attn_q_norm.weight"], hp.rms_eps)
            k = rms_norm(k, w[blk + "attn_k_norm.weight"], hp.rms_eps)
        if hp.arch != "muse-glimmer" or hp.is_swa[il]:
            rope_args = (hp.n_rot, hp.rope_mode, hp.rope_freq_base[il], hp.rope_freq_scale[il],
                         None if hp.is_swa[il] else self.rope_factors, hp.yarn)
            q, k = rope(q, *rope_args), rope(k, *rope_args)
        kq_scale = np.float32(hp.attn_scale)
        if hp.scale_q:  # llama.cpp scales q by it, then runs the softmax unscaled
            q, kq_scale = q * kq_scale, np.float32(1)
        heads = attention(q, k, v, kq_scale, masked)
        if blk + "attn_gate.weight" in w:
            gate = self._matmul(cur, blk + "attn_gate.weight")
            heads = heads * (np.float32(1) / (np.float32(1) + ggml_cpu.c_expf(-gate)))  # ggml's sigmoid
        attn = self._matmul(heads, blk + "attn_output.weight")
        post_eps = 1e-8 if hp.arch == "muse-glimmer" else hp.rms_eps  # a constant of muse-glimmer's graph
        if blk + "post_attention_norm.weight" in w:
            attn = rms_norm(attn, w[blk + "post_attention_norm.weight"], post_eps)
        x = x + attn

        cur = rms_norm(x, w[blk + "ffn_norm.weight"], hp.rms_eps)
        if blk + "ffn_gate.weight" in w:
            gate, up = self._matmul(cur, blk + "ffn_gate.weight"), self._matmul(cur, blk + "ffn_up.weight")
        else:  # fused: ggml's swiglu takes the row's first half as the gate
            gate, up = np.split(self._matmul(cur, blk + "ffn_up.weight"), 2, axis=-1)
        act = ggml_cpu.gelu_f16_table(gate) if hp.arch == "gemma3" else ggml_cpu.silu(gate)
        ffn = self._matmul(act * up, blk + "ffn_down.weight")
        if blk + "post_ffw_norm.weight" in w:
            ffn = rms_norm(ffn, w[blk + "post_ffw_norm.weight"], post_eps)
        return x + ffn

    def _project_qkv(self, blk: str, cur: np.ndarray) -> list[np.ndarray]:
        """q, k, v [T, width] from three products or one fused, with their biases."""
        w = self.weights
        if blk + "attn_qkv.weight" in w:
            qkv = self._matmul(cur, blk + "attn_qkv.weight")
            if blk + "attn_qkv.bias" in w:
                qkv = qkv + w[blk + "attn_qkv.bias"]
            elif blk + "attn_q.bias" in w:
                qkv = qkv + np.concatenate([w[f"{blk}{name}.bias"] for name in _PROJECTIONS])
            hp = self.hparams
            n_q, n_kv = hp.n_head * hp.head_dim_k, hp.n_head_kv * hp.head_dim_k
            return np.split(qkv, [n_q, n_q + n_kv], axis=-1)
        out = []
        for name in _PROJECTIONS:
            y = self._matmul(cur, f"{blk}{name}.weight")
            out.append(y + w[f"{blk}{name}.bias"] if f"{blk}{name}.bias" in w else y)
        return out
