"""Mean NGramSpeculator.propose time at growing context lengths, one new token a
step: flat, since a step indexes only what was appended.

    PYTHONPATH=python python -m bench.ngram_propose
"""

from __future__ import annotations

import random
import time

from ggspec.speculators.base import DraftContext
from ggspec.speculators.ngram import NGramSpeculator

CONTEXTS = (1_000, 8_000, 32_000, 128_000)
STEPS = 5_000
VOCAB = 5_000


def make_tokens(n: int, rng: random.Random) -> list[int]:
    """Random runs with earlier passages repeated, as in code or quoted text."""
    tokens: list[int] = []
    while len(tokens) < n:
        if tokens and rng.random() < 0.3:
            start = rng.randrange(len(tokens))
            tokens += tokens[start:start + rng.randint(8, 64)]
        else:
            tokens += rng.choices(range(VOCAB), k=rng.randint(8, 64))
    return tokens[:n]


def mean_propose_us(context: int, rng: random.Random) -> tuple[float, float]:
    """(mean µs per propose, share of steps that drafted) over STEPS steps after `context` tokens."""
    tokens = make_tokens(context + STEPS, rng)
    history = tokens[:context]
    spec = NGramSpeculator()
    spec.propose(DraftContext(history, len(history) - 1, 64), [])  # indexes the context once: not a step
    seconds, drafted = 0.0, 0
    for token in tokens[context:]:
        history.append(token)
        out: list[int] = []
        ctx = DraftContext(history, len(history) - 1, 64)
        t0 = time.perf_counter()
        drafted += spec.propose(ctx, out) > 0
        seconds += time.perf_counter() - t0
    return seconds / STEPS * 1e6, drafted / STEPS


def main() -> None:
    rng = random.Random(0)
    print(f"{'context':>8}  {'propose µs':>10}  {'drafted':>7}")
    for context in CONTEXTS:
        us, drafted = mean_propose_us(context, rng)
        print(f"{context:>8}  {us:>10.2f}  {drafted:>7.0%}")


if __name__ == "__main__":
    main()
