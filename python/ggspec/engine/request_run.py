"""One request's bookkeeping on the worker, whoever drives its steps: the
tokens each step emits become text pieces, callbacks and a stop reason, and at
the end a Generation with its stats."""

from __future__ import annotations

import time
from typing import Any

from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.planner import SpeculationPlan
from ggspec.engine.prefix_cache import SequencePrefix
from ggspec.engine.sampling import Sampler
from ggspec.engine.stream import Generation, Request
from ggspec.native.rpc import wire_counters
from ggspec.text import StreamDecoder
from ggspec.text.stop_strings import StopStrings


class RequestRun:
    def __init__(self, tokenizer, request: Request, execution: SpeculativeExecution):
        self.tokenizer = tokenizer
        self.request = request
        self.execution = execution
        self.decoder = StreamDecoder(tokenizer)
        self.stop_strings = StopStrings(request.stop)
        self.pieces: list[str] = []
        self.stop: str | None = None
        self.max_batch_slots = 1      # the most sequences that shared one forward with this one
        self.clock = _Clock()
        self.wire = wire_counters()  # RPC traffic from the start (a split target's)

    def start(self, slot: int = 0) -> None:
        """The request runs from now on, on sequence `slot`."""
        self.request.started(slot, self.execution.stats.spec_type)
        self.clock.start()
        self.wire = wire_counters()

    def take(self, step: list[int]) -> None:
        """A step's emitted tokens: streamed until an end-of-generation token or a stop
        string stops the run (the token that completes a stop string counts; its text
        from the stop string on does not)."""
        request = self.request
        for i, token in enumerate(step):
            self.clock.tick(first=self.clock.t_prompt is None)
            if request.on_token is not None:
                request.on_token(token)
            if token in self.tokenizer.eog_ids and not request.ignore_eos:
                self.stop = "eos"
                return
            request.tokens.append(token)
            if self.execution.logprobs is not None:  # the step's i-th token came from its i-th row
                request.token_logprobs.append(self.execution.step_logprobs[i])
            self._put(self.decoder.push(token))
            if self.stop_strings.matched is not None:
                self.stop = "stop"
                return

    def _put(self, text: str) -> None:
        """Decoded text: what no stop string can begin in goes out."""
        self._emit(self.stop_strings.push(text) if text else "")

    def _emit(self, piece: str) -> None:
        if piece:
            self.pieces.append(piece)
            self.request.put(piece)

    def fail(self, error: BaseException) -> None:
        """The request ends with `error`; what its sequence holds is unknown."""
        if self.execution.prefix is not None:
            self.execution.prefix.abandon()
        self.request.finish(error=error)

    def end(self, stop: str) -> None:
        """No more steps: the budget ("length"), the context's end or a cancel."""
        if self.stop is None:
            self.stop = stop

    def finish(self) -> Generation:
        """The Generation, after the last step; runs the request's on_finish."""
        request = self.request
        self._put(self.decoder.flush())
        self._emit(self.stop_strings.flush())
        if self.stop_strings.matched is not None:  # one complete in the held tail
            self.stop = "stop"
        tokens = request.tokens
        prefix = self.execution.prefix
        if prefix is not None:
            prefix.close()  # its tail joins the cache, and the sequence is remembered as holding it
        stats = self.clock.stats(len(request.prompt_ids), len(tokens), request.sampler.config.seed, self.stop)
        stats["reused_prompt_tokens"] = prefix.reused if prefix else 0
        stats["prefix_source"] = prefix.source if prefix else None
        stats["max_batch_slots"] = self.max_batch_slots
        # What a split target's steps cost on the network while this request ran (the
        # process's RPC connections: with several slots, the steps they shared).
        moved = wire_counters() - self.wire
        stats["rpc_round_trips"] = moved.round_trips
        stats["rpc_bytes"] = moved.bytes_sent + moved.bytes_received
        stats["rpc_round_trips_per_token"] = moved.round_trips / len(tokens) if tokens else 0.0
        stats.update(self.execution.stats.as_dict())
        logprobs = list(request.token_logprobs) if request.logprobs is not None else None
        result = Generation("".join(self.pieces), list(tokens), list(request.prompt_ids), stats, logprobs)
        if request.on_finish is not None:
            request.on_finish(result)
        return result


def new_execution(target, plan: SpeculationPlan, sampler: Sampler, prefix: SequencePrefix | None = None,
                  logprobs: int | None = None) -> SpeculativeExecution:
    """The request's runtime on `target` (a Target, or one sequence of it) under `plan`;
    prefix: the prefix cache's start of its sequence (what it reused); logprobs:
    SpeculativeExecution's."""
    speculator = plan.speculator
    stats = plan.new_stats()
    reused = prefix.reused if prefix else 0
    if speculator is not None and reused and not speculator.can_arm_after_prefix_reuse:
        stats.decline_reason = (f"{speculator.name}: cannot arm after a reused prefix "
                                f"({reused} positions it never saw)")
        stats.spec_type = "none"
        speculator = None
    if speculator is not None:
        speculator.reset()  # a new sequence, or a new turn of one: it re-reads the history
    return SpeculativeExecution(target, sampler, speculator, governor=plan.governor, stats=stats,
                                draft_cap=plan.options.draft, accept=plan.options.accept, prefix=prefix,
                                logprobs=logprobs)


class _Clock:
    def __init__(self):
        self.t_start = self.t_prompt = self.t_last = None

    def start(self) -> None:
        self.t_start = time.perf_counter()

    def tick(self, first: bool) -> None:
        self.t_last = time.perf_counter()
        if first:
            self.t_prompt = self.t_last

    def stats(self, n_prompt: int, n_gen: int, seed: int, stop: str) -> dict[str, Any]:
        prompt_s = (self.t_prompt - self.t_start) if self.t_prompt else 0.0
        gen_s = (self.t_last - self.t_prompt) if self.t_prompt else 0.0
        # The first token comes with the prompt's forward; generation speed counts the rest.
        return {
            "prompt_tokens": n_prompt,
            "gen_tokens": n_gen,
            "prompt_seconds": prompt_s,
            "gen_seconds": gen_s,
            "prompt_tokens_per_second": n_prompt / prompt_s if prompt_s > 0 else 0.0,
            "gen_tokens_per_second": (n_gen - 1) / gen_s if gen_s > 0 and n_gen > 1 else 0.0,
            "seed": seed,
            "stop": stop,
        }


__all__ = ["RequestRun", "new_execution"]
