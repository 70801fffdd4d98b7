"""Hyperparameters of a GGUF model as llama.cpp derives them, absent-key defaults included.

Sources: llama_model_base::load_hparams and the per-arch load_arch_hparams
(src/models/{llama,qwen2,qwen3,phi3,gemma3}.cpp), llama_hparams::set_swa_pattern, and
llama_context's rope parameters (none, linear, YaRN and LongRoPE scaling).
"""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGUFReader

from tests.reference.ggml_cpu import Yarn, logf

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "phi3", "gemma3", "muse-glimmer")

# llama.cpp's LLAMA_ROPE_TYPE_* per arch: llama rotates adjacent pairs, the others
# rotate (x[i], x[i + n_rot/2]).
_ROPE_MODE = {"llama": "normal", "qwen2": "neox", "qwen3": "neox", "phi3": "neox", "gemma3": "neox",
              "muse-glimmer": "normal"}


@dataclass(frozen=True)
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim_k: int
    head_dim_v: int
    n_rot: int
    rms_eps: float
    rope_mode: str
    # Per layer, because gemma3's SWA layers use their own rope base and scale.
    rope_freq_base: tuple[float, ...]
    rope_freq_scale: tuple[float, ...]
    rope_scaling: str  # none, linear, yarn or longrope
    yarn: Yarn         # ext_factor, attn_factor and YaRN's range, for every layer
    # 1/sqrt(head size), an f32 as llama.cpp computes it: the softmax scales q.k by it
    # (gemma3 and phi3: q is scaled by it before the product instead).
    attn_scale: float
    scale_q: bool
    # Per layer: keys at p0 are hidden from queries at p1 when p1 - p0 >= n_swa.
    is_swa: tuple[bool, ...]
    n_swa: int
    embd_scale: float
    final_logit_softcapping: float  # 0 means none
    logit_scale: float  # multiplies the logits before the soft-capping (muse-glimmer)


REQUIRED = object()  # read_key's default: the key must be there


def read_key(reader: GGUFReader, key: str, default: Any = REQUIRED) -> Any:
    field = reader.get_field(key)
    if field is None:
        if default is REQUIRED:
            raise KeyError(f"required key {key!r} is missing")
        return default
    return field.contents()


def _scalar(reader: GGUFReader, key: str, default: Any = REQUIRED) -> Any:
    value = read_key(reader, key, default)
    if isinstance(value, list):
        raise NotImplementedError(f"per-layer array for {key!r} is not supported by the reference")
    return value


def read_rope_scaling(reader: GGUFReader, arch: str, n_ctx_train: int) -> tuple[str, float, Yarn]:
    """(type, freq_scale, YaRN arguments) as llama_context derives them, in f32."""
    f = np.float32
    scaling = read_key(reader, f"{arch}.rope.scaling.type", "linear")
    if scaling not in ("linear", "none", "yarn", "longrope"):
        raise NotImplementedError(f"rope scaling {scaling!r} is not supported by the reference")
    # llama.cpp falls back to the old key only when the new one is absent.
    field = reader.get_field(f"{arch}.rope.scaling.factor")
    if field is None:
        field = reader.get_field(f"{arch}.rope.scale_linear")
    factor = 0.0 if field is None else field.contents()
    # Scaling type "none" never scales; a factor of 0 means no factor.
    freq_scale = f(1) if scaling == "none" or factor == 0.0 else f(1) / f(factor)
    ext_factor = 1.0 if scaling == "yarn" else 0.0
    attn_factor = f(1)
    if ext_factor:  # mscale(factor), cancelled by what ggml's rope multiplies in again
        inverse = f(1) / freq_scale
        attn_factor = f(1) if inverse <= 1 else f(0.1) * logf(inverse) + f(1)
        attn_factor = attn_factor * (f(1) / (f(1) + f(0.1) * logf(inverse)))
    attn_factor = attn_factor * f(read_key(reader, f"{arch}.rope.scaling.attn_factor", 1.0))
    n_ctx_orig = read_key(reader, f"{arch}.rope.scaling.original_context_length", 0) or n_ctx_train  # 0: absent
    return scaling, float(freq_scale), Yarn(ext_factor, float(attn_factor), n_ctx_orig)


# The architectures with sliding-window layers, and the default period of their pattern.
_SWA_PERIOD = {"gemma3": 6, "muse-glimmer": 4}


def _swa_layers(reader: GGUFReader, arch: str, n_layer: int) -> tuple[tuple[bool, ...], int]:
    n_swa = read_key(reader, f"{arch}.attention.sliding_window", 0) if arch in _SWA_PERIOD else 0
    if n_swa == 0:
        return (False,) * n_layer, 0
    pattern = read_key(reader, f"{arch}.attention.sliding_window_pattern", _SWA_PERIOD[arch])
    if isinstance(pattern, list):
        # Explicit per-layer flags; layers past the array's end are dense.
        return tuple(bool(pattern[il]) if il < len(pattern) else False for il in range(n_layer)), n_swa
    # Every n-th layer is dense, the rest SWA; a pattern of 0 makes every layer SWA.
    return tuple(pattern == 0 or il % pattern < pattern - 1 for il in range(n_layer)), n_swa


def _f32_inv_sqrt(n: int) -> float:
    """1.0f / sqrtf(float(n)), as llama.cpp computes its attention scales."""
    return float(np.float32(1) / np.sqrt(np.float32(n)))


def read_hparams(reader: GGUFReader) -> HParams:
    arch = read_key(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise NotImplementedError(f"architecture {arch!r} is not supported by the reference")
    n_embd = _scalar(reader, f"{arch}.embedding_length")
    n_layer = _scalar(reader, f"{arch}.block_count")
    n_head = _scalar(reader, f"{arch}.attention.head_count")
    head_dim_k = _scalar(reader, f"{arch}.attention.key_length", n_embd // n_head)
    head_dim_v = _scalar(reader, f"{arch}.attention.value_length", n_embd // n_head)
    n_rot = _scalar(reader, f"{arch}.rope.dimension_count", head_dim_k)

    freq_base = _scalar(reader, f"{arch}.rope.freq_base", 10000.0)
    scaling, freq_scale, yarn = read_rope_scaling(reader, arch, _scalar(reader, f"{arch}.context_length", 2048))
    is_swa, n_swa = _swa_layers(reader, arch, n_layer)
    # muse-glimmer's SWA layers default to the global base, gemma3's to llama.cpp's 10000
    freq_base_swa = _scalar(reader, f"{arch}.rope.freq_base_swa", freq_base if arch == "muse-glimmer" else 10000.0)

    if arch == "gemma3":
        # llama.cpp's f_attention_scale: Gemma 3 27B (62 layers) uses the integer
        # n_embd / n_head in place of the head size.
        attn_scale = _f32_inv_sqrt(n_embd // n_head if n_layer == 62 else head_dim_k)
        embd_scale = math.sqrt(n_embd)
        softcap = _scalar(reader, f"{arch}.final_logit_softcapping", 0.0)
    else:
        attn_scale = _f32_inv_sqrt(head_dim_v)
        embd_scale = 1.0
        softcap = _scalar(reader, f"{arch}.final_logit_softcapping", 0.0) if arch == "muse-glimmer" else 0.0

    token_embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    return HParams(
        arch=arch,
        n_vocab=int(token_embd.shape[1]),
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=_scalar(reader, f"{arch}.attention.head_count_kv", n_head),
        n_ff=_scalar(reader, f"{arch}.feed_forward_length"),
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_rot=n_rot,
        rms_eps=_scalar(reader, f"{arch}.attention.layer_norm_rms_epsilon"),
        rope_mode=_ROPE_MODE[arch],
        rope_freq_base=tuple(freq_base_swa if swa else freq_base for swa in is_swa),
        rope_freq_scale=tuple(1.0 if swa else freq_scale for swa in is_swa),
        rope_scaling=scaling,
        yarn=yarn,
        attn_scale=attn_scale,
        scale_q=arch in ("gemma3", "phi3"),
        is_swa=is_swa,
        n_swa=n_swa,
        embd_scale=embd_scale,
        final_logit_softcapping=softcap,
        logit_scale=_scalar(reader, f"{arch}.logit_scale") if arch == "muse-glimmer" else 1.0,
    )
