"""DraftHeadSpeculator: a per-token head (an MTP / NextN head, or an attached
EAGLE-3 drafter or Gemma 4 assistant) drafts one token per pass, chaining its own
output row.

Head rows with exact inputs (a committed token and the trunk's rows before it)
are caught up into the head's KV lazily, at the next proposal: folded, that
catch-up and the first draft step are one graph over n_accepted + 1 rows. Chained
draft rows read the head's own output instead, so their KV is overwritten by the
next catch-up. Drafting stops when the head's top-1 probability over its top-10
logits falls below min_draft_prob. In rejection mode each draft is drawn from q,
the request's chain over the head's row, and chains on from there.

While the governor parks drafting, the head keeps only the last parked_catch_up
rows to catch up on: the rows before them are skipped, masked from the head's
attention. A probe after a long park then costs a few head rows instead of every
one it missed (0.55 ms a row against a 24 ms step on a 16-layer qwen35 in
bench/README), and reads recent context (the trunk's hidden row carries the rest).
A request that reuses a cached prefix starts the same way: the head never saw the
prefix's trunk rows, so they (and the first row after them, which reads the last)
are skipped, and it drafts from the first proposal on. Until its first proposal a
head counts as parked, so a prompt costs the first proposal at most parked_catch_up
rows too: on a short run the governor's first probe, which a useless head never
repays, then costs a few head rows instead of the whole prompt through the head
(bench.qwen35moe: 58 prompt rows through an MoE head block were about 4% of a
96-token generation).
"""

from __future__ import annotations

import numpy as np

from ggspec.speculators.base import DraftContext, Speculator, pick_draft, rows_top_k, top1_probability

class DraftHeadSpeculator(Speculator):
    name = "draft-head"
    default_min_draft_prob = 0.75
    needs_hidden_state = True
    pass_per_draft = True
    #: rows of a reused prefix are skipped, as rows missed while parked are
    can_arm_after_prefix_reuse = True

    def __init__(self, head, max_draft_tokens: int = 3, min_draft_prob: float | None = None,
                 fold_catch_up: bool = True, parked_catch_up: int = 16):
        super().__init__(max_draft_tokens, min_draft_prob)
        self.head = head
        self.hidden_layers = head.trunk_taps  # the trunk rows a head row reads
        self.fold_catch_up = fold_catch_up
        self.parked_catch_up = parked_catch_up
        self._zero_row = np.zeros(head.trunk_row_width, np.float32)  # before position 0 there is no trunk row
        self.reset()

    def reset(self) -> None:
        self._exact = 0            # head positions [0, _exact) hold rows with exact inputs, or none
        self._skipped = 0          # then positions the head will not see (dropped while parked)
        self._idle = True          # parked, or not yet proposing: keep at most parked_catch_up rows
        self._tokens: list[int] = []          # committed tokens after those, not yet through the head
        self._before: list[np.ndarray] = []   # the trunk's hidden row before each of them
        self._last_row = self._zero_row       # the trunk's hidden row at the last committed position

    def commit(self, tokens, hidden_rows, start_pos: int) -> None:
        seen = self._exact + self._skipped + len(self._tokens)
        if start_pos > seen:  # positions it never saw (a reused prefix): masked from the head
            self._skipped += len(self._tokens) + start_pos - seen
            self._tokens, self._before = [], []
            self._last_row = None  # the trunk's row before start_pos is not here
        for i, token in enumerate(tokens):
            if start_pos + i < self._exact + self._skipped + len(self._tokens):
                continue
            before = self._last_row if i == 0 else hidden_rows[i - 1]
            if before is None:
                self._skipped += 1  # the row of the token after the gap reads that missing row
            else:
                self._tokens.append(int(token))
                self._before.append(before)
        self._last_row = hidden_rows[-1]
        drop = len(self._tokens) - self.parked_catch_up if self._idle else 0
        if drop > 0:
            self._skipped += drop
            del self._tokens[:drop], self._before[:drop]

    def idle(self) -> None:
        self._idle = True

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        position = ctx.position
        self._idle = False
        if self._exact + self._skipped + len(self._tokens) != position:
            return 0  # commits skipped positions (never in the runtime's order): nothing exact to read
        if self._skipped:
            self.head.skip(self._exact, self._exact + self._skipped)
            self._exact, self._skipped = self._exact + self._skipped, 0
        q_of = ctx.sampler  # rejection mode: draw from q
        top_k = rows_top_k(q_of)
        tokens = [*self._tokens, int(ctx.history[-1])]
        before = np.stack([*self._before, self._last_row])
        if self.fold_catch_up or len(tokens) == 1:
            values, ids, row = self.head.draft_catch_up_and_step(tokens, before, self._exact, top_k)
        else:
            self.head.draft_catch_up(tokens[:-1], before[:-1], self._exact)
            values, ids, row = self.head.draft_catch_up_and_step(tokens[-1:], before[-1:], position, top_k)
        self._exact, self._tokens, self._before = position + 1, [], []

        n, self.proposal_q = 0, []
        while top1_probability(values) >= self.min_draft_prob:
            picked = pick_draft(q_of, values, ids, position + 1 + n)
            if picked is None:
                break
            token, q = picked
            self.proposal_q.append(q)
            out.append(token)
            n += 1
            if n >= ctx.max_draft:
                break
            values, ids, row = self.head.draft_step(token, row, position + n, top_k)
        return n


__all__ = ["DraftHeadSpeculator"]
