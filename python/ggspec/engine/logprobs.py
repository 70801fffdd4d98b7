"""Log-probabilities of emitted tokens, from the trunk row each was drawn from:
the model's own distribution (a log-softmax of the row's logits over the whole
vocabulary, before temperature and truncation), as OpenAI's and llama-server's
`logprobs` report it. A verify row has the bits of a one-row step, so speculation
changes none of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOP = 20  # OpenAI's top_logprobs ceiling


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]]  # the row's most likely tokens, best first (ties: lower id first)


def token_logprob(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    """`token`'s log-probability in a full row of logits, and the row's `top` best."""
    logits = np.asarray(row, dtype=np.float64)
    peak = logits.max()
    log_total = peak + np.log(np.exp(logits - peak).sum())
    best: list[tuple[int, float]] = []
    if top > 0:
        candidates = np.argpartition(-logits, min(top, len(logits) - 1))[:top + 1]
        order = candidates[np.lexsort((candidates, -logits[candidates]))][:top]
        best = [(int(i), float(logits[i] - log_total)) for i in order]
    return TokenLogprob(int(token), float(logits[token] - log_total), best)


__all__ = ["TokenLogprob", "token_logprob", "MAX_TOP"]
