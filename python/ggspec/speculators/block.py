"""BlockDraftSpeculator: a block drafter (DFlash, DFlash2, DSpark) proposes a whole
window per pass.

The drafter's context is the target's residual rows of every committed token.
Commits queue them and the next proposal injects them (one pass, however many
steps the governor kept drafting parked), then runs one forward over
[anchor, MASK x window] at the anchor's position. A step with a tighter budget
(a governor probe, the end of the generation) runs a shorter block: cheaper, and
its drafts differ from a full block's (the drafter is non-causal), never the
output. The draft is the drafter's greedy walk (a DFlash2 lattice, or each
row's argmax, a DSpark row's after its Markov bias); it stops where the cumulative
probability of the prefix falls below min_draft_prob, or, for a DSpark drafter with
a confidence head, where a row's confidence does (llama.cpp's draft-dspark gate). An
anchor-first DSpark block of n rows drafts n tokens. In rejection mode a DFlash or
DSpark block draws each row's draft from q, the request's chain over that row (its
rows are drafted in one pass, so each row's q is its own whatever the rows before it
drew); a DFlash2 lattice walk defines no distribution, so its q stays one-hot (match
mode's acceptance).
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

    def __init__(self, drafter, max_draft_tokens: int | None = None, min_draft_prob: float | None = None):
        window = drafter.max_draft
        super().__init__(window if max_draft_tokens is None else min(max_draft_tokens, window), min_draft_prob)
        self.drafter = drafter
        self.hidden_layers = drafter.target_layers
        self.reset()

    def reset(self) -> None:
        # runs of consecutive committed positions: [first position, end, feature row blocks]
        self._queued: list[list] = []

    def commit(self, tokens, hidden_rows, start_pos: int) -> None:
        if self._queued and self._queued[-1][1] == start_pos:
            self._queued[-1][1] += len(hidden_rows)
            self._queued[-1][2].append(hidden_rows)
        else:
            self._queued.append([start_pos, start_pos + len(hidden_rows), [hidden_rows]])

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        for first, _, blocks in self._queued:
            self.drafter.inject(np.concatenate(blocks), first)
        self._queued = []
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
