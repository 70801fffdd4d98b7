"""Synthetic acceptance, for benchmarks only (llama-server's --spec-synth-rates).

The verify keeps each draft with a set probability, whatever the target's rows
say, and stops at the first draft it drops; the target's own token follows, drawn
from its row as usual. Rollback and catch-up folding can then be measured at a
chosen acceptance on random weights. It changes the output, so it lives here,
outside the ggspec package: neither its CLI nor any environment variable can
reach it (tests/test_synthetic_acceptance.py).
"""

from __future__ import annotations

import numpy as np

from ggspec.engine.execution import SpeculativeExecution


class SyntheticAcceptance(SpeculativeExecution):
    """rate: the probability that each draft position is kept (given the ones before were)."""

    def __init__(self, *args, rate: float, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"synthetic acceptance rate must be in [0, 1], got {rate}")
        self.rate = rate
        self._coins = np.random.default_rng(seed)

    def _accept(self, out, drafts: list[int], first_position: int) -> list[int]:
        kept = 0
        while kept < len(drafts) and self._coins.random() < self.rate:
            kept += 1
        row = out.logits[kept], None if out.ids is None else out.ids[kept]
        return [*drafts[:kept], self.sampler.sample(*row, first_position + kept)]


__all__ = ["SyntheticAcceptance"]
