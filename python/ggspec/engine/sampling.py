"""Token sampling: llama.cpp's chain (top-k → top-p → min-p → temperature → draw)
with a random draw that depends only on (seed, position).

Because the draw for position p is a pure function of (seed, p), any decoding
strategy that hands position p the same logits emits the same token. The target
gives verify rows the same bits as one-row steps, so speculative decoding
reproduces plain sampled output exactly.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    # SplitMix64's finalizer: a bijection on 64 bits with full avalanche.
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def uniform(seed: int, position: int) -> float:
    """A uniform draw in [0, 1) for output position `position` under `seed`."""
    h = _mix64((_mix64(seed & _MASK64) + 0x9E3779B97F4A7C15 * (position + 1)) & _MASK64)
    return (h >> 11) * (1.0 / (1 << 53))


def random_seed() -> int:
    """A fresh seed for an unseeded run (reported in the stats so the run can be repeated)."""
    return int.from_bytes(os.urandom(4), "little")


@dataclass(frozen=True)
class SamplerConfig:
    """llama.cpp's sampling parameters and defaults (common_params_sampling)."""

    temperature: float = 0.8   # <= 0: greedy
    top_k: int = 40            # <= 0: the whole vocabulary
    top_p: float = 0.95        # 1.0: off
    min_p: float = 0.05        # 0.0: off
    seed: int = 0

    def __post_init__(self):
        if not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be a finite number, got {self.temperature}")
        if not 0.0 <= self.top_p <= 1.0:
            raise ValueError(f"top_p must be in [0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise ValueError(f"seed must be in [0, 2^32 - 1], got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Sampler:
    """Draws a token from one row of target output at a known output position."""

    def __init__(self, config: SamplerConfig, n_vocab: int):
        self.config = config
        self.n_vocab = n_vocab

    @property
    def forward_top_k(self) -> int:
        """What the target should compute in its graph for each row: 1 = the argmax,
        k = the top k (the chain never looks past them), 0 = full logits (top-k off)."""
        if self.config.greedy:
            return 1
        k = self.config.top_k
        return k if 0 < k < self.n_vocab else 0

    def sample(self, values: np.ndarray, ids: np.ndarray | None, position: int) -> int:
        """One row: `values` are the row's top-k logits with their `ids` (best first),
        or the full logits when `ids` is None. `position` is the output position."""
        candidates, weights = self.distribution(values, ids)
        if len(candidates) == 1:  # greedy, or a chain that kept one token: nothing to draw
            return int(candidates[0])
        return draw(candidates, weights, uniform(self.config.seed, position))

    def distribution(self, values: np.ndarray, ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The chain's final distribution over one row: (ids best first, unnormalized
        weights). Greedy is a one-hot at the argmax."""
        logits = np.asarray(values, dtype=np.float64)
        ids = np.arange(len(logits)) if ids is None else np.asarray(ids)
        c = self.config
        if c.greedy:  # the argmax, ties to the lower id, in one pass over the row
            best = np.flatnonzero(logits == logits.max())
            return ids[best[[np.argmin(ids[best])]]], np.ones(1)
        if 0 < c.top_k < len(logits):
            keep = _best_first(logits, ids, np.arange(len(logits)))[:c.top_k]
            logits, ids = logits[keep], ids[keep]
        top = logits.max()
        # top-p and min-p each keep a best-first prefix, so only the candidates
        # min-p can keep need sorting (this matters for a full 262k-entry row).
        candidates = np.arange(len(logits))
        if c.min_p > 0.0:
            candidates = np.flatnonzero(logits >= top + math.log(c.min_p))
        candidates = _best_first(logits, ids, candidates)
        if c.top_p < 1.0:
            p = np.exp(logits - top)
            cumulative = np.cumsum(p[candidates]) / p.sum()
            candidates = candidates[:int(np.searchsorted(cumulative, c.top_p, side="left")) + 1]
        return ids[candidates], np.exp((logits[candidates] - top) / c.temperature)


# Rejection mode: a drafter's draws come from a stream of their own, apart from the
# draw that picks the target's token and from the accept/reject coins (acceptance.py).
_DRAFT_STREAM = 2 << 32


class DraftSampler:
    """The request's chain applied to a drafter's rows, for rejection mode: q, and a draw
    from q at an output position. Only ids below n_vocab (what the target can verify)
    are drawn; q is renormalized over them, so that it is the distribution the draft
    really came from."""

    def __init__(self, sampler: Sampler, n_vocab: int):
        self.sampler = sampler
        self.n_vocab = n_vocab

    @property
    def forward_top_k(self) -> int:
        return self.sampler.forward_top_k

    def distribution(self, values: np.ndarray, ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """q over one drafter row (its top-k logits and ids, or full logits): (ids, probabilities),
        or None when the chain keeps no id the target has."""
        q_ids, weights = self.sampler.distribution(values, ids)
        keep = q_ids < self.n_vocab
        if not keep.any():
            return None
        q_ids, weights = q_ids[keep], weights[keep]
        return q_ids, weights / weights.sum()

    def draw(self, q: tuple[np.ndarray, np.ndarray], position: int) -> int:
        """A draft for output position `position`, drawn from q."""
        q_ids, probs = q
        if len(q_ids) == 1:
            return int(q_ids[0])
        return draw(q_ids, probs, uniform(self.sampler.config.seed + _DRAFT_STREAM, position))

    def sample(self, values: np.ndarray, ids: np.ndarray | None,
               position: int) -> tuple[int, tuple[np.ndarray, np.ndarray]] | None:
        """(a draft for `position` drawn from q over this row, q), or None (no id to draw)."""
        q = self.distribution(values, ids)
        return None if q is None else (self.draw(q, position), q)


def draw(ids: np.ndarray, weights: np.ndarray, u: float) -> int:
    """Inverse-CDF draw of one id, given a uniform u in [0, 1)."""
    cumulative = np.cumsum(weights)
    pick = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
    return int(ids[min(pick, len(ids) - 1)])


def _best_first(logits: np.ndarray, ids: np.ndarray, subset: np.ndarray) -> np.ndarray:
    # Best first, ties to the lower id: the order the in-graph top-k reports, so a
    # row gives the same candidates whichever way it was read.
    return subset[np.lexsort((ids[subset], -logits[subset]))]


__all__ = ["Sampler", "SamplerConfig", "DraftSampler", "uniform", "random_seed", "draw"]
