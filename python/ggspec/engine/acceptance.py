"""How a verify's rows decide which drafts stand.

match (default): draw each row exactly as plain decoding would (same sampler,
    same (seed, position) draw) and keep drafts while the draw equals them. The
    output is the plain output, token for token, greedy or seeded.
rejection: speculative sampling (Leviathan et al., Chen et al.): accept draft d
    with probability min(1, p(d)/q(d)); on rejection draw from norm(max(0, p - q)).
    The emitted tokens follow the target's distribution exactly and more drafts
    are accepted, but the tokens are not the plain run's for a given seed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ggspec.engine.sampling import Sampler, draw, uniform
DraftDistribution = Callable[[int], "tuple[np.ndarray, np.ndarray] | None"]

# Rejection mode's accept/reject coins come from a stream of their own, so they
# never reuse the draw that picks a token at the same position.
_COIN_STREAM = 1 << 32


def _row(values: np.ndarray, ids: np.ndarray | None, i: int):
    return values[i], None if ids is None else ids[i]


def accept_match(sampler: Sampler, values: np.ndarray, ids: np.ndarray | None,
                 drafts: Sequence[int], position: int) -> list[int]:
    """Row i (0-based) draws output position `position + i`; returns the emitted
    tokens: the accepted drafts, then the target's own token."""
    emitted = []
    for i in range(len(drafts) + 1):
        token = sampler.sample(*_row(values, ids, i), position + i)
        emitted.append(token)
        if i == len(drafts) or token != drafts[i]:
            break
    return emitted


def accept_rejection(sampler: Sampler, values: np.ndarray, ids: np.ndarray | None,
                     drafts: Sequence[int], position: int, draft_distribution: DraftDistribution) -> list[int]:
    seed = sampler.config.seed
    emitted = []
    for i, d in enumerate(drafts):
        p_ids, p_weights = sampler.distribution(*_row(values, ids, i))
        p = dict(zip(p_ids.tolist(), (p_weights / p_weights.sum()).tolist()))
        q_ids, q_probs = draft_distribution(i) or (np.array([d]), np.array([1.0]))
        q = dict(zip(np.asarray(q_ids).tolist(), np.asarray(q_probs, dtype=np.float64).tolist()))
        q_d = q.get(d, 0.0)
        if q_d > 0.0 and uniform(seed + _COIN_STREAM, position + i) < min(1.0, p.get(d, 0.0) / q_d):
            emitted.append(d)
            continue
        residual = {t: pt - q.get(t, 0.0) for t, pt in p.items() if pt > q.get(t, 0.0)}
        if not residual:  # p == q on their support: the residual is empty, p itself is exact
            residual = p
        tokens = np.array(sorted(residual))
        emitted.append(draw(tokens, np.array([residual[t] for t in tokens]), uniform(seed, position + i)))
        return emitted
    emitted.append(sampler.sample(*_row(values, ids, len(drafts)), position + len(drafts)))
    return emitted


__all__ = ["accept_match", "accept_rejection"]
