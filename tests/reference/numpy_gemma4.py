"""The first oracle for llama.cpp's `gemma4` architecture (Gemma 4 dense: E2B, E4B, 31B; and
the 26B-A4B's mixture-of-experts layers) and for `gemma4-assistant`, its separate MTP
drafter: NumPy forward passes over GGUF files.

It follows llama.cpp's src/models/gemma4.cpp and gemma4-assistant.cpp, the KV-cache
sharing of src/llama-model.cpp (`reuse`, `share`) and the shared-cache draft loop of
common/speculative.cpp (`is_mem_shared`), and knows nothing of ggspec's C++ code. Weight
products, RMSNorms, RoPE, softmax attention, ggml's f16-table GELU and tanhf are
numpy_model's and ggml_cpu's bit-exact emulations of ggml's CPU kernels. The KV cache is
f32 by default, as numpy_model's; kv_type="f16" emulates llama.cpp's default f16 cache
(non-flash attention): K and V stored as f16, and the two attention products rounding q and
the softmax to f16, as ggml's f16 matmuls do. With it the logits are llama.cpp's bits on
the x86 AVX2 + FMA peer (tiny f32, f16 and Q8_0 files, dense or MoE, K-quant ones decoded a token at a
time, as llama.cpp's batched K-quant kernels are not batch-invariant; and the assistant's
drafts, each step's logits and h_next, from a one-off run of llama.cpp's shared-cache
assistant context). With an f32 cache the trunk's logits sit tenths of a logit from
llama.cpp's on the tiny f32 file, whole logits on quantized ones: the attention is
unscaled (scale 1 over normed q and k), so f16's rounding of q and k moves the scores.

    trunk:   x = token_embd[t] * sqrt(n_embd)
             per-layer inputs (embedding_length_per_layer_input n_pl > 0), [n_layer, n_pl] per token:
                 inp = (rmsnorm(per_layer_model_proj x / sqrt(n_embd)) * per_layer_proj_norm
                        + per_layer_token_embd[t] * sqrt(n_pl)) / sqrt(2)
    layer il:  cur = rmsnorm(x) * attn_norm
             q = rope(rmsnorm_head(attn_q cur) * attn_q_norm)
             KV layers (il < n_layer - shared_kv_layers): k = rope(rmsnorm_head(attn_k cur) * attn_k_norm),
                 v = rmsnorm_head(attn_v cur, or attn_k cur without attn_v), no weight
             the others read the K/V of layer n_kv - 2 (sliding) or n_kv - 1 (global)
             attn = attn_output(softmax(q k^T) v)  (scale 1; sliding layers: keys p1 - p0 < window)
             x = x + rmsnorm(attn) * post_attention_norm
             x = x + rmsnorm(ffn_down(gelu(ffn_gate h) * ffn_up h)) * post_ffw_norm,  h = rmsnorm(x) * ffn_norm
             MoE layers (those with ffn_gate_inp.weight), the FFN line above becoming, with a = x
             after attention:
                 mlp = rmsnorm(ffn_down(gelu(ffn_gate h) * ffn_up h)) * post_ffw_norm_1,  h = rmsnorm(a) * ffn_norm
                 router logits = ffn_gate_inp (rmsnorm(a) (no weight) * (1 / sqrt(n_embd)) * ffn_gate_inp.scale)
                 u = rmsnorm(a) * pre_ffw_norm_2
                 moe = rmsnorm(sum over the expert_used_count most probable e (softmax of the logits) of
                       p_e / sum(p) * ffn_down_exps.scale[e] * ffn_down_exps_e(gelu(ffn_gate_exps_e u) *
                       ffn_up_exps_e u)) * post_ffw_norm_2  (the scale when present; gate and up possibly
                       halves of ffn_gate_up_exps_e u; numpy_qwen35.routed_experts: llama.cpp's build_moe_ffn)
                 x = a + rmsnorm(mlp + moe) * post_ffw_norm
             x = x + rmsnorm(proj(gelu(inp_gate x) * inp[il])) * post_norm      (per-layer inputs)
             x = x * layer_output_scale                                          (when present)
             sliding layers: key_length_swa heads, rope.dimension_count_swa dims, base rope.freq_base_swa
             (10000), no freq factors; global: key_length heads, rope.dimension_count dims,
             rope.freq_base, divided by rope_freqs.weight (1e30: a frozen pair). RoPE NEOX.
    final:   f = rmsnorm(x) * output_norm;  logits = c tanh((output or token_embd) f / c),
             c = final_logit_softcapping (30 when the key is absent, as llama.cpp's default)

    assistant, one row (token t, target-width row h, position p):
             u = nextn.pre_projection [target token_embd[t] * sqrt(n_embd_backbone); h]
             per block: q only (as above, roped at p), attending over the target's cache: sliding
             blocks read target layer n_layer - 2's K/V, global ones layer n_layer - 1's (through
             the target's reuse), keys at positions < p (the target's cache at draft time);
             post_attention_norm, residual, GELU FFN with post_ffw_norm, residual, layer_output_scale
             f = rmsnorm(u) * output_norm;  logits = token_embd f (its own, no soft-capping);
             h_next = nextn.post_projection f (target width)
    drafting (llama.cpp with the assistant sharing the target's memory): the first step reads
             (the pending token, the target's final-normed row that predicted it) at the pending
             token's position p; each later one (the previous draft, the previous h_next) at the
             same p.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader

from tests.reference import ggml_cpu
from tests.reference.hparams import REQUIRED, read_key, read_rope_scaling
from tests.reference.numpy_model import ReferenceModel, attention, attention_mask, rms_norm, rope
from tests.reference.numpy_qwen35 import routed_experts

ARCHS = ("gemma4", "gemma4-assistant")
KV_TYPES = ("f32", "f16")

_TRUNK_LAYER = ("attn_norm", "attn_q", "attn_q_norm", "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate",
                "ffn_up", "ffn_down", "post_ffw_norm")
_KV = ("attn_k", "attn_k_norm")
_PER_LAYER_INPUT_GLOBALS = ("per_layer_token_embd", "per_layer_model_proj", "per_layer_proj_norm")
_PER_LAYER_INPUT = ("inp_gate", "proj", "post_norm")
_ASSISTANT_LAYER = _TRUNK_LAYER + ("layer_output_scale",)
# A MoE layer's (one with ffn_gate_inp.weight) besides the dense ones: the router's input scale, the norms
# before the experts and after the MLP and the experts, the down projections.
_MOE_LAYER = ("ffn_gate_inp.weight", "ffn_gate_inp.scale", "pre_ffw_norm_2.weight", "post_ffw_norm_1.weight",
              "post_ffw_norm_2.weight", "ffn_down_exps.weight")
# Loaded by llama.cpp's gemma4-assistant and never read by its graph.
_ASSISTANT_UNUSED = ("masked_embd_centroids.weight", "masked_embd_ordering")


@dataclass(frozen=True)
class Gemma4HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    # Per layer: the sliding-window layers have their own head size and rotary dims.
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    head_dim: tuple[int, ...]  # key_length_swa on sliding layers, key_length on global ones (= value lengths)
    n_rot: tuple[int, ...]
    rope_freq_base: tuple[float, ...]
    rope_freq_scale: tuple[float, ...]
    yarn: ggml_cpu.Yarn
    rms_eps: float
    is_swa: tuple[bool, ...]
    n_swa: int
    n_layer_kv: int  # the first n_layer_kv layers compute K/V (n_layer - shared_kv_layers)
    n_embd_per_layer: int  # 0: no per-layer inputs (the assistant has none)
    final_logit_softcapping: float  # 0: none (the assistant)
    n_embd_backbone: int  # the assistant: the target's width (embedding_length_out); the trunk: n_embd
    n_expert: int  # 0: no experts
    n_expert_used: int
    n_ff_exp: tuple[int, ...]  # per layer, 0 where expert_feed_forward_length is absent

    def kv_layer(self, il: int) -> int:
        """The layer whose K/V layer il attends over (llama-model.cpp's `reuse`)."""
        if il < self.n_layer_kv:
            return il
        return self.n_layer_kv - (2 if self.is_swa[il] else 1)


def read_gemma4_hparams(reader: GGUFReader) -> Gemma4HParams:
    """gemma4 or gemma4-assistant hyperparameters as llama.cpp reads them (load_hparams, then
    load_arch_hparams), its absent-key defaults included."""
    arch = reader.get_field("general.architecture").contents()
    if arch not in ARCHS:
        raise NotImplementedError(f"architecture {arch!r} is not gemma4 or gemma4-assistant")
    def get(key: str, default=REQUIRED):
        return read_key(reader, f"{arch}.{key}", default)

    n_layer, n_embd = get("block_count"), get("embedding_length")

    def per_layer(value) -> tuple[int, ...]:  # get_key_or_arr: one value for all layers, or an array
        if isinstance(value, list):
            if len(value) != n_layer:
                raise ValueError(f"a per-layer array of {len(value)} for {n_layer} layers")
            return tuple(int(v) for v in value)
        return (int(value),) * n_layer

    n_head = per_layer(get("attention.head_count"))
    n_head_kv = per_layer(get("attention.head_count_kv", list(n_head)))
    head_k, head_v = (get(f"attention.{kind}_length", n_embd // n_head[0]) for kind in ("key", "value"))
    head_k_swa, head_v_swa = get("attention.key_length_swa"), get("attention.value_length_swa")
    if head_k != head_v or head_k_swa != head_v_swa:
        raise ValueError("Gemma 4 requires key_length == value_length (and the same for the _swa ones)")
    n_rot = get("rope.dimension_count", head_k)
    n_rot_swa = get("rope.dimension_count_swa", n_rot)
    pattern = get("attention.sliding_window_pattern")
    if not isinstance(pattern, list):
        raise NotImplementedError("a scalar sliding_window_pattern: llama.cpp's gemma4 reads an array")
    is_swa = tuple(bool(pattern[il]) if il < len(pattern) else False for il in range(n_layer))
    freq_base, freq_base_swa = get("rope.freq_base", 10000.0), get("rope.freq_base_swa", 10000.0)
    scaling, freq_scale, yarn = read_rope_scaling(reader, arch, get("context_length"))
    if scaling == "longrope":
        raise NotImplementedError("LongRoPE on gemma4 is not supported by the reference")

    trunk = arch == "gemma4"
    n_layer_kv = n_layer - get("attention.shared_kv_layers", 0) if trunk else n_layer
    if trunk and n_layer_kv < 2:  # llama.cpp asserts it for every gemma4 file
        raise ValueError("gemma4 needs at least two layers with KV of their own")
    for il in range(n_layer_kv, n_layer):  # llama.cpp finds the source in the cache of the layer's kind
        if is_swa[n_layer_kv - (2 if is_swa[il] else 1)] != is_swa[il]:
            raise ValueError(f"shared-KV layer {il} would read a layer of the other kind")
    n_embd_backbone = get("embedding_length_out", n_embd)
    if not trunk and n_embd_backbone == n_embd:
        raise ValueError("gemma4-assistant requires embedding_length_out to carry the target's width")
    n_expert = get("expert_count", 0)
    n_expert_used = set(per_layer(get("expert_used_count", 0)))
    if len(n_expert_used) != 1:
        raise NotImplementedError("a per-layer expert_used_count")
    n_expert_used = n_expert_used.pop()
    if not (0 < n_expert_used <= n_expert if n_expert else n_expert_used == 0):  # llama.cpp asserts it
        raise ValueError(f"expert_used_count {n_expert_used} for expert_count {n_expert}")
    if n_expert % 8:
        raise NotImplementedError("an expert_count not a multiple of 8 (ggml_cpu.soft_max sums 8 at a time)")
    token_embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    return Gemma4HParams(
        arch=arch, n_vocab=int(token_embd.shape[1]), n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        n_head_kv=n_head_kv, n_ff=per_layer(get("feed_forward_length")),
        head_dim=tuple(head_k_swa if swa else head_k for swa in is_swa),
        n_rot=tuple(n_rot_swa if swa else n_rot for swa in is_swa),
        rope_freq_base=tuple(freq_base_swa if swa else freq_base for swa in is_swa),
        rope_freq_scale=tuple(1.0 if swa else freq_scale for swa in is_swa),
        yarn=yarn, rms_eps=get("attention.layer_norm_rms_epsilon"), is_swa=is_swa,
        n_swa=get("attention.sliding_window"), n_layer_kv=n_layer_kv,
        n_embd_per_layer=get("embedding_length_per_layer_input") if trunk else 0,
        final_logit_softcapping=get("final_logit_softcapping", 30.0) if trunk else 0.0,
        n_embd_backbone=n_embd_backbone, n_expert=n_expert, n_expert_used=n_expert_used,
        n_ff_exp=per_layer(get("expert_feed_forward_length", 0)))


def _f32_sqrt(n: int) -> np.float32:
    """sqrtf((float) n)."""
    return np.sqrt(np.float32(n))


def rope_at(x: np.ndarray, positions, n_rot: int, freq_base: float, freq_scale: float,
            freq_factors: np.ndarray | None = None, yarn: ggml_cpu.Yarn = ggml_cpu.Yarn()) -> np.ndarray:
    """numpy_model.rope (NEOX) of rows x [T, n_heads, head_dim] at the given positions
    rather than 0..T-1 (an angle depends on its own position only, so a row is the same)."""
    positions = np.asarray(positions, dtype=np.int64)
    factors = None if freq_factors is None else tuple(float(f) for f in freq_factors)
    cos, sin = ggml_cpu.rope_cache(int(positions.max()) + 1, n_rot, freq_base, freq_scale, factors, yarn)
    cos, sin = cos[positions][:, None, :], sin[positions][:, None, :]
    out = np.array(x, dtype=np.float32)
    first, second = np.s_[..., :n_rot // 2], np.s_[..., n_rot // 2:n_rot]
    out[first], out[second] = ggml_cpu.rope_rotate(out[first], out[second], cos, sin)
    return out


def cache_rows(x: np.ndarray, kv_type: str) -> np.ndarray:
    """K or V rows as the cache holds them."""
    return ggml_cpu.to_f16(x) if kv_type == "f16" else np.asarray(x, np.float32)


class _Gemma4Base(ReferenceModel):
    """What the trunk and the assistant share: loading, the query, the block after attention."""

    def __init__(self, model: str | Path | GGUFReader, arch: str, kv_type: str):
        if kv_type not in KV_TYPES:
            raise ValueError(f"kv_type must be one of {KV_TYPES}")
        self.kv_type = kv_type
        reader = model if isinstance(model, GGUFReader) else GGUFReader(model)
        self.hparams: Gemma4HParams = read_gemma4_hparams(reader)
        if self.hparams.arch != arch:
            raise ValueError(f"expected a {arch} file, got {self.hparams.arch}")
        self._load_tensors(reader)
        self._check_gemma4_tensors()

    def _required_and_optional(self) -> tuple[set[str], set[str]]:
        raise NotImplementedError

    def _check_gemma4_tensors(self) -> None:
        """Refuse files with tensors this forward would ignore (a fused qkv, per-expert gate or up
        scales, ...) or without the ones llama.cpp requires."""
        required, optional = self._required_and_optional()
        in_file = {name for name in self.weights if not name.endswith("]")}  # not the experts' name[i] views
        unknown = sorted(in_file - required - optional)
        if unknown:
            raise NotImplementedError(f"tensors not supported by the reference: {unknown[:8]}")
        missing = sorted(required - set(self.weights))
        if missing:
            raise ValueError(f"model file lacks tensors: {missing[:8]}")
        hp, w = self.hparams, self.weights
        for il in range(hp.n_layer):
            d = w[f"blk.{il}.attn_q_norm.weight"].shape[-1]
            if d != hp.head_dim[il] or w[f"blk.{il}.attn_q.weight"].shape[0] != hp.n_head[il] * d:
                raise ValueError(f"layer {il}: attn_q does not have {hp.n_head[il]} heads of {hp.head_dim[il]}")
            if self._is_moe(il):
                self._check_expert_shapes(il)

    def _is_moe(self, il: int) -> bool:
        """llama.cpp's is_moe_layer: the layer has a router."""
        return f"blk.{il}.ffn_gate_inp.weight" in self.weights

    def _moe_tensors(self, il: int) -> tuple[set[str], set[str]]:
        """A MoE layer's required and optional tensors beyond a dense layer's."""
        blk = f"blk.{il}."
        fused = blk + "ffn_gate_up_exps.weight" in self.weights
        experts = ("ffn_gate_up_exps.weight",) if fused else ("ffn_gate_exps.weight", "ffn_up_exps.weight")
        return {blk + name for name in _MOE_LAYER + experts}, {blk + "ffn_down_exps.scale"}

    def _check_expert_shapes(self, il: int) -> None:
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        n_exp, n_embd, n_ff = hp.n_expert, hp.n_embd, hp.n_ff_exp[il]
        shapes = {"ffn_gate_inp.weight": (n_exp, n_embd), "ffn_gate_inp.scale": (n_embd,),
                  "ffn_down_exps.weight": (n_exp, n_embd, n_ff), "ffn_down_exps.scale": (n_exp,),
                  "ffn_gate_up_exps.weight": (n_exp, 2 * n_ff, n_embd), "ffn_gate_exps.weight": (n_exp, n_ff, n_embd),
                  "ffn_up_exps.weight": (n_exp, n_ff, n_embd)}
        for name, shape in shapes.items():
            if blk + name in w and w[blk + name].shape != shape:
                raise ValueError(f"{blk}{name} is {w[blk + name].shape}, not {shape} (expert_count {n_exp}, "
                                 f"expert_feed_forward_length {n_ff})")

    def _query(self, il: int, cur: np.ndarray, positions=None) -> np.ndarray:
        """q [T, n_head, d]: attn_q, per-head RMSNorm, NEOX rope (at 0..T-1, or positions)."""
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        q = self._matmul(cur, blk + "attn_q.weight").reshape(cur.shape[0], hp.n_head[il], hp.head_dim[il])
        q = rms_norm(q, w[blk + "attn_q_norm.weight"], hp.rms_eps)
        return self._rope(il, q, positions)

    def _rope(self, il: int, x: np.ndarray, positions=None) -> np.ndarray:
        hp = self.hparams
        args = (hp.n_rot[il], hp.rope_freq_base[il], hp.rope_freq_scale[il],
                None if hp.is_swa[il] else self.weights["rope_freqs.weight"], hp.yarn)
        if positions is None:
            return rope(x, args[0], "neox", *args[1:])
        return rope_at(x, positions, *args)

    def _after_attention(self, il: int, x: np.ndarray, heads: np.ndarray) -> np.ndarray:
        """attn_output, post-attention norm and residual, then the GELU FFN (with the experts
        beside it on a MoE layer) with its post norm and residual."""
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        attn = self._matmul(heads, blk + "attn_output.weight")
        x = rms_norm(attn, w[blk + "post_attention_norm.weight"], hp.rms_eps) + x
        h = rms_norm(x, w[blk + "ffn_norm.weight"], hp.rms_eps)
        gate, up = self._matmul(h, blk + "ffn_gate.weight"), self._matmul(h, blk + "ffn_up.weight")
        ffn = self._matmul(ggml_cpu.gelu_f16_table(gate) * up, blk + "ffn_down.weight")  # ggml_geglu_split
        if self._is_moe(il):
            ffn = rms_norm(ffn, w[blk + "post_ffw_norm_1.weight"], hp.rms_eps) + self._experts(il, x)
        return rms_norm(ffn, w[blk + "post_ffw_norm.weight"], hp.rms_eps) + x

    def _experts(self, il: int, attn_out: np.ndarray) -> np.ndarray:
        """The MoE branch of a MoE layer, normed by post_ffw_norm_2: the router reads the
        unweighted RMS norm of attn_out over sqrt(n_embd) times ffn_gate_inp.scale, the experts
        attn_out normed by pre_ffw_norm_2."""
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        router_in = rms_norm(attn_out, np.float32(1), hp.rms_eps) * (np.float32(1) / _f32_sqrt(hp.n_embd))
        logits = self._matmul(router_in * w[blk + "ffn_gate_inp.scale"], blk + "ffn_gate_inp.weight")
        cur = rms_norm(attn_out, w[blk + "pre_ffw_norm_2.weight"], hp.rms_eps)
        moe = routed_experts(self, blk, cur, logits, hp.n_expert_used, ggml_cpu.gelu_f16_table)
        return rms_norm(moe, w[blk + "post_ffw_norm_2.weight"], hp.rms_eps)

    def _output_scale(self, il: int, x: np.ndarray) -> np.ndarray:
        name = f"blk.{il}.layer_output_scale.weight"
        return x * self.weights[name] if name in self.weights else x


class Gemma4Reference(_Gemma4Base):
    """A gemma4 GGUF held as float32 tensors (quantized ones also as their quants), with a
    NumPy forward pass from position 0. kv_type: "f32" or "f16", the KV cache's type."""

    def __init__(self, model: str | Path | GGUFReader, kv_type: str = "f32"):
        super().__init__(model, "gemma4", kv_type)

    def _required_and_optional(self) -> tuple[set[str], set[str]]:
        hp = self.hparams
        required = {"token_embd.weight", "output_norm.weight"}
        optional = {"output.weight"}
        if not all(hp.is_swa):
            required.add("rope_freqs.weight")
        if hp.n_embd_per_layer:
            required |= {f"{name}.weight" for name in _PER_LAYER_INPUT_GLOBALS}
        for il in range(hp.n_layer):
            blk = f"blk.{il}."
            names = _TRUNK_LAYER + (_PER_LAYER_INPUT if hp.n_embd_per_layer else ())
            required |= {f"{blk}{name}.weight" for name in names}
            # llama.cpp loads a shared-KV layer's k, v and k norm when they are there, and never reads them
            kv = {f"{blk}{name}.weight" for name in _KV}
            (required if il < hp.n_layer_kv else optional).update(kv)
            optional |= {f"{blk}attn_v.weight", f"{blk}layer_output_scale.weight"}
            if self._is_moe(il):
                moe_required, moe_optional = self._moe_tensors(il)
                required |= moe_required
                optional |= moe_optional
        return required, optional

    def forward(self, tokens: list[int]) -> tuple[np.ndarray, dict]:
        """Logits [T, n_vocab] float32 for tokens at positions 0..T-1, and the taps:
        hidden[il] the input of layer il [T, n_embd], hidden["final"] the output of the
        final norm [T, n_embd] (the LM head's input, the assistant's h), hidden["kv"]
        {il: (K [T, n_head_kv, d] normed and roped, V [T, n_head_kv, d] normed)} for each
        layer with KV of its own (il < n_layer - shared_kv_layers), as the cache holds them
        (rounded to f16 with kv_type "f16"), and with per-layer
        inputs hidden["per_layer_inputs"] [T, n_layer, n_embd_per_layer]."""
        hp, w = self.hparams, self.weights
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= hp.n_vocab:
            raise ValueError(f"token ids must be in [0, {hp.n_vocab})")
        n_pos = len(tokens)

        x = w["token_embd.weight"][tokens] * _f32_sqrt(hp.n_embd)
        hidden: dict = {"kv": {}}
        per_layer = None
        if hp.n_embd_per_layer:
            per_layer = self._per_layer_inputs(tokens, x)
            hidden["per_layer_inputs"] = per_layer
        masks = {False: attention_mask(n_pos, 0), True: attention_mask(n_pos, hp.n_swa)}
        for il in range(hp.n_layer):
            hidden[il] = x
            x = self._layer(il, x, masks[hp.is_swa[il]], hidden["kv"],
                            None if per_layer is None else per_layer[:, il])

        final = rms_norm(x, w["output_norm.weight"], hp.rms_eps)
        hidden["final"] = final
        logits = self._matmul(final, "output.weight" if "output.weight" in w else "token_embd.weight")
        if hp.final_logit_softcapping:
            cap = np.float32(hp.final_logit_softcapping)
            logits = ggml_cpu.tanhf(logits * (np.float32(1) / cap)) * cap
        return logits, hidden

    def _per_layer_inputs(self, tokens: np.ndarray, x: np.ndarray) -> np.ndarray:
        """[T, n_layer, n_pl]: build_inp_per_layer and project_per_layer_inputs."""
        hp, w = self.hparams, self.weights
        shape = (len(tokens), hp.n_layer, hp.n_embd_per_layer)
        selected = w["per_layer_token_embd.weight"][tokens].reshape(shape) * _f32_sqrt(hp.n_embd_per_layer)
        proj = self._matmul(x, "per_layer_model_proj.weight") * (np.float32(1) / _f32_sqrt(hp.n_embd))
        proj = rms_norm(proj.reshape(shape), w["per_layer_proj_norm.weight"], hp.rms_eps)
        return (proj + selected) * (np.float32(1) / _f32_sqrt(2))

    def _layer(self, il: int, x: np.ndarray, masked: np.ndarray, kv: dict,
               per_layer_input: np.ndarray | None) -> np.ndarray:
        hp, w, blk = self.hparams, self.weights, f"blk.{il}."
        n_pos = x.shape[0]
        cur = rms_norm(x, w[blk + "attn_norm.weight"], hp.rms_eps)
        q = self._query(il, cur)
        if il < hp.n_layer_kv:
            shape = (n_pos, hp.n_head_kv[il], hp.head_dim[il])
            k_proj = self._matmul(cur, blk + "attn_k.weight")
            v = self._matmul(cur, blk + "attn_v.weight") if blk + "attn_v.weight" in w else k_proj
            k = rms_norm(k_proj.reshape(shape), w[blk + "attn_k_norm.weight"], hp.rms_eps)
            v = rms_norm(v.reshape(shape), np.float32(1), hp.rms_eps)  # ggml_rms_norm: no weight
            kv[il] = (cache_rows(self._rope(il, k), self.kv_type), cache_rows(v, self.kv_type))
        k, v = kv[hp.kv_layer(il)]
        if k.shape[1:] != (hp.n_head_kv[il], hp.head_dim[il]):
            raise ValueError(f"layer {il} cannot read layer {hp.kv_layer(il)}'s K/V of shape {k.shape[1:]}")
        x = self._after_attention(il, x, attention(q, k, v, np.float32(1), masked, self.kv_type))
        if per_layer_input is not None:
            gate = ggml_cpu.gelu_f16_table(self._matmul(x, blk + "inp_gate.weight")) * per_layer_input
            x = x + rms_norm(self._matmul(gate, blk + "proj.weight"), w[blk + "post_norm.weight"], hp.rms_eps)
        return self._output_scale(il, x)


class Gemma4AssistantReference(_Gemma4Base):
    """A gemma4-assistant GGUF over its target's reference: single rows that attend over the
    target's K/V (its cache, of the target's kv_type), and llama.cpp's shared-cache greedy
    drafting."""

    def __init__(self, model: str | Path | GGUFReader, target: Gemma4Reference):
        super().__init__(model, "gemma4-assistant", target.kv_type)
        self.target = target
        hp, thp = self.hparams, target.hparams
        if hp.n_embd_backbone != thp.n_embd:
            raise ValueError(f"the assistant reads rows of {hp.n_embd_backbone}, the target's are {thp.n_embd}")
        if thp.n_layer < 2 or not thp.is_swa[thp.n_layer - 2] or thp.is_swa[thp.n_layer - 1]:
            raise ValueError("the assistant reads the target's last two layers as a sliding and a global one")
        for il in range(hp.n_layer):
            tl = self.target_kv_layer(il)
            if (hp.n_head_kv[il], hp.head_dim[il]) != (thp.n_head_kv[tl], thp.head_dim[tl]):
                raise ValueError(f"assistant layer {il}'s attention shape is not target layer {tl}'s")

    def _required_and_optional(self) -> tuple[set[str], set[str]]:
        hp = self.hparams
        required = {"token_embd.weight", "output_norm.weight", "nextn.pre_projection.weight",
                    "nextn.post_projection.weight"}
        if not all(hp.is_swa):
            required.add("rope_freqs.weight")
        required |= {f"blk.{il}.{name}.weight" for il in range(hp.n_layer) for name in _ASSISTANT_LAYER}
        return required, set(_ASSISTANT_UNUSED)

    def target_kv_layer(self, il: int) -> int:
        """The target layer whose K/V assistant layer il reads: target layer n_layer - 2 for a
        sliding block, n_layer - 1 for a global one (llama-model.cpp's `share`), resolved through
        the target's own sharing."""
        thp = self.target.hparams
        return thp.kv_layer(thp.n_layer - (2 if self.hparams.is_swa[il] else 1))

    def step(self, token: int, h: np.ndarray, position: int, kv: dict) -> tuple[np.ndarray, np.ndarray]:
        """One assistant row: token and h (a target-width row) at `position`, attending over
        kv (the target's hidden["kv"]) at positions < position only; rows of kv at or past it
        are never read. Returns (logits [n_vocab], h_next [n_embd_backbone])."""
        hp, w = self.hparams, self.weights
        if not 0 < position:
            raise ValueError("the assistant's row needs target positions before it")
        embd = self.target.weights["token_embd.weight"][[token]] * _f32_sqrt(hp.n_embd_backbone)
        h = np.asarray(h, np.float32).reshape(1, hp.n_embd_backbone)
        u = self._matmul(np.concatenate([embd, h], axis=-1), "nextn.pre_projection.weight")
        for il in range(hp.n_layer):
            k, v = kv[self.target_kv_layer(il)]
            if k.shape[0] < position:
                raise ValueError(f"kv holds {k.shape[0]} positions, the row at {position} reads {position}")
            k, v = k[:position], v[:position]
            masked = np.zeros((1, position), bool)
            if hp.is_swa[il]:
                masked[0] = position - np.arange(position) >= hp.n_swa
            cur = rms_norm(u, w[f"blk.{il}.attn_norm.weight"], hp.rms_eps)
            q = self._query(il, cur, [position])
            heads = attention(q, k, v, np.float32(1), masked, self.kv_type)
            u = self._output_scale(il, self._after_attention(il, u, heads))
        final = rms_norm(u, w["output_norm.weight"], hp.rms_eps)
        logits = self._matmul(final, "token_embd.weight")
        h_next = self._matmul(final, "nextn.post_projection.weight")
        return logits[0], h_next[0]

    def draft(self, tokens: list[int], n: int, target_hidden: dict | None = None) -> tuple[list[int], list[np.ndarray]]:
        """llama.cpp's greedy shared-cache drafts after tokens[-1], the pending token at
        p = len(tokens) - 1, with the target's cache holding tokens[:-1]: step 0 reads
        (tokens[-1], the target's final-normed row at p - 1), step i > 0 (draft i - 1, step
        i - 1's h_next), all at position p. target_hidden: the target's forward over at least
        tokens[:-1] (only positions < p are read); computed when None. Returns the n drafts
        and each step's logits."""
        p = len(tokens) - 1
        if p < 1:
            raise ValueError("drafting needs a committed token before the pending one")
        if target_hidden is None:
            _, target_hidden = self.target.forward(tokens[:-1])
        token, h = int(tokens[-1]), target_hidden["final"][p - 1]
        drafts, steps = [], []
        for _ in range(n):
            logits, h = self.step(token, h, p, target_hidden["kv"])
            token = int(np.argmax(logits))
            drafts.append(token)
            steps.append(logits)
        return drafts, steps
