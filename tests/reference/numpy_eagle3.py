"""A NumPy reference of the EAGLE-3 drafter (llama.cpp's `eagle3`), float64.

At decoder position P the input pair is (token P+1, g_P): g_P = fc(features at P)
for a committed position, or the decoder's own output before its final norm at P-1
for a chained draft. One layer: attention over concat(norm(embedding), norm(g)),
rope NORMAL (adjacent pairs) at P, residual g, SwiGLU FFN, final norm, LM head
(its own, maybe over a reduced vocabulary scattered through d2t, or the target's).
Written from llama.cpp's src/models/eagle3.cpp and common/speculative.cpp; the tests
check ggspec against it.
"""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader

from tests.reference.numpy_dflash import read_drafter, rms
from tests.reference.numpy_model import ReferenceModel


def rope_normal(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float) -> np.ndarray:
    """x [T, heads, D]: rotation of adjacent pairs (2i, 2i + 1) of the first n_rot dims."""
    angles = np.asarray(positions, np.float64)[:, None] * base ** (-np.arange(n_rot // 2) * 2.0 / n_rot)[None]
    c, s = np.cos(angles)[:, None], np.sin(angles)[:, None]
    out = x.copy()
    a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out[..., 0:n_rot:2] = a * c - b * s
    out[..., 1:n_rot:2] = a * s + b * c
    return out


def _scalar(reader: GGUFReader, key: str, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.parts[field.data[0]].tolist()[0]


class Eagle3Reference:
    def __init__(self, path, target: ReferenceModel):
        reader, self.w, self.d2t, self.target = read_drafter(path, target)
        self.n_embd = _scalar(reader, "eagle3.embedding_length")
        self.n_head = _scalar(reader, "eagle3.attention.head_count")
        self.n_head_kv = _scalar(reader, "eagle3.attention.head_count_kv")
        self.head_dim = _scalar(reader, "eagle3.attention.key_length", self.n_embd // self.n_head)
        self.eps = _scalar(reader, "eagle3.attention.layer_norm_rms_epsilon")
        self.base = _scalar(reader, "eagle3.rope.freq_base", 10000.0)
        self.norm_before_residual = bool(_scalar(reader, "eagle3.norm_before_residual", False))
        field = reader.fields["eagle3.target_layers"]
        self.target_layers = [field.parts[i].tolist()[0] for i in field.data]
        self.keys: list[np.ndarray] = []  # per position: K and V of the decoder layer
        self.values: list[np.ndarray] = []

    def _w(self, name: str) -> np.ndarray:
        return self.w[f"blk.0.{name}.weight"]

    def encode(self, features: np.ndarray) -> np.ndarray:
        """g [T, n_embd] from the target's concatenated tapped rows [T, 3 * width]."""
        x = np.asarray(features, np.float64)
        if "enc.output_norm.weight" in self.w:
            x = rms(x, self.w["enc.output_norm.weight"], self.eps)
        return x @ self.w["fc.weight"].T

    def step(self, token: int, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The row at the next position: (logits over the target vocabulary, the output
        before the final norm, which is a chained row's g); its K and V stay cached."""
        position = len(self.keys)
        embd = self.w.get("token_embd.weight", self.target["token_embd.weight"])
        g_norm = rms(g, self._w("attn_norm_2"), self.eps)
        x = np.concatenate([rms(embd[token], self._w("attn_norm"), self.eps), g_norm])
        q = (x @ self._w("attn_q").T).reshape(1, self.n_head, self.head_dim)
        k = (x @ self._w("attn_k").T).reshape(1, self.n_head_kv, self.head_dim)
        v = (x @ self._w("attn_v").T).reshape(self.n_head_kv, self.head_dim)
        q, k = (rope_normal(t, np.array([position]), self.head_dim, self.base)[0] for t in (q, k))
        self.keys.append(k)
        self.values.append(v)
        keys, values = np.repeat(np.stack(self.keys), self.n_head // self.n_head_kv, axis=1), \
            np.repeat(np.stack(self.values), self.n_head // self.n_head_kv, axis=1)
        s = np.einsum("hd,khd->hk", q, keys) / np.sqrt(self.head_dim)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        attended = np.einsum("hk,khd->hd", p, values).reshape(-1) @ self._w("attn_output").T
        h = attended + (g_norm if self.norm_before_residual else g)
        normed = rms(h, self._w("ffn_norm"), self.eps)
        gate = normed @ self._w("ffn_gate").T
        h = h + ((gate / (1 + np.exp(-gate))) * (normed @ self._w("ffn_up").T)) @ self._w("ffn_down").T
        head = self.w.get("output.weight", self.target.get("output.weight", self.target["token_embd.weight"]))
        logits = rms(h, self.w["output_norm.weight"], self.eps) @ head.T
        if self.d2t is not None:  # a reduced head: its rows scattered over the target's vocabulary
            full = np.full(len(self.target["token_embd.weight"]), -np.inf)
            full[self.d2t] = logits
            logits = full
        return logits, h

    def draft(self, tokens: list[int], features: np.ndarray, n: int) -> tuple[list[int], list[np.ndarray]]:
        """Greedy drafts after tokens[-1] (the pending token) from an empty cache: rows
        (tokens[P + 1], g_P) for P < len(tokens) - 1, the target's features [len(tokens) - 1,
        3 * width] at those positions, then n chained steps. Returns the drafts and each
        step's logits."""
        self.keys, self.values = [], []
        g = self.encode(features)
        for p in range(len(tokens) - 1):
            logits, h = self.step(tokens[p + 1], g[p])
        drafts, steps = [], []
        for _ in range(n):
            drafts.append(int(np.argmax(logits)))
            steps.append(logits)
            logits, h = self.step(drafts[-1], h)
        return drafts, steps
