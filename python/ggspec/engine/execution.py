"""SpeculativeExecution: draft → verify → accept → rollback → commit.

One implementation for every algorithm and every model. A step starts from the
sequence's pending token (sampled, not yet forwarded); it emits at least one
token, and every emitted token is drawn from a target row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ggspec.engine.acceptance import accept_match, accept_rejection
from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.logprobs import TokenLogprob, token_logprob
from ggspec.engine.prefix_cache import SequencePrefix
from ggspec.engine.sampling import DraftSampler, Sampler
from ggspec.speculators.base import DraftContext, Speculator
from ggspec.engine.stats import SpecStats


@dataclass
class StepPlan:
    """One step's rows, from plan_step to finish_step."""

    rows: list[int]           # the pending token, then the drafts
    drafts: list[int]
    shadow: list[int] | None  # a parked governor's unverified drafts, to score
    position: int             # the pending token's
    t0: float
    builds: int               # the target's graph builds when the step began
    drafting: bool            # the drafter ran for this step (the governor counts its cost)
    draft_seconds: float      # what planning the step took (drafting)

    @property
    def verifies(self) -> bool:
        return bool(self.drafts)


class SpeculativeExecution:
    """Drives one sequence on one target. speculator None = plain decoding.

    draft_cap: the operator's --spec-draft (None: the speculator's own window).
    accept: "match" (seed-identical to plain decoding) or "rejection".
    logprobs: None, or record, for the tokens the last step emitted (step_logprobs), each
    one's log-probability and its row's `logprobs` most likely tokens; its forwards then
    return full rows.
    """

    def __init__(self, target, sampler: Sampler, speculator: Speculator | None = None, *,
                 governor: SpeculationCostGovernor | None = None, stats: SpecStats | None = None,
                 draft_cap: int | None = None, accept: str = "match", prefix: SequencePrefix | None = None,
                 logprobs: int | None = None, clock: Callable[[], float] = time.perf_counter):
        self.target = target
        self.sampler = sampler
        self.speculator = speculator
        self.governor = governor or SpeculationCostGovernor(enabled=False)
        self.stats = stats or SpecStats(clock=clock)
        self.draft_cap = draft_cap
        self.accept = accept
        self.prefix = prefix  # the prefix cache's view of the sequence: every commit goes into it
        self.clock = clock
        # a session's governor outlives one generation; the stats count this one's share
        self._governor_start = (self.governor.parked_steps, self.governor.probes)
        self._state_bytes_start = target.state_transfer_bytes
        self.logprobs = logprobs
        self.step_logprobs: list[TokenLogprob] = []  # one per token the last step (or the prompt) emitted
        self._top_k = 0 if logprobs is not None else sampler.forward_top_k
        self._taps = tuple(speculator.hidden_layers) if speculator and speculator.needs_hidden_state else ()
        self._hidden = None  # the hidden row the last commit ended on
        # rejection mode: drafters draw from the request's chain over their rows (q)
        self._draft_sampler = DraftSampler(sampler, target.n_vocab) if accept == "rejection" else None

    def generate(self, prompt: Sequence[int], max_tokens: int, reused: int = 0) -> Iterator[list[int]]:
        """Yields each step's emitted tokens, the first from the prompt's own forward,
        until max_tokens are out or the context is full. reused: leading prompt
        positions the target's KV already holds."""
        history = list(prompt)
        history.append(self.prefill(prompt[reused:], position=reused))
        if max_tokens > 1:
            self.begin(history)
        yield history[-1:]
        produced = 1
        # the pending token (the last one) needs a KV slot before it can be forwarded
        while produced < max_tokens and len(history) <= self.target.max_context_length:
            emitted = self.step(history, max_tokens - produced)
            history.extend(emitted)
            produced += len(emitted)
            yield emitted

    def prefill(self, tokens: Sequence[int], position: int = 0) -> int:
        """Forwards the prompt (positions position..) in the chunks prompt_chunk_end
        gives; returns the first sampled token."""
        start, end = position, position + len(tokens)
        max_rows = self.target.max_batch_rows if self.prefix is not None else len(tokens)
        while True:
            stop = self.prompt_chunk_end(start, end, max_rows)
            chunk = tokens[start - position:stop - position]
            out = self.target.spec_forward(chunk, top_k=self._top_k if stop == end else 1, hidden_layers=self._taps)
            if stop == end:
                return self.finish_prefill(chunk, out, start)
            self.commit_prompt(chunk, out.hidden, start)
            start = stop

    def prompt_chunk_end(self, start: int, end: int, max_rows: int) -> int:
        """Where a prompt chunk from position `start` ends (the prompt ends at `end`):
        at most max_rows on, and where the prefix cache wants a checkpoint. (The cache
        copies each chunk's blocks before a sliding-window ring can overwrite them, so
        with one a prefill runs in chunks of at most the target's max_batch_rows.)"""
        if self.prefix is None:
            return min(end, start + max_rows)
        return self.prefix.chunk_end(start, end, max_rows)

    def finish_prefill(self, tokens: Sequence[int], out, position: int = 0) -> int:
        """The forward `out` of the prompt's tokens at positions position.. (its last
        row's LM head): commits them and samples the first token."""
        self.commit_prompt(tokens, out.hidden, position)
        token = self.sampler.sample(out.logits[-1], None if out.ids is None else out.ids[-1], position + len(tokens))
        self._record_logprobs(out, [token], len(out.logits) - 1)
        return token

    def commit_prompt(self, tokens: Sequence[int], hidden, position: int) -> None:
        """Prompt tokens at positions position.. are in the KV (a chunk of the prompt
        when a scheduler forwards it piecewise), with their rows at hidden_taps."""
        if self.speculator is not None and not self.speculator.handles_own_prefill:
            self.speculator.commit(tokens, hidden, position)
        if self.prefix is not None:
            with self.stats.phase("prefix_cache"):
                self.prefix.commit(tokens, position, checkpoint=True)
        self._hidden = None if hidden is None else hidden[-1:]

    def begin(self, history: Sequence[int]) -> None:
        """After the prompt's forward (history ends with its first token, pending), before
        that token is out: the speculator may build its own context of the prompt
        (Speculator.begin), in the prompt's time, as llama.cpp's draft model processes
        the prompt with the target. Not where the governor will never let it draft."""
        if self.speculator is not None and not self.governor.never_drafts:
            with self.stats.phase("draft"):
                self.speculator.begin(history)

    def step(self, history: Sequence[int], budget: int) -> list[int]:
        """history ends with the pending token; emits between 1 and `budget` tokens."""
        plan = self.plan_step(history, budget)
        with self.stats.phase("verify"):
            out = self.target.spec_forward(plan.rows, all_logits=plan.verifies, top_k=self._top_k,
                                           hidden_layers=self._taps)
        return self.finish_step(plan, out)

    @property
    def hidden_taps(self) -> tuple:
        """The hidden rows this sequence's forwards return (the speculator's taps)."""
        return self._taps

    @property
    def forward_top_k(self) -> int:
        """The top_k this sequence's forwards ask for (0: full logits)."""
        return self._top_k

    def plan_step(self, history: Sequence[int], budget: int) -> "StepPlan":
        """A step's rows: the pending token (history's last) and the drafts to verify
        with it. Its forward runs them (all rows through the LM head when it verifies);
        finish_step takes the forward's rows."""
        t0 = self.clock()
        builds = self.target.graph_builds
        position = len(history) - 1
        drafts, shadow, drafting = self._draft(history, position, budget)
        if drafts:
            with self.stats.phase("snapshot"):
                self.target.snapshot_recurrent()
        return StepPlan([history[-1], *drafts], drafts, shadow, position, t0, builds, drafting,
                        self.clock() - t0)

    def finish_step(self, plan: "StepPlan", out, seconds: float | None = None, warmup: bool = False,
                    plain_seconds: float | None = None) -> list[int]:
        """Accepts, rolls back and commits after the plan's forward; returns the emitted
        tokens. seconds: what the step cost this sequence (default: since it was planned),
        for the governor; plain_seconds: what a plain step would have cost in its place
        (default: the governor's plain steps tell); warmup: its time is not steady state
        (the governor skips it)."""
        target, stats = self.target, self.stats
        rows, drafts, position = plan.rows, plan.drafts, plan.position
        with stats.phase("verify"):
            emitted = self._accept(out, drafts, position + 1)
        self._record_logprobs(out, emitted)
        kept = len(emitted)  # the pending token and the accepted drafts are in the KV
        hidden = out.hidden
        if kept < len(rows):
            with stats.phase("rollback"):
                hidden = self._roll_back(rows, kept, position, hidden)
        if self.speculator is not None:
            with stats.phase("commit"):
                self.speculator.commit(rows[:kept], None if hidden is None else hidden[:kept], position)
        if self.prefix is not None:
            with stats.phase("prefix_cache"):
                self.prefix.commit(rows[:kept], position)
        self._hidden = None if hidden is None else hidden[kept - 1:kept]

        if drafts:
            stats.record_verify(len(drafts), kept - 1)
        else:
            stats.plain_steps += 1
        if plan.shadow is not None:
            self.governor.observe_shadow(plan.shadow[:1] == emitted[:1])
        self.governor.observe(plan.drafting, len(emitted), self.clock() - plan.t0 if seconds is None else seconds,
                              warmup=warmup or target.graph_builds != plan.builds, drafts=len(drafts),
                              plain_seconds=plain_seconds)
        stats.governor_parked_steps = self.governor.parked_steps - self._governor_start[0]
        stats.governor_probes = self.governor.probes - self._governor_start[1]
        stats.state_transfer_bytes = target.state_transfer_bytes - self._state_bytes_start
        return emitted

    def _draft(self, history: Sequence[int], position: int,
               budget: int) -> tuple[list[int], list[int] | None, bool]:
        """(drafts to verify, unverified shadow drafts or None, whether the step counts as
        drafting: the drafter ran for a verify, and a pass that proposed nothing still
        cost its time, unless proposing costs next to nothing)."""
        spec = self.speculator
        # the verify must fit the context and keep what it needs to roll back
        room = min(budget, self.target.max_context_length - position, self.target.max_verify_rows) - 1
        if self.draft_cap is not None:
            room = min(room, self.draft_cap)
        if spec is None or room < 1:
            return [], None, False
        drafting = self.governor.should_draft()
        if not drafting and not (self.governor.parked and spec.proposes_cheaply):
            if self.governor.parked:
                spec.idle()
            return [], None, False
        if self.governor.draft_limit is not None:
            room = min(room, self.governor.draft_limit)
        drafts: list[int] = []
        ctx = DraftContext(history, position, min(room, spec.max_draft_tokens) if drafting else 1, self._hidden,
                           shadow=not drafting, sampler=self._draft_sampler)
        with self.stats.phase("draft"):
            n = spec.propose(ctx, drafts)
        drafts = drafts[:max(0, min(n, room))]
        if not drafting:
            return [], drafts, False
        return drafts, None, bool(drafts) or not spec.proposes_cheaply

    def _record_logprobs(self, out, emitted: list[int], first_row: int = 0) -> None:
        """Each emitted token is drawn from its own row of the forward, in order."""
        if self.logprobs is not None:
            self.step_logprobs = [token_logprob(out.logits[first_row + i], token, self.logprobs)
                                  for i, token in enumerate(emitted)]

    def _accept(self, out, drafts: list[int], first_position: int) -> list[int]:
        if self.accept == "rejection" and drafts:
            return accept_rejection(self.sampler, out.logits, out.ids, drafts, first_position,
                                    self.speculator.draft_probabilities)
        return accept_match(self.sampler, out.logits, out.ids, drafts, first_position)

    def _roll_back(self, rows: list[int], kept: int, position: int, hidden):
        target = self.target
        if target.verify_persists_accepted_kv:
            target.rewind(position + kept)
            return hidden
        # The verify's state ran past the kept rows: restore the pre-verify state
        # and re-advance over the kept prefix.
        target.restore_recurrent()
        target.rewind(position)
        self.stats.reforwards += 1
        return target.spec_forward(rows[:kept], all_logits=True, top_k=1, hidden_layers=self._taps).hidden


__all__ = ["SpeculativeExecution", "StepPlan"]
