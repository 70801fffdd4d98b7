"""BlockDraftSpeculator: a block drafter (DFlash, DFlash2, DSpark) proposes a whole
window per pass.

The drafter's context is the target's residual rows of committed tokens. Commits
queue them and the next proposal injects them in one pass, then runs one forward
over [anchor, MASK x window] at the anchor's position. The prompt's rows all stay
queued (DFlash drafts from its context), but of the rows committed since, only
about the last parked_catch_up do: the positions before them, missed while the
governor parked drafting, are masked from the drafter's attention, as a reused
prefix's are. A probe after a long park then injects a few rows instead of every
one it missed (0.1 ms a row against a 16 ms step on the 16-layer qwen35 of
bench.short_runs, where a probe's catch-up had cost about a step), the governor,
which parks for as long as a probe's loss takes to earn back, re-probes sooner,
and a drafter the governor never lets draft keeps no more than the prompt's rows.
A step with a tighter budget (a governor probe, the end of the generation) runs a
shorter block: cheaper, and its drafts differ from a full block's (the drafter is
non-causal), never the output. The draft is the drafter's greedy walk (a DFlash2
lattice, or each row's argmax, a DSpark row's after its Markov bias); it stops
where the cumulative probability of the prefix falls below min_draft_prob, or, for
a DSpark drafter with a confidence head, where a row's confidence does (llama.cpp's
draft-dspark gate). An anchor-first DSpark block of n rows drafts n tokens. In
rejection mode a DFlash or DSpark block draws each row's draft from q, the request's
chain over that row (its rows are drafted in one pass, so each row's q is its own
whatever the rows before it drew); a DFlash2 lattice walk defines no distribution,
so its q stays one-hot (match mode's acceptance).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ggspec.speculators.base import TOP_K, DraftContext, Speculator, pick_draft, rows_top_k


class BlockDraftSpeculator(Speculator):
    name = "block"
    default_min_draft_prob = 0.35
    needs_hidden_state = True
    # the drafter's context is rebuilt from committed rows: a reused prefix only
    # leaves positions it never saw, which it masks
    can_arm_after_prefix_reuse = True

    def __init__(self, drafter, max_draft_tokens: int | None = None, min_draft_prob: float | None = None,
                 parked_catch_up: int = 32):
        window = drafter.max_draft
        super().__init__(window if max_draft_tokens is None else min(max_draft_tokens, window), min_draft_prob)
        self.drafter = drafter
        self.hidden_layers = drafter.target_layers
        self.parked_catch_up = parked_catch_up
        self.reset()

    def reset(self) -> None:
        self._queued: list[tuple[int, np.ndarray]] = []  # (first position, feature rows) per commit
        self._pinned: int | None = None  # leading commits never dropped; None: all (a prompt arriving)

    def begin(self, history) -> None:
        self._pinned = len(self._queued)  # the prompt's rows: DFlash drafts from its context

    def idle(self) -> None:
        if self._pinned is None:  # decoding without begin(): the governor never lets it draft
            self._pinned = len(self._queued)

    def commit(self, tokens, hidden_rows, start_pos: int) -> None:
        self._queued.append((start_pos, hidden_rows))
        if self._pinned is not None:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        """Drops unpinned commits, oldest first, while parked_catch_up rows remain without
        them (so at most one commit's rows more are kept, and nothing is copied a step)."""
        queued = self._queued
        kept = sum(len(rows) for _, rows in queued[self._pinned:])
        while len(queued) > self._pinned and kept - len(queued[self._pinned][1]) >= self.parked_catch_up:
            kept -= len(queued.pop(self._pinned)[1])

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        runs: list[list] = []  # [first, end, rows] of consecutive positions, injected in one pass
        for first, rows in self._queued:
            if runs and runs[-1][1] == first:
                runs[-1][1] += len(rows)
                runs[-1][2].append(rows)
            else:
                runs.append([first, first + len(rows), [rows]])
        for first, _, blocks in runs:
            self.drafter.inject(np.concatenate(blocks), first)
        self._queued, self._pinned = [], 0
        window = min(self.max_draft_tokens, ctx.max_draft)
        q_of = ctx.sampler if ctx.sampler is not None and not self.drafter.lattice else None  # a lattice has no q
        top_k = TOP_K if q_of is None else min(rows_top_k(q_of), self.drafter.head_rows)
        draft = self.drafter.draft(ctx.history[-1], ctx.position, window + self.drafter.first_draft_row, top_k)
        # the gate reads the walk over each row's TOP_K logits, whatever the rows hold for q
        gated = draft if top_k == TOP_K else dataclasses.replace(draft, values=draft.values[:, :TOP_K],
                                                                 ids=draft.ids[:, :TOP_K])
        tokens, probabilities = gated.walk()
        self.proposal_q = []
        prefix = 1.0
        n = 0
        for i, (token, p) in enumerate(zip(tokens, probabilities)):
            prefix *= p
            gate = prefix if draft.confidence is None else draft.confidence[i]
            if gate < self.min_draft_prob:
                break
            if q_of is not None:  # each row's own q: the block's rows do not read each other's drafts
                picked = pick_draft(q_of, draft.values[i], draft.ids[i], ctx.position + 1 + i)
                if picked is None:
                    break
                token, q = picked
                self.proposal_q.append(q)
            out.append(token)
            n += 1
        return n


__all__ = ["BlockDraftSpeculator"]
