"""Continuous batching: the requests of an Engine with several slots, each on a
sequence of the target's cache, all their rows in ONE forward per step.

Each step, in first-come order:
- a request that was cancelled leaves its slot at once;
- waiting requests take free slots;
- every decoding slot plans its step (the pending token and its drafts);
- prompts advance by chunks, at most max_batch_rows prompt tokens a step in all,
  so a long prompt delays the other slots by at most one chunk per step.

A slot's rows get the bits its sequence alone would get (Target.forward_batch),
so its tokens are the ones the same request gives alone, whatever the other
slots do. Its governor is charged what the slot's rows cost the batch, against
a plain step's share of the same batch (engine/batch_costs.py), so drafting is
kept where it pays for the batch.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from ggspec.engine.batch_costs import BatchRowCosts, slot_costs
from ggspec.engine.execution import SpeculativeExecution, StepPlan
from ggspec.engine.governor import GovernorMemory, SpeculationCostGovernor
from ggspec.engine.planner import (SpeculationPlan, attached_drafter, check_draft_model, drafter_attached,
                                   plan_speculation)
from ggspec.engine.prefix_cache import prefix_cache_of
from ggspec.engine.request_run import RequestRun, new_execution
from ggspec.engine.stream import Request
from ggspec.native.sequence_view import SequenceView
from ggspec.native.target import BatchItem, ForwardResult
from ggspec.speculators.options import SpecOptions


class _Slot:
    """A running request on sequence `seq`."""

    def __init__(self, seq: int, run: RequestRun, governor_key: tuple | None):
        self.seq = seq
        self.run = run
        self.governor_key = governor_key  # where its governor's learning goes when it ends
        self.history = list(run.request.prompt_ids)
        self.prefilled = run.execution.prefix.reused  # prompt tokens in the KV (a reused prefix first)
        self.produced = 0   # tokens emitted

    @property
    def prompt(self) -> list[int]:
        return self.run.request.prompt_ids

    @property
    def execution(self) -> SpeculativeExecution:
        return self.run.execution


class BatchScheduler:
    def __init__(self, model, n_slots: int):
        self.model = model
        self.target = model.target
        self.n_slots = n_slots
        self.slots: list[_Slot | None] = [None] * n_slots
        self.order: list[_Slot] = []  # running slots, oldest first
        self.waiting: deque[Request] = deque()
        self.memory = GovernorMemory()
        self.row_costs = BatchRowCosts()  # what a row costs a step, per batch size

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.order)

    def submit(self, request: Request) -> None:
        self.waiting.append(request)

    def claim(self) -> None:
        """Before the first step after idling (another engine may have used the target)."""
        self.target.set_sequences(max(self.n_slots, self.target.sequences))

    def step(self) -> None:
        """One forward over every running slot (and whatever admission and cancels need)."""
        self._admit()
        for slot in list(self.order):
            if slot.run.request.cancelled:
                self._end(slot, "cancelled")
        items, parts = self._plan()
        if not items:
            return
        top_k = _batch_top_k([slot.execution.forward_top_k for slot, _ in parts])
        taps = _batch_taps([slot.execution.hidden_taps for slot, _ in parts])
        builds = self.target.graph_builds
        t0 = time.perf_counter()
        try:
            out = self.target.forward_batch(items, top_k=top_k, hidden_layers=taps)
        except Exception as e:  # noqa: BLE001 - handed to each request in the batch
            for slot, _ in parts:
                self._fail(slot, e)
            return
        elapsed = time.perf_counter() - t0
        decoding = [(slot, part) for slot, part in parts if isinstance(part, StepPlan)]
        # a prompt chunk or a graph build makes the step's time say nothing about decoding
        steady = len(decoding) == len(parts) and self.target.graph_builds == builds
        charges = self._charges(decoding, elapsed, steady)
        row = out_row = 0
        for (slot, part), item in zip(parts, items):
            n_out = {"all": len(item.tokens), "last": 1, "none": 0}[item.head]
            hidden = _tap_columns(out.hidden, row, len(item.tokens), taps, slot.execution.hidden_taps)
            rows = ForwardResult(logits=out.logits[out_row:out_row + n_out],
                                 ids=None if out.ids is None else out.ids[out_row:out_row + n_out], hidden=hidden)
            row += len(item.tokens)
            out_row += n_out
            slot.run.max_batch_slots = max(slot.run.max_batch_slots, len(items))
            try:
                self._take(slot, part, rows, elapsed, charges.get(slot.seq, (None, None)), steady)
            except Exception as e:  # noqa: BLE001 - the request's own error
                self._fail(slot, e)

    # --- a step's parts ------------------------------------------------------
    def _admit(self) -> None:
        while self.waiting and None in self.slots:
            request = self.waiting.popleft()
            seq = self.slots.index(None)
            try:
                run, key = self._start(request, seq)
            except Exception as e:  # noqa: BLE001 - a planning error is the request's
                request.finish(error=e)
                continue
            slot = _Slot(seq, run, key)
            self.slots[seq] = slot
            self.order.append(slot)

    def _start(self, request: Request, seq: int) -> tuple[RequestRun, tuple | None]:
        """The request's run on sequence seq, and its governor's key: its governor starts
        from what the last request with the same speculator and batch size learned."""
        view = SequenceView(self.target, seq)
        plan = self._speculation_plan(view, request.spec)
        key = GovernorMemory.key(plan, len(self.order) + 1)
        self.memory.start(plan.governor, key)
        prefix = prefix_cache_of(self.model).begin(seq, request.prompt_ids)
        run = RequestRun(self.model.tokenizer, request,
                         new_execution(view, plan, request.sampler, prefix, request.logprobs))
        run.start(seq)
        return run, key

    def _speculation_plan(self, view: SequenceView, options: SpecOptions) -> SpeculationPlan:
        """plan_speculation on the slot's sequence; one drafter of each kind serves every
        slot, so a request for another one waits for no slot to be drafting with the
        attached one."""
        if options.draft_model and not drafter_attached(self.target, options):
            kind = check_draft_model(options.draft_model)
            users = [slot.seq for slot in self.order
                     if slot.execution.speculator is not None and slot.execution.speculator.name == kind]
            if users:
                reason = (f"{kind}: slot {users[0]} drafts with the attached drafter "
                          f"{attached_drafter(self.target, kind).path}; "
                          f"one drafter serves every slot")
                return SpeculationPlan(None, SpeculationCostGovernor(enabled=options.governor), options,
                                       reason if options.enabled else None)
        return plan_speculation(view, options)

    def _plan(self) -> tuple[list[BatchItem], list[tuple[_Slot, object]]]:
        items: list[BatchItem] = []
        parts: list[tuple[_Slot, object]] = []
        prompt_budget = self.target.max_batch_rows
        for slot in self.order:
            if slot.prefilled < len(slot.prompt):
                n = slot.execution.prompt_chunk_end(slot.prefilled, len(slot.prompt), prompt_budget) - slot.prefilled
                if n == 0:
                    continue
                prompt_budget -= n
                done = slot.prefilled + n == len(slot.prompt)
                items.append(BatchItem(slot.seq, slot.prompt[slot.prefilled:slot.prefilled + n],
                                       "last" if done else "none"))
                parts.append((slot, n))
            else:
                plan = slot.execution.plan_step(slot.history, slot.run.request.max_tokens - slot.produced)
                items.append(BatchItem(slot.seq, plan.rows, "all" if plan.verifies else "last"))
                parts.append((slot, plan))
        return items, parts

    def _charges(self, decoding: list[tuple[_Slot, StepPlan]], elapsed: float,
                 steady: bool) -> dict[int, tuple[float, float | None]]:
        """By sequence, each decoding slot's (what its step cost the batch, what a plain
        step would have in its place), from the batch's row costs (engine/batch_costs.py),
        which its governor plans from too; until the batch's plain step is measured, the
        step's time split by rows, against the governor's own plain steps."""
        if not decoding:
            return {}
        n, total = len(decoding), sum(len(plan.rows) for _, plan in decoding)
        if steady:
            self.row_costs.observe(n, total, elapsed)
        if all(slot.execution.speculator is None for slot, _ in decoding):
            return {}  # no governor has a decision to make
        solos = [slot.execution.governor.solo_costs for slot, _ in decoding]
        priors = [solo.marginal_row() for solo in solos if solo is not None]
        rows = self.row_costs.slot_rows(n, sum(priors) / len(priors) if priors else None)
        charges = {}
        for (slot, plan), solo in zip(decoding, solos):
            if rows is None:
                charges[slot.seq] = (elapsed * len(plan.rows) / total + plan.draft_seconds, None)
                continue
            costs = slot_costs(rows, solo)
            if solo is not None:
                slot.execution.governor.use_costs(costs)
            charges[slot.seq] = (costs.verify(len(plan.rows)) + plan.draft_seconds, costs.plain)
        return charges

    def _take(self, slot: _Slot, part, out: ForwardResult, elapsed: float,
              charge: tuple[float | None, float | None], steady: bool) -> None:
        execution, run = slot.execution, slot.run
        if isinstance(part, StepPlan):
            execution.stats.seconds["verify"] += elapsed
            seconds, plain_seconds = charge
            emitted = execution.finish_step(part, out, seconds=seconds, plain_seconds=plain_seconds,
                                            warmup=not steady)
        else:
            start = slot.prefilled
            chunk = slot.prompt[start:start + part]
            slot.prefilled += part
            if slot.prefilled < len(slot.prompt):
                execution.commit_prompt(chunk, out.hidden, start)
                return
            emitted = [execution.finish_prefill(chunk, out, start)]
        slot.history.extend(emitted)
        slot.produced += len(emitted)
        if not isinstance(part, StepPlan) and run.request.max_tokens > 1:
            execution.begin(slot.history)  # before the first token is out, as one slot does
        run.take(emitted)
        if run.stop is not None:
            self._end(slot, run.stop)
        elif slot.produced >= run.request.max_tokens:
            self._end(slot, "length")
        elif len(slot.history) > self.target.max_context_length:
            self._end(slot, "context")

    def _end(self, slot: _Slot, stop: str) -> None:
        slot.run.end(stop)
        self._free(slot)
        self.memory.keep(slot.execution.governor, slot.governor_key)
        try:
            result = slot.run.finish()
        except Exception as e:  # noqa: BLE001 - an on_finish callback's error
            slot.run.request.finish(error=e)
            return
        slot.run.request.finish(result)

    def fail_all(self, error: BaseException) -> None:
        """Every running and waiting request ends with `error` (the scheduler itself failed)."""
        for slot in list(self.order):
            self._fail(slot, error)
        while self.waiting:
            self.waiting.popleft().finish(error=error)

    def _fail(self, slot: _Slot, error: BaseException) -> None:
        self._free(slot)
        slot.run.fail(error)

    def _free(self, slot: _Slot) -> None:
        if self.slots[slot.seq] is slot:
            self.slots[slot.seq] = None
            self.order.remove(slot)


def _batch_top_k(wanted: list[int]) -> int:
    """One top_k for the whole forward: full logits if any slot needs them, else the
    largest k (a sampler reads the same candidates from a longer best-first list)."""
    return 0 if 0 in wanted else max(wanted)


def _batch_taps(wanted: list[tuple]) -> tuple:
    """The hidden rows the whole forward returns: every slot's taps, each once."""
    return tuple(dict.fromkeys(tap for taps in wanted for tap in taps))


def _tap_columns(hidden, row: int, n: int, taps: tuple, wanted: tuple):
    """Rows [row, row + n) of a batch's hidden rows, with the columns of the taps one
    slot asked for (None when it asked for none)."""
    if not wanted:
        return None
    rows = hidden[row:row + n]
    if wanted == taps:
        return rows
    width = hidden.shape[1] // len(taps)
    return np.concatenate([rows[:, taps.index(t) * width:(taps.index(t) + 1) * width] for t in wanted], axis=1)


__all__ = ["BatchScheduler"]
