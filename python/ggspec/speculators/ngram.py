"""Prompt-lookup drafting: propose what followed the last time the sequence's
current suffix occurred earlier in the sequence itself.

It pays off where text repeats its own context (code edits, quotes, summaries,
structured output) and costs a few dict lookups per step where it does not.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ggspec.speculators.base import DraftContext, Speculator
from ggspec.speculators.window import AdaptiveWindow


class NGramSpeculator(Speculator):
    """Drafts the tokens that followed the most recent earlier occurrence of the
    longest suffix n-gram of the history, trying orders max_order down to the
    required order; no match, no draft.

    min_draft_prob (--spec-pmin, default 0) is not a probability here: it scales
    the required match length,
        required order = min_order + round(min_draft_prob * (max_order - min_order)),
    clamped to [min_order, max_order]. 0 accepts a match of min_order tokens;
    1 only matches of max_order tokens.

    Orders 3..12 by default: one- and two-token matches recur all over ordinary
    prose and mostly draft what gets rejected, while twelve-token keys pin a copy
    or a loop down (measured, bench/README.md: on Gemma 3 270M prose 1.19x → 1.48x,
    copying 2.17x → 2.34x against orders 1..4).

    A match whose continuation reaches the end of the history is a loop: the draft
    repeats its period to fill the window (small greedy models loop often).

    window: a fixed draft length (the operator capped it). None adapts it to what
    the target accepts (speculators/window.py), up to max_draft_tokens.
    """

    name = "ngram"
    default_min_draft_prob = 0.0
    can_arm_after_prefix_reuse = True
    needs_hidden_state = False
    proposes_cheaply = True

    def __init__(self, max_draft_tokens: int = 64, min_draft_prob: float | None = None,
                 min_order: int = 3, max_order: int = 12, window: int | None = None):
        super().__init__(max_draft_tokens, min_draft_prob)
        if not 1 <= min_order <= max_order:
            raise ValueError(f"need 1 <= min_order <= max_order, got {min_order}, {max_order}")
        self.min_order = min_order
        self.max_order = max_order
        self.window = AdaptiveWindow(self.max_draft_tokens, window)
        scaled = min_order + round(self.min_draft_prob * (max_order - min_order))
        self.required_order = min(max(scaled, min_order), max_order)
        self.reset()

    def reset(self) -> None:
        self._forget_index()
        self.window.reset()
        # Metrics for tests and stats, about the last propose only; nothing reads them back.
        self.index_probes = 0
        self.index_insertions = 0

    def _forget_index(self) -> None:
        # order -> {n-gram: position of its last token}, most recent occurrence wins
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(self.min_order, self.max_order + 1)}
        self._indexed = 0  # n-grams ending before this position are in the index

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        history = ctx.history
        self.index_probes = self.index_insertions = 0
        if len(history) - 1 < self._indexed:  # not the sequence we indexed: a new one
            self._forget_index()
        self._index_new_tokens(history)

        end = len(history)
        limit = min(self.window.size, ctx.max_draft, self.max_draft_tokens)
        suffix = _ints(history[max(0, end - self.max_order):end])
        for n in range(min(self.max_order, end), self.required_order - 1, -1):
            self.index_probes += 1
            match_end = self._index[n].get(suffix[-n:])
            if match_end is not None:
                drafts = _continuation(history, match_end + 1, end, limit)
                break
        else:
            drafts = []
        if not ctx.shadow:  # a shadow proposal is never verified: nothing to learn from its commit
            self.window.proposed(drafts, ctx.position)
        out.extend(drafts)
        return len(drafts)

    def _index_new_tokens(self, history: Sequence[int]) -> None:
        # Only n-grams that have a continuation: the current suffix must never match itself.
        stop = len(history) - 1
        for pos in range(self._indexed, stop):
            gram = _ints(history[max(0, pos + 1 - self.max_order):pos + 1])
            for n in range(self.min_order, min(self.max_order, pos + 1) + 1):
                self._index[n][gram[-n:]] = pos
                self.index_insertions += 1
        self._indexed = max(self._indexed, stop)

    def commit(self, tokens: Sequence[int], hidden_rows: np.ndarray | None, start_pos: int) -> None:
        self.window.landed(tokens, start_pos)


def _continuation(history: Sequence[int], start: int, end: int, limit: int) -> list[int]:
    """Up to `limit` tokens from history[start:]. A continuation that runs into the
    present means the text is looping with period end - start, so it goes on
    through the tokens drafted so far: a loop gets a full window, not one period."""
    drafts = list(_ints(history[start:min(start + limit, end)]))
    while len(drafts) < limit:
        drafts.append(drafts[len(drafts) - (end - start)])
    return drafts


def _ints(tokens: Sequence[int]) -> tuple[int, ...]:
    # numpy ids hash like ints, but drafts and keys should not depend on the history's type
    return tuple(map(int, tokens))
