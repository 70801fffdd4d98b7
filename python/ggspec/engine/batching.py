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
slots do.
"""

from __future__ import annotations

import time
from collections import deque

from ggspec.engine.execution import SpeculativeExecution, StepPlan
from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.planner import SpeculationPlan, plan_speculation
from ggspec.engine.request_run import RequestRun
from ggspec.engine.stream import Request
from ggspec.native.sequence_view import SequenceView
from ggspec.native.target import BatchItem, ForwardResult
from ggspec.speculators.options import SpecOptions
from ggspec.speculators.registry import registry


class _Slot:
    """A running request on sequence `seq`."""

    def __init__(self, seq: int, run: RequestRun):
        self.seq = seq
        self.run = run
        self.history = list(run.request.prompt_ids)
        self.prefilled = 0  # prompt tokens forwarded
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

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.order)

    def submit(self, request: Request) -> None:
        self.waiting.append(request)

    def claim(self) -> None:
        """Before the first step after idling (another engine may have used the target)."""
        self.target.set_sequences(max(self.n_slots, self.target.sequences))
        self.model.kv_owner = None  # a session's prefix is gone once slots write the cache

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
        t0 = time.perf_counter()
        try:
            out = self.target.forward_batch(items, top_k=top_k)
        except Exception as e:  # noqa: BLE001 - handed to each request in the batch
            for slot, _ in parts:
                self._fail(slot, e)
            return
        elapsed = time.perf_counter() - t0
        row = 0
        for (slot, part), item in zip(parts, items):
            n_out = {"all": len(item.tokens), "last": 1, "none": 0}[item.head]
            rows = ForwardResult(logits=out.logits[row:row + n_out],
                                 ids=None if out.ids is None else out.ids[row:row + n_out], hidden=None)
            row += n_out
            slot.run.max_batch_slots = max(slot.run.max_batch_slots, len(items))
            try:
                self._take(slot, part, rows, elapsed)
            except Exception as e:  # noqa: BLE001 - the request's own error
                self._fail(slot, e)

    # --- a step's parts ------------------------------------------------------
    def _admit(self) -> None:
        while self.waiting and None in self.slots:
            request = self.waiting.popleft()
            seq = self.slots.index(None)
            try:
                run = self._start(request, seq)
            except Exception as e:  # noqa: BLE001 - a planning error is the request's
                request.finish(error=e)
                continue
            slot = _Slot(seq, run)
            self.slots[seq] = slot
            self.order.append(slot)

    def _start(self, request: Request, seq: int) -> RequestRun:
        view = SequenceView(self.target, seq)
        plan = _plan_for_slot(view, request.spec)
        speculator = plan.speculator
        if speculator is not None:
            speculator.reset()
        execution = SpeculativeExecution(view, request.sampler, speculator, governor=plan.governor,
                                         stats=plan.new_stats(), draft_cap=plan.options.draft,
                                         accept=plan.options.accept)
        view.reset()
        run = RequestRun(self.model.tokenizer, request, execution)
        run.start()
        return run

    def _plan(self) -> tuple[list[BatchItem], list[tuple[_Slot, object]]]:
        items: list[BatchItem] = []
        parts: list[tuple[_Slot, object]] = []
        prompt_budget = self.target.max_batch_rows
        for slot in self.order:
            if slot.prefilled < len(slot.prompt):
                n = min(len(slot.prompt) - slot.prefilled, prompt_budget)
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

    def _take(self, slot: _Slot, part, out: ForwardResult, elapsed: float) -> None:
        execution, run = slot.execution, slot.run
        if isinstance(part, StepPlan):
            execution.stats.seconds["verify"] += elapsed
            emitted = execution.finish_step(part, out)
        else:
            slot.prefilled += part
            if slot.prefilled < len(slot.prompt):
                return
            emitted = [execution.finish_prefill(slot.prompt, out)]
        slot.history.extend(emitted)
        slot.produced += len(emitted)
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
        slot.run.request.finish(error=error)

    def _free(self, slot: _Slot) -> None:
        if self.slots[slot.seq] is slot:
            self.slots[slot.seq] = None
            self.order.remove(slot)


def _batch_top_k(wanted: list[int]) -> int:
    """One top_k for the whole forward: full logits if any slot needs them, else the
    largest k (a sampler reads the same candidates from a longer best-first list)."""
    return 0 if 0 in wanted else max(wanted)


def _plan_for_slot(view: SequenceView, options: SpecOptions) -> SpeculationPlan:
    if options.enabled and (options.draft_model or (options.spec_type != "auto"
                                                   and registry.needs_drafter(options.spec_type))):
        name = "block" if options.draft_model else options.spec_type
        return SpeculationPlan(None, SpeculationCostGovernor(enabled=options.governor), options,
                               f"{name}: its drafter serves one sequence; with slots > 1 only ngram "
                               f"speculates for now")
    return plan_speculation(view, options)


__all__ = ["BatchScheduler"]
