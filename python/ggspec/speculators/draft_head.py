"""DraftHeadSpeculator: an MTP / NextN head drafts one token per pass, chaining
its own output hidden row.

Head rows with exact inputs (a committed token and the trunk's hidden row before
it) are caught up into the head's KV lazily, at the next proposal: folded, that
catch-up and the first draft step are one graph over n_accepted + 1 rows. Chained
draft rows read the head's own output instead, so their KV is overwritten by the
next catch-up. Drafting stops when the head's top-1 probability over its top-10
logits falls below min_draft_prob.
"""

from __future__ import annotations

import numpy as np

from ggspec.speculators.base import TOP_K, DraftContext, Speculator, top1_probability

class DraftHeadSpeculator(Speculator):
    name = "draft-head"
    default_min_draft_prob = 0.75
    needs_hidden_state = True
    hidden_layers = ("final",)
    pass_per_draft = True

    def __init__(self, head, n_embd: int, max_draft_tokens: int = 3, min_draft_prob: float | None = None,
                 fold_catch_up: bool = True):
        super().__init__(max_draft_tokens, min_draft_prob)
        self.head = head
        self.fold_catch_up = fold_catch_up
        self._zero_row = np.zeros(n_embd, np.float32)  # before position 0 there is no trunk row
        self.reset()

    def reset(self) -> None:
        self._exact = 0            # head positions [0, _exact) hold rows with exact inputs
        self._tokens: list[int] = []          # committed tokens at positions _exact.., not yet through the head
        self._before: list[np.ndarray] = []   # the trunk's hidden row before each of them
        self._last_row = self._zero_row       # the trunk's hidden row at the last committed position

    def commit(self, tokens, hidden_rows, start_pos: int) -> None:
        for i, token in enumerate(tokens):
            before = self._last_row if i == 0 else hidden_rows[i - 1]
            if start_pos + i >= self._exact + len(self._tokens):
                self._tokens.append(int(token))
                self._before.append(before)
        self._last_row = hidden_rows[-1]

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        position = ctx.position
        if self._exact + len(self._tokens) != position:
            return 0  # commits skipped positions (never in the runtime's order): nothing exact to read
        tokens = [*self._tokens, int(ctx.history[-1])]
        before = np.stack([*self._before, self._last_row])
        if self.fold_catch_up or len(tokens) == 1:
            values, ids, row = self.head.draft_catch_up_and_step(tokens, before, self._exact, TOP_K)
        else:
            self.head.draft_catch_up(tokens[:-1], before[:-1], self._exact)
            values, ids, row = self.head.draft_step(tokens[-1], before[-1], position, TOP_K)
        self._exact, self._tokens, self._before = position + 1, [], []

        n = 0
        while top1_probability(values) >= self.min_draft_prob:
            out.append(int(ids[0]))
            n += 1
            if n >= ctx.max_draft:
                break
            values, ids, row = self.head.draft_step(int(ids[0]), row, position + n, TOP_K)
        return n


__all__ = ["DraftHeadSpeculator"]
