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


def grouped_conv(x: np.ndarray, dyn: np.ndarray, base: np.ndarray, side: int, kernel: int, group: int) -> np.ndarray:
    """DFlash2's conv over one block: y[t] = sum_tap (base[side, tap] + dyn[t, side, tap, c // group]) * x[t - tap],
    x[t < 0] = 0. x [n, E], dyn [n, 2 * kernel * E / group], base [2, kernel, E]."""
    n, width = x.shape
    d = dyn.reshape(n, 2, kernel, width // group)[:, side]
    w = base[side][None] + np.repeat(d, group, axis=2)
    y = np.zeros_like(x)
    for tap in range(min(kernel, n)):
        y[tap:] += w[tap:, tap] * x[:n - tap]
    return y


def read_drafter(path, target: ReferenceModel) -> tuple[GGUFReader, dict, np.ndarray | None, dict]:
    """A drafter file's reader, its weights (float64 by name), its d2t map (or None) and its
    target's weights (float64 by name)."""
    reader = GGUFReader(path)
    weights = {t.name: np.array(quants.dequantize(t.data, t.tensor_type), np.float64) for t in reader.tensors
               if t.name != "d2t"}
    d2t = next((np.array(t.data, np.int64) for t in reader.tensors if t.name == "d2t"), None)
    return reader, weights, d2t, {name: np.asarray(t, np.float64) for name, t in target.weights.items()}


class DFlashReference:
    def __init__(self, path, target: ReferenceModel):
        reader, self.w, self.d2t, self.target = read_drafter(path, target)
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
        self.dflash2 = "selector_hidden.weight" in self.w
        self.sample_from_anchor = bool(m.get("dflash.sample_from_anchor", True))
        if self.dflash2:
            self.kernel, self.group = m["dflash.conv_kernel_size"], m["dflash.conv_group_size"]
            self.top_k = m["dflash.selector_top_k"]
            self.logit_scale = m.get("dflash.logit_scale", 0.0)
            self.softcap = m.get("dflash.final_logit_softcapping", 0.0)

    def _layer(self, il: int, name: str):
        return self.w.get(f"blk.{il}.{name}.weight")

    def _keys_values(self, il: int, x: np.ndarray, positions: np.ndarray):
        raw = (x @ self._layer(il, "attn_k").T).reshape(len(x), self.n_head_kv, self.head_dim)
        k = rope_neox(rms(raw, self._layer(il, "attn_k_norm"), self.eps), positions, self.n_rot, self.base)
        wv = self._layer(il, "attn_v")
        v = (x @ wv.T).reshape(raw.shape) if wv is not None else rms(raw, None, self.eps)
        return k, v

    def inject(self, features: np.ndarray, start: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per layer (K, V) [P, n_head_kv, head_dim] of committed positions start..start+P-1,
        and those positions: the ones before start are not in the context."""
        g = rms(np.asarray(features, np.float64) @ self.w["fc.weight"].T, self.w["enc.output_norm.weight"], self.eps)
        positions = np.arange(start, start + len(g))
        return [(*self._keys_values(il, g, positions), positions) for il in range(self.n_layer)]

    def _convolved(self, il: int, side: str, normed: np.ndarray, sublayer) -> np.ndarray:
        if not self.dflash2:
            return sublayer(normed)
        base, dyn = self.w[f"blk.{il}.{side}_conv_base"], normed @ self._layer(il, f"{side}_conv_proj").T
        inner = sublayer(grouped_conv(normed, dyn, base, 0, self.kernel, self.group))
        return grouped_conv(inner, dyn, base, 1, self.kernel, self.group)

    def draft(self, context, anchor: int, n_max: int) -> np.ndarray:
        """Logits [n_max, n_vocab] of the MASK rows of [anchor, MASK x n_max] at the positions
        after the context's last; a DFlash2 drafter's after its logit transform."""
        logits, _ = self._block(context, [anchor] + [self.mask] * n_max)
        return logits[1:]

    def dspark_draft(self, context, anchor: int, n: int) -> tuple[list[int], np.ndarray, np.ndarray | None]:
        """A DSpark drafter's n greedy drafts, their Markov-biased logits [n, n_vocab] and
        confidences [n] (None without the head). Anchor-first: [anchor, MASK x (n - 1)],
        each row predicting the token after it; else [anchor, MASK x n] and the MASK rows.
        Row i's bias is markov_w2 @ markov_w1[prev], prev the anchor for the first row and
        the greedy pick of the row before after (llama.cpp's in-graph chain)."""
        first = 0 if self.sample_from_anchor else 1
        logits, final = self._block(context, [anchor] + [self.mask] * (n - 1 + first))
        w1, w2 = self.w["markov_w1.weight"], self.w["markov_w2.weight"]
        tokens, rows, confidence, prev = [], [], [], anchor
        for i in range(first, first + n):
            bias = w2 @ w1[prev]
            if self.d2t is not None:  # the head's rows scattered over the target's vocabulary
                full = np.zeros(logits.shape[1])
                full[self.d2t] = bias
                bias = full
            row = logits[i] + bias
            if "conf_proj.weight" in self.w:
                z = self.w["conf_proj.weight"].reshape(-1) @ np.concatenate([final[i], w1[prev]])
                confidence.append(1.0 / (1.0 + np.exp(-(z + self.w.get("conf_proj.bias", np.zeros(1))[0]))))
            prev = int(np.argmax(row))
            tokens.append(prev)
            rows.append(row)
        return tokens, np.array(rows), np.array(confidence) if confidence else None

    def walk(self, context, anchor: int, n_max: int) -> tuple[list[int], list[float]]:
        """DFlash2's greedy walk over its lattice: the draft and each position's probability
        (softmax of the top-k candidates' scores given the chosen predecessor)."""
        logits, final = self._block(context, [anchor] + [self.mask] * n_max)
        gate = final @ self.w["selector_hidden.weight"].T
        pred_codes, succ_codes = self.w["selector_predecessor.weight"], self.w["selector_successor.weight"]
        tokens, probabilities, previous = [], [], anchor
        for i in range(1, n_max + 1):
            cand = np.argsort(-logits[i], kind="stable")[:self.top_k]
            scores = logits[i, cand] + (pred_codes[previous] * gate[i]) @ succ_codes[cand].T
            j = int(np.argmax(scores))
            previous = int(cand[j])
            tokens.append(previous)
            probabilities.append(float(1.0 / np.exp(scores - scores[j]).sum()))
        return tokens, probabilities

    def _block(self, context, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        context_positions = context[0][2]
        pos0, n = context_positions[-1] + 1, len(tokens)
        positions = np.arange(pos0, pos0 + n)
        embd = self.w.get("token_embd.weight", self.target["token_embd.weight"])
        x = embd[tokens].copy()
        for il in range(self.n_layer):
            def attention(h, il=il):
                q = (h @ self._layer(il, "attn_q").T).reshape(n, self.n_head, self.head_dim)
                q = rope_neox(rms(q, self._layer(il, "attn_q_norm"), self.eps), positions, self.n_rot, self.base)
                k, v = self._keys_values(il, h, positions)
                keys, values = np.concatenate([context[il][0], k]), np.concatenate([context[il][1], v])
                key_positions = np.concatenate([context_positions, positions])
                hidden = np.zeros((n, len(key_positions)), bool)  # non-causal
                if self.n_swa and self.swa[il]:
                    hidden |= positions[:, None] - key_positions[None] >= self.n_swa
                group = self.n_head // self.n_head_kv
                s = np.einsum("thd,khd->htk", q, np.repeat(keys, group, axis=1)) / np.sqrt(self.head_dim)
                s = np.where(hidden[None], -np.inf, s)
                p = np.exp(s - s.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                o = np.einsum("htk,khd->thd", p, np.repeat(values, group, axis=1)).reshape(n, -1)
                return o @ self._layer(il, "attn_output").T

            def ffn(h, il=il):
                gate = h @ self._layer(il, "ffn_gate").T
                return ((gate / (1 + np.exp(-gate))) * (h @ self._layer(il, "ffn_up").T)) @ self._layer(il, "ffn_down").T

            x = x + self._convolved(il, "attn", rms(x, self._layer(il, "attn_norm"), self.eps), attention)
            x = x + self._convolved(il, "ffn", rms(x, self._layer(il, "ffn_norm"), self.eps), ffn)
        final = rms(x, self.w["output_norm.weight"], self.eps)
        head = self.w.get("output.weight", self.w.get("token_embd.weight",
                                                      self.target.get("output.weight", self.target["token_embd.weight"])))
        logits = final @ head.T
        if self.d2t is not None:  # a reduced head: its rows scattered over the target's vocabulary
            full = np.full((len(logits), len(self.target["token_embd.weight"])), -np.inf)
            full[:, self.d2t] = logits
            logits = full
        if self.dflash2:
            if self.logit_scale:
                logits = logits * self.logit_scale
            if self.softcap > 0:
                logits = self.softcap * np.tanh(logits / self.softcap)
        return logits, final
