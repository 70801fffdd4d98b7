"""What a step costs on this target: the verify-row curve and the drafter's pass,
measured once per target and drafter when speculation is first planned, so the
governor's first probe is planned from costs instead of found out by losing.

A probe then asks the cheapest question that can settle "could this drafter
pay?" (one draft) and judges the answer against the best window the costs allow
(engine/governor.py). Measuring runs the probe's and the full window's shapes once,
so their graphs are built at setup, not in the first steps of a request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ggspec.speculators.base import DraftContext, Speculator


@dataclass(frozen=True)
class StepCosts:
    """rows: (rows through the LM head, seconds of that forward), ascending from 1 row.
    passes: (drafts, seconds of the drafter's pass proposing them), for 1 and the
    measured window; pass_per_draft: a pass per draft (a per-token head), else one
    pass proposes them all (a block drafter, n-gram), at a cost that grows with them.
    window: the speculator's most drafts per step."""

    rows: tuple[tuple[int, float], ...]
    passes: tuple[tuple[int, float], ...]
    pass_per_draft: bool
    window: int

    @property
    def plain(self) -> float:
        return self.rows[0][1]

    def verify(self, n_rows: int) -> float:
        """The forward of n_rows rows."""
        return _interpolate(self.rows, n_rows)

    def draft(self, drafts: int) -> float:
        """The drafter's passes proposing `drafts` drafts."""
        if self.pass_per_draft:
            return drafts * self.passes[0][1]
        return _interpolate(self.passes, drafts)

    def step(self, drafts: int) -> float:
        """A step that verifies `drafts` drafts, with the drafter's passes."""
        return self.verify(drafts + 1) + self.draft(drafts)

    def marginal_row(self) -> float:
        """What one more verify row adds to a forward, over the measured window."""
        return (self.verify(1 + self.window) - self.plain) / self.window

    def extra(self, drafts: int) -> float:
        """What a `drafts`-draft step costs beyond a plain step, in plain steps."""
        return self.step(drafts) / self.plain - 1.0

    def best_gain(self, acceptance: float) -> float:
        """Tokens per plain-step time at the best window, against plain's 1, when each
        draft lands with probability `acceptance` given the ones before it landed."""
        best, expected, landing = 0.0, 1.0, 1.0  # the bonus token, then each landed draft
        for w in range(1, self.window + 1):
            landing *= acceptance
            expected += landing
            best = max(best, expected * self.plain / self.step(w))
        return best


def _interpolate(points: tuple[tuple[int, float], ...], x: int) -> float:
    """Piecewise linear between measured (x, seconds) points, extended past the last
    with the last segment's slope; one point is a constant."""
    if len(points) == 1:
        return points[0][1]
    segments = list(zip(points, points[1:]))
    (x0, s0), (x1, s1) = next((seg for seg in segments if x <= seg[1][0]), segments[-1])
    return s0 + (s1 - s0) * (x - x0) / (x1 - x0)


#: the most drafts a measurement verifies: a longer window's rows are extrapolated
#: (n-gram windows reach 64, whose forward would cost setup more than it tells)
MEASURED_WINDOW = 15


def measure_step_costs(target, speculator: Speculator) -> StepCosts | None:
    """Times forwards of 1, 2 and window + 1 rows and one drafter pass on the sequence a
    request is being planned for, and leaves it empty: planning comes before a request
    sets its sequence up, and the prefix cache sees that the sequence changed (its
    stamp), so nothing it held is taken for reused. Each shape runs twice; the second
    is timed. None when the context has no room for a draft."""
    # a SequenceView empties its own sequence; a Target, the first one (where one-slot plans run)
    empty = (lambda: target.reset_sequence(0)) if hasattr(target, "reset_sequence") else target.reset
    window = min(speculator.max_draft_tokens, target.max_verify_rows - 1, target.max_context_length - 2)
    if window < 1:
        return None
    measured = min(window, MEASURED_WINDOW)
    sizes = sorted({1, 2, measured + 1})
    windows = (1,) if speculator.pass_per_draft else tuple(sorted({1, measured}))
    taps = tuple(speculator.hidden_layers) if speculator.needs_hidden_state else ()
    empty()
    try:
        for _ in range(2):
            rows, passes = [], []
            for n in sizes:
                t0 = time.perf_counter()
                target.spec_forward([0] * n, all_logits=n > 1, hidden_layers=taps, top_k=1)
                rows.append((n, time.perf_counter() - t0))
                empty()
            for w in windows:
                # a pass: the drafter reads the committed row at 0, which the target holds (a
                # Gemma 4 assistant attends over its cache), and drafts from the token at 1
                hidden = target.spec_forward([0], hidden_layers=taps, top_k=1).hidden
                speculator.commit([0], hidden, 0)
                t0 = time.perf_counter()
                speculator.propose(DraftContext([0, 0], 1, w, hidden), [])
                passes.append((w, time.perf_counter() - t0))
                speculator.reset()
                empty()
    finally:
        empty()
        speculator.reset()
    return StepCosts(tuple(rows), tuple(passes), speculator.pass_per_draft, window)


__all__ = ["StepCosts", "measure_step_costs"]
