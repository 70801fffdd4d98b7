"""The cost governor: speculation must never make decoding slower.

It sits beside the verify loop, not inside it. The loop reports every step
(did it draft, how many tokens it emitted, how long it took); the governor
compares the emitted-tokens-per-second of drafting steps with that of plain
steps and parks drafting while it loses, re-probing with exponential backoff.
It knows nothing about the algorithm, so a drafter however bad costs at most
its probes. With the target's step costs, measured when speculation is planned
(engine/step_costs.py), it also knows what a probe costs before running one, so
a fresh process's first short generation loses no more than a plain one; in a
batch it is charged each step's cost to the whole batch, judged against a plain
step of the same batch, and planned from the batch's row costs
(engine/batch_costs.py).
"""

from __future__ import annotations

import math
from collections import deque

from ggspec.engine.step_costs import StepCosts


class SpeculationCostGovernor:
    """should_draft() before a step; observe(...) after it.

    plain_window: plain steps the baseline rate is taken over.
    judge_window: drafting steps the running rate is taken over while drafting.
    probe_steps: drafting steps a probe gets before it is judged; a probe step
        slower than clear_loss x the plain rate ends it at once.
    probe_window: the most drafts a probe step may verify. A probe asks "does
        drafting pay at all?", and a short verify answers it for a fraction of
        the cost of a long one when the answer is no.
    park_steps / max_park_steps: the first parking length and its cap; each
        failed probe doubles it, a successful one resets it. The cap bounds how
        long a workload that turns predictable (prose, then copying) waits to re-arm.
    plain_refresh: a drafting run takes one plain step this often, so the
        baseline never goes stale when the drafter proposes on every step.
    costs: the target's measured step costs (engine/step_costs.py). With them a
        probe verifies one draft, the cheapest step that says whether drafts land,
        and is judged by its acceptance at the best window the costs allow, with
        the benefit of the doubt (one more landed draft than it saw); a drafter
        that could not pay even if every draft landed is never probed; a failed
        probe (or a losing stretch of drafting) parks long enough that it costs at
        most `overhead` of plain time, up to max_budget_park_steps (a probe whose
        drafter first catches up on rows it missed, a per-token head, costs more
        and so is probed less often); and shadow hits re-arm early only when their
        hit rate could pay.
    """

    def __init__(self, enabled: bool = True, *, plain_window: int = 16, judge_window: int = 8,
                 probe_steps: int = 2, probe_window: int = 2, clear_loss: float = 0.7, park_steps: int = 8,
                 max_park_steps: int = 128,
                 plain_refresh: int = 64, min_plain_samples: int = 2, shadow_hits_to_rearm: int = 4,
                 costs: StepCosts | None = None, overhead: float = 0.0025, max_budget_park_steps: int = 512):
        self.enabled = enabled
        self.solo_costs = costs  # its sequence's own; a batch slot's governor is handed the batch's
        self.use_costs(costs)
        self.overhead = overhead
        self.max_budget_park = max_budget_park_steps
        self.judge_window = judge_window
        self.probe_steps = probe_steps
        self.probe_window = 1 if costs is not None else probe_window
        self.clear_loss = clear_loss
        self.first_park = park_steps
        self.max_park = max_park_steps
        self.plain_refresh = plain_refresh
        self.min_plain_samples = min_plain_samples
        self.shadow_hits_to_rearm = shadow_hits_to_rearm
        self._shadow_hits = 0
        self._shadow: deque[bool] = deque(maxlen=16)  # the last shadow proposals' hits
        self._plain: deque[tuple[int, float]] = deque(maxlen=plain_window)
        self._spec: deque[tuple[int, float]] = deque(maxlen=judge_window)  # (tokens, plain's tokens)
        self._park_len = park_steps
        self._parked_left = 0
        self._probing = True          # the first drafting steps are a probe
        # a probe's steps, landed drafts, steps that missed, and plain steps' worth of time lost
        self._probed = self._landed = self._missed = 0
        self._lost = 0.0
        self._since_plain = 0
        # reported in the stats
        self.parked_steps = 0
        self.probes = 0

    def use_costs(self, costs: StepCosts | None) -> None:
        """The step costs its probes are planned and judged from: its sequence's own, or
        what a slot's rows cost its batch now (engine/batch_costs.py)."""
        self.costs = costs
        self._could_pay_now = None

    @property
    def _could_pay(self) -> bool:
        """Whether drafting could pay on these costs if every draft landed."""
        if self._could_pay_now is None:
            self._could_pay_now = self.costs is None or self.costs.best_gain(1.0) > 1.0
        return self._could_pay_now

    # --- decisions -------------------------------------------------------------
    def should_draft(self) -> bool:
        if not self.enabled:
            return True
        if len(self._plain) < self.min_plain_samples or self._since_plain >= self.plain_refresh:
            return False  # a plain step to (re)measure the baseline
        if self._parked_left > 0:
            self._parked_left -= 1
            self.parked_steps += 1
            if self._parked_left == 0:
                self._start_probe()
            return False
        if self._probing and not self._could_pay:
            self._park()  # no acceptance could pay for these steps on this machine
            return False
        return True

    def observe(self, drafted: bool, tokens: int, seconds: float, warmup: bool = False, drafts: int = 0,
                plain_seconds: float | None = None) -> None:
        """One finished step. drafted: the drafter ran for it (whether or not it
        proposed); drafts: how many it verified. warmup: it paid a one-time cost (a
        graph build), so its time says nothing about steady state and is not counted.
        plain_seconds: what a plain step would have cost in its place (a batch slot's,
        in the same batch); by default, at the recent plain steps' rate."""
        if not self.enabled:
            return
        if not drafted:
            if not warmup and seconds > 0.0:
                self._plain.append((tokens, seconds))
                self._since_plain = 0
            return
        plain_rate = 1.0 / plain_seconds if plain_seconds else self._rate(self._plain)
        if self._probing and self.costs is not None:
            # what the step lost against plain, in plain steps: measured (a drafter's catch-up
            # over the steps it was parked included), or the costs' figure when the step's
            # time is not steady; acceptance needs no clean timing
            if warmup or seconds <= 0.0 or plain_rate <= 0.0:
                lost = self.costs.extra(drafts)
            else:
                lost = seconds * plain_rate - tokens
            self._judge_probe(tokens - 1, drafts, lost)
            return
        if warmup or seconds <= 0.0:
            return
        self._since_plain += 1
        self._spec.append((tokens, seconds * plain_rate))  # its tokens, and plain's in its time
        got, plain = sum(t for t, _ in self._spec), sum(p for _, p in self._spec)
        if self._probing and len(self._spec) < self.probe_steps:
            if got < self.clear_loss * plain:
                self._park()  # no need to spend the rest of the probe on a drafter this bad
            return
        if got < plain and len(self._spec) >= self.probe_steps:
            self._park()
        elif self._probing:
            self._arm()

    def _judge_probe(self, landed: int, drafts: int, lost: float) -> None:
        self._since_plain += 1
        self._probed += 1
        self._lost += max(0.0, lost)
        self._landed += landed
        self._missed += landed < drafts or drafts == 0
        if self.costs.best_gain((self._landed + 1) / (self._landed + self._missed + 1)) <= 1.0:
            self._park()
        elif self._probed >= self.probe_steps:
            self._arm()

    def observe_shadow(self, hit: bool) -> None:
        """While parked, a speculator whose proposals cost next to nothing may still
        propose without a verify; `hit` says whether its first draft was the token
        plain decoding then emitted. A run of hits ends the parking early, so a
        workload that turns predictable (prose, then copying) re-arms within a few
        steps instead of waiting out the backoff."""
        self._shadow_hits = self._shadow_hits + 1 if hit else 0
        self._shadow.append(hit)
        if self._shadow_hits >= self.shadow_hits_to_rearm and self._parked_left > 0 and self._shadow_pays():
            self._parked_left = 0
            self._start_probe()

    def _shadow_pays(self) -> bool:
        """With costs, the recent shadow proposals' hit rate (a miss includes finding
        nothing to propose), with the benefit of the doubt, must make drafting pay at
        the best window: a few lucky hits on a machine where verify rows are dear do
        not re-arm it."""
        if self.costs is None:
            return True
        hits = sum(self._shadow)
        return self.costs.best_gain((hits + 1) / (len(self._shadow) + 2)) > 1.0

    # --- carrying over ---------------------------------------------------------
    def learned(self) -> dict:
        """What this governor has measured and decided (its baseline, its parking and
        backoff), for the next request's governor on the same drafter and batch size."""
        return {"plain": list(self._plain), "park_len": self._park_len, "parked_left": self._parked_left,
                "probing": self._probing}

    def resume(self, learned: dict) -> None:
        """Starts from another governor's learned(): a new request goes on where the last
        one left off (armed, or parked with its backoff) instead of probing afresh."""
        self._plain.extend(learned["plain"])
        self._park_len = learned["park_len"]
        self._parked_left = learned["parked_left"]
        self._probing = learned["probing"]

    # --- state -----------------------------------------------------------------
    def _park(self) -> None:
        length = self._park_len
        if self.costs is not None:
            # long enough that what the probe, or the judged drafting steps, lost is
            # `overhead` of the plain time it parks for
            judged = sum(p - t for t, p in self._spec)
            lost = self._lost + max(0.0, judged)
            length = max(length, min(self.max_budget_park, math.ceil(lost / self.overhead)))
        self._parked_left = length
        self._park_len = min(2 * length, self.max_park)
        self._spec.clear()

    def _arm(self) -> None:
        self._probing = False
        self._lost = 0.0
        self._park_len = self.first_park  # speculation pays again: a later loss parks briefly
        self._spec.clear()  # judged from here at the speculator's own window

    def _start_probe(self) -> None:
        self._shadow_hits = 0
        self._probing = True
        self._probed = self._landed = self._missed = 0
        self._lost = 0.0
        self.probes += 1
        self._spec.clear()

    @property
    def draft_limit(self) -> int | None:
        """A cap on the next step's drafts (None: the speculator's own window)."""
        return self.probe_window if self.enabled and self._probing else None

    @property
    def parked(self) -> bool:
        return self._parked_left > 0

    @property
    def never_drafts(self) -> bool:
        """The measured step costs say no window could pay even if every draft landed, so
        this governor will never let the speculator draft."""
        return self.enabled and not self._could_pay

    @staticmethod
    def _rate(samples) -> float:
        tokens = sum(t for t, _ in samples)
        seconds = sum(s for _, s in samples)
        return tokens / seconds if seconds > 0 else 0.0


class GovernorMemory:
    """What an engine's governors learned, per (speculator, drafter file, batch size):
    a request's governor starts from what the last request with the same key left
    (its plain baseline and its verdict), so a new request pays no fresh probe; within
    a request it still re-probes as it parks."""

    def __init__(self):
        self._learned: dict[tuple, dict] = {}

    @staticmethod
    def key(plan, batch: int) -> tuple | None:
        if plan.speculator is None or not plan.governor.enabled:
            return None
        return plan.speculator.name, plan.options.draft_model, plan.options.draft_threads, batch

    def start(self, governor: SpeculationCostGovernor, key: tuple | None) -> None:
        if key in self._learned:
            governor.resume(self._learned[key])

    def keep(self, governor: SpeculationCostGovernor, key: tuple | None) -> None:
        if key is not None:
            self._learned[key] = governor.learned()


__all__ = ["SpeculationCostGovernor", "GovernorMemory"]
