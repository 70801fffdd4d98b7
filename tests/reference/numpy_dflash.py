"""A NumPy reference of the DFlash drafter (llama.cpp's `dflash`), float64.

inject(): passes A+B, the K/V of committed positions from the target's feature
rows; draft(): pass C over [anchor, MASK x n_max], non-causal over context and
block, then the (target's or own) LM head. Checked against llama.cpp's drafts
while the spec was written; the tests check ggspec against it.
"""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader, quants

from tests.reference.numpy_model import ReferenceModel


def rms(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def rope_neox(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float) -> np.ndarray:
    """x [T, heads, D]: NeoX rotation of the first n_rot dims (pairs i, i + n_rot/2)."""
    half = n_rot // 2
    angles = np.asarray(positions, np.float64)[:, None] * base ** (-np.arange(half) * 2.0 / n_rot)[None]
    c, s = np.cos(angles)[:, None], np.sin(angles)[:, None]
    out = x.copy()
    a, b = x[..., :half], x[..., half:n_rot]
    out[..., :half] = a * c - b * s
    out[..., half:n_rot] = a * s + b * c
    return out


def _metadata(reader: GGUFReader) -> dict:
    meta = {}
    for field in reader.fields.values():
        if not field.types:
            continue
        if field.types[0].name == "ARRAY":
            if field.name.startswith("dflash."):
                meta[field.name] = [field.parts[i].tolist()[0] for i in field.data]
        elif field.types[0].name == "STRING":
            meta[field.name] = bytes(field.parts[field.data[0]]).decode()
        else:
            meta[field.name] = field.parts[field.data[0]].tolist()[0]
    return meta


class DFlashReference:
    def __init__(self, path, target: ReferenceModel):
        reader = GGUFReader(path)
        self.w = {t.name: np.array(quants.dequantize(t.data, t.tensor_type), np.float64) for t in reader.tensors}
        self.target = {name: np.asarray(t, np.float64) for name, t in target.weights.items()}
        m = _metadata(reader)
        self.n_embd, self.n_layer = m["dflash.embedding_length"], m["dflash.block_count"]
        self.n_head, self.n_head_kv = m["dflash.attention.head_count"], m["dflash.attention.head_count_kv"]
        self.head_dim = m.get("dflash.attention.key_length", self.n_embd // self.n_head)
        self.eps = m["dflash.attention.layer_norm_rms_epsilon"]
        self.base = m.get("dflash.rope.freq_base", 10000.0)
        self.n_rot = m.get("dflash.rope.dimension_count", self.head_dim)
        self.target_layers = m["dflash.target_layers"]
        self.mask = m["tokenizer.ggml.mask_token_id"]
        self.n_swa = m.get("dflash.attention.sliding_window", 0)
        self.swa = m["dflash.attention.sliding_window_pattern"] if self.n_swa else [False] * self.n_layer

    def _layer(self, il: int, name: str):
        return self.w.get(f"blk.{il}.{name}.weight")

    def _keys_values(self, il: int, x: np.ndarray, positions: np.ndarray):
        raw = (x @ self._layer(il, "attn_k").T).reshape(len(x), self.n_head_kv, self.head_dim)
        k = rope_neox(rms(raw, self._layer(il, "attn_k_norm"), self.eps), positions, self.n_rot, self.base)
        wv = self._layer(il, "attn_v")
        v = (x @ wv.T).reshape(raw.shape) if wv is not None else rms(raw, None, self.eps)
        return k, v

    def inject(self, features: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per layer (K, V) [P, n_head_kv, head_dim] of committed positions 0..P-1."""
        g = rms(np.asarray(features, np.float64) @ self.w["fc.weight"].T, self.w["enc.output_norm.weight"], self.eps)
        positions = np.arange(len(g))
        return [self._keys_values(il, g, positions) for il in range(self.n_layer)]

    def draft(self, context, anchor: int, n_max: int) -> np.ndarray:
        """Logits [n_max, n_vocab] of the MASK rows of [anchor, MASK x n_max] at positions P.."""
        pos0, n = len(context[0][0]), n_max + 1
        positions = np.arange(pos0, pos0 + n)
        embd = self.w.get("token_embd.weight", self.target["token_embd.weight"])
        x = embd[[anchor] + [self.mask] * n_max].copy()
        for il in range(self.n_layer):
            h = rms(x, self._layer(il, "attn_norm"), self.eps)
            q = (h @ self._layer(il, "attn_q").T).reshape(n, self.n_head, self.head_dim)
            q = rope_neox(rms(q, self._layer(il, "attn_q_norm"), self.eps), positions, self.n_rot, self.base)
            k, v = self._keys_values(il, h, positions)
            keys, values = np.concatenate([context[il][0], k]), np.concatenate([context[il][1], v])
            key_positions = np.concatenate([np.arange(pos0), positions])
            hidden = np.zeros((n, len(key_positions)), bool)  # non-causal
            if self.n_swa and self.swa[il]:
                hidden |= positions[:, None] - key_positions[None] >= self.n_swa
            group = self.n_head // self.n_head_kv
            s = np.einsum("thd,khd->htk", q, np.repeat(keys, group, axis=1)) / np.sqrt(self.head_dim)
            s = np.where(hidden[None], -np.inf, s)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            o = np.einsum("htk,khd->thd", p, np.repeat(values, group, axis=1)).reshape(n, -1)
            x = x + o @ self._layer(il, "attn_output").T
            h = rms(x, self._layer(il, "ffn_norm"), self.eps)
            gate = h @ self._layer(il, "ffn_gate").T
            x = x + ((gate / (1 + np.exp(-gate))) * (h @ self._layer(il, "ffn_up").T)) @ self._layer(il, "ffn_down").T
        final = rms(x, self.w["output_norm.weight"], self.eps)
        head = self.w.get("output.weight", self.w.get("token_embd.weight",
                                                      self.target.get("output.weight", self.target["token_embd.weight"])))
        return (final @ head.T)[1:]
