"""What a slot's step cost the whole batch, for its governor.

In a batch the question is not "is drafting faster for me?" but "do this slot's
drafts buy the batch more tokens than its extra rows cost everyone?". A step of
N decoding slots with R rows in all takes T; a slot's share is the step it would
have been with one row per slot, split evenly, plus the marginal cost of its own
extra rows, plus its drafting time (the batch waits for it). Its governor then
compares its tokens per share with its plain share's rate: drafting a rows' worth
of tokens pays exactly when the batch's throughput rises. With one slot the share
is the step's time, as before.

The marginal cost of a row at batch size N is fitted from recent steps at that
size (rows vary as slots draft or not); until they vary, it comes from the
target's measured step costs (engine/step_costs.py), and without those every row
is charged the average.
"""

from __future__ import annotations

from collections import deque


class BatchRowCosts:
    def __init__(self, window: int = 32, min_samples: int = 4):
        self.window = window
        self.min_samples = min_samples
        self._samples: dict[int, deque[tuple[int, float]]] = {}

    def observe(self, n_slots: int, rows: int, seconds: float) -> None:
        """A steady decode step: n_slots slots, rows rows in all, its forward's seconds."""
        self._samples.setdefault(n_slots, deque(maxlen=self.window)).append((rows, seconds))

    def marginal(self, n_slots: int, prior: float | None) -> float | None:
        """Seconds one more row adds to a step of n_slots slots (None: unknown)."""
        samples = self._samples.get(n_slots, ())
        if len(samples) >= self.min_samples:
            n = len(samples)
            mean_r = sum(r for r, _ in samples) / n
            mean_t = sum(t for _, t in samples) / n
            var = sum((r - mean_r) ** 2 for r, _ in samples)
            if var > 0:
                return sum((r - mean_r) * (t - mean_t) for r, t in samples) / var
        return prior

    def shares(self, seconds: float, rows: list[int], draft_seconds: list[float],
               prior: float | None) -> list[float]:
        """Each decoding slot's share of a step's `seconds`, given its rows and its drafting time."""
        n, total = len(rows), sum(rows)
        b = self.marginal(n, prior)
        average = seconds / total
        b = average if b is None else min(max(b, 0.0), average)  # a marginal row costs at most the average
        base = seconds - b * (total - n)  # the step with one row per slot
        return [base / n + b * (r - 1) + d for r, d in zip(rows, draft_seconds)]


__all__ = ["BatchRowCosts"]
