"""DraftModelSpeculator: a smaller language model of the same vocabulary drafts one
token per forward, over its own KV cache (llama.cpp's draft-simple, vLLM's
draft_model).

The draft's cache follows the target's history. Its prompt is forwarded when the
target's prompt is done (begin); each proposal then keeps what the draft still
holds of the history (the pending token and the drafts that landed are usually
all it lacks), forwards the rest as one batch, and drafts from the last row:
each draft is the draft's argmax, forwarded to draft the next, until the window
is full or the confidence gate stops it. Drafts that did not land stay in the
draft's cache until the next proposal rewinds over them.

The gate (--spec-pmin, default 0.5) is the draft's top-1 probability over its
top-10 logits, the p llama.cpp's draft-simple compares with its p_min (a top-k 10
sampler), as for the NextN head. Stopping at a doubtful token saves both the
draft's forward and the verify row it would cost. The window adapts to what the
target accepts (speculators/window.py), up to max_draft_tokens (16).

In rejection mode (--spec-accept rejection) each draft is drawn from q, the
request's own sampler chain applied to the draft's row (ctx.sampler), and q is
what draft_probabilities reports: a target row then accepts a draft with
probability min(1, p/q), more often than match mode's p(d) where the two models
agree, and the output still follows the target's distribution exactly.

Ids are checked where they cross between two vocabularies that differ in size
(text/vocab_match.py): a draft the target lacks ends the draft, and a history
token the draft lacks ends drafting for the sequence.
"""

from __future__ import annotations

from typing import Sequence

from ggspec.speculators.base import TOP_K, DraftContext, Speculator, pick_draft, rows_top_k, top1_probability
from ggspec.speculators.window import AdaptiveWindow


class DraftModelSpeculator(Speculator):
    name = "draft"
    default_min_draft_prob = 0.5
    pass_per_draft = True
    # the draft reads tokens only: after a reused prefix it forwards what it lacks
    can_arm_after_prefix_reuse = True

    def __init__(self, draft, target_vocab: int, max_draft_tokens: int = 16, min_draft_prob: float | None = None,
                 window: int | None = None):
        super().__init__(max_draft_tokens, min_draft_prob)
        self.draft = draft  # a DraftSequence (native/draft_model.py)
        self.target_vocab = target_vocab
        self.window = AdaptiveWindow(max_draft_tokens, window)
        self.reset()

    def reset(self) -> None:
        self._synced = 0       # history positions [0, _synced) are what the draft holds
        self._stamp = None     # the draft sequence's stamp when _synced was set
        self._unknown_at = -1  # the first history position whose token the draft lacks
        self.window.reset()

    def begin(self, history: Sequence[int]) -> None:
        self._sync(history, len(history) - 1)
        self.draft.pause()

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        position = ctx.position
        limit = min(self.window.size, ctx.max_draft, self.max_draft_tokens,
                    self.draft.max_context_length - position - 1)
        if limit < 1:
            return 0
        q_of = ctx.sampler  # rejection mode: draw from q
        top_k = min(rows_top_k(q_of), self.draft.n_vocab)
        step = self._sync(ctx.history, position + 1, top_k)
        if step is None:
            return 0
        self.draft.mark()  # a recurrent draft rolls back to here
        drafts: list[int] = []
        self.proposal_q = []
        values, ids = step
        while top1_probability(values) >= self.min_draft_prob:
            picked = pick_draft(q_of, values, ids, position + 1 + len(drafts), self.target_vocab)
            if picked is None:
                break
            token, q = picked
            self.proposal_q.append(q)
            drafts.append(token)
            if len(drafts) == limit:
                break
            values, ids = self.draft.extend([token], top_k)
        self._stamp = self.draft.stamp  # the drafts it holds past _synced are its own
        self.draft.pause()
        if not ctx.shadow:  # a shadow proposal is never verified: nothing to learn from its commit
            self.window.proposed(drafts, position)
        out.extend(drafts)
        return len(drafts)

    def commit(self, tokens, hidden_rows, start_pos: int) -> None:
        self.window.landed(tokens, start_pos)

    def _sync(self, history: Sequence[int], end: int, top_k: int = TOP_K):
        """Makes the draft hold history[:end] (rewinding what differs, forwarding what it
        lacks); returns the last forward's (top-k logits, ids), or None when nothing was
        forwarded or the history holds a token the draft lacks."""
        if 0 <= self._unknown_at < end:
            return None
        held = self.draft.held
        top = min(len(held), end - 1)  # the last token is forwarded again: its row is the draft's
        # someone else moved the draft's cache (another user of the sequence): check it all
        keep = min(self._synced, top) if self.draft.stamp == self._stamp else 0
        while keep < top and held[keep] == history[keep]:
            keep += 1
        keep = self.draft.rewind(keep)
        missing = [int(t) for t in history[keep:end]]
        unknown = next((i for i, t in enumerate(missing) if t >= self.draft.n_vocab), None)
        if unknown is not None:
            self._unknown_at = keep + unknown
            self._synced, self._stamp = keep, self.draft.stamp
            return None
        step = self.draft.extend(missing, top_k) if missing else None
        self._synced, self._stamp = end, self.draft.stamp
        return step


__all__ = ["DraftModelSpeculator"]
