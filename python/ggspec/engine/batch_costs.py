"""What a slot's rows cost the whole batch, for its governor.

In a batch the question is not "is drafting faster for me?" but "do this slot's
drafts buy the batch more tokens than its extra rows cost everyone?". Steps are
timed by their slots and rows in all: T(n, R), the mean of recent steady steps of
n decoding slots and R rows. A slot of a batch of n then sees StepCosts of its
own (engine/step_costs.py):
- its plain step is the batch's one-row-each step split evenly, T(n, n) / n;
- its k-row verify adds what k - 1 more rows add to that step,
  T(n, n + k - 1) - T(n, n);
- its drafter's passes are its own (the batch waits for them).

Its governor judges each drafting step against the plain step of the same batch,
so a baseline measured at another batch size never flatters drafting, and the
probe's planning (best_gain) uses the batch's row costs, not one sequence's: on a
CPU an extra row costs a plain one-row step little, but a batch of 4 slots' row
nearly as much as its own plain share. The table is read, not fitted: the first
extra row costs more than later ones (a multi-row kernel's row groups), which a
straight line would undercharge. Between and past the measured totals the costs
go on at the fitted slope; with no extra rows measured yet, at the target's
measured marginal row.
"""

from __future__ import annotations

from collections import deque

from ggspec.engine.step_costs import StepCosts


class BatchRowCosts:
    """window: steps kept per (slots, rows); min_samples: steps a total needs to be read."""

    def __init__(self, window: int = 16, min_samples: int = 2, fit_window: int = 64):
        self.window = window
        self.min_samples = min_samples
        self._times: dict[tuple[int, int], deque[float]] = {}
        self._recent: dict[int, deque[tuple[int, float]]] = {}  # per slots: (rows, seconds), for the slope
        self._fit_window = fit_window

    def observe(self, n_slots: int, rows: int, seconds: float) -> None:
        """A steady decode step: n_slots slots, rows rows in all, its forward's seconds."""
        self._times.setdefault((n_slots, rows), deque(maxlen=self.window)).append(seconds)
        self._recent.setdefault(n_slots, deque(maxlen=self._fit_window)).append((rows, seconds))

    def slope(self, n_slots: int, prior: float | None) -> float | None:
        """Seconds a row adds to a step of n_slots slots, fitted over recent steps (the
        prior until their rows vary)."""
        samples = self._recent.get(n_slots, ())
        if len(samples) >= 2:
            mean_r = sum(r for r, _ in samples) / len(samples)
            mean_t = sum(t for _, t in samples) / len(samples)
            var = sum((r - mean_r) ** 2 for r, _ in samples)
            if var > 0:
                return max(0.0, sum((r - mean_r) * (t - mean_t) for r, t in samples) / var)
        return prior

    def slot_rows(self, n_slots: int, prior: float | None) -> tuple[tuple[int, float], ...] | None:
        """A slot's verify in a batch of n_slots, as StepCosts rows: (k rows, seconds) from
        its plain share at k = 1, with the extra rows at what they add to the batch's step
        (prior: a row's cost until the batch's rows vary; without one, the average row's).
        None until the batch's plain step has been measured."""
        plain = self._mean(n_slots, n_slots)
        if plain is None:
            return None
        slope = self.slope(n_slots, prior)
        if slope is None:
            slope = plain / n_slots
        measured = sorted(rows for (n, rows) in self._times if n == n_slots and rows > n_slots
                          and self._mean(n, rows) is not None)
        points, last = [(1, plain / n_slots)], plain
        for rows in measured:
            last = max(last, self._mean(n_slots, rows))  # more rows never cost less
            points.append((1 + rows - n_slots, plain / n_slots + last - plain))
        k, seconds = points[-1]
        points.append((k + 1, seconds + slope))  # past the measured totals, at the fitted slope
        return tuple(points)

    def _mean(self, n_slots: int, rows: int) -> float | None:
        times = self._times.get((n_slots, rows), ())
        return sum(times) / len(times) if len(times) >= self.min_samples else None


def slot_costs(rows: tuple[tuple[int, float], ...], solo: StepCosts | None) -> StepCosts:
    """A slot's StepCosts in its batch: the batch's rows (BatchRowCosts.slot_rows), its
    own drafter's passes and window (solo: its sequence's measured costs, if any)."""
    if solo is None:
        return StepCosts(rows, ((1, 0.0),), False, 1)
    return StepCosts(rows, solo.passes, solo.pass_per_draft, solo.window)


__all__ = ["BatchRowCosts", "slot_costs"]
