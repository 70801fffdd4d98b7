"""BlockDraftSpeculator: a block drafter (DFlash) proposes a whole window per pass.

The drafter's context is the target's residual rows of every committed token,
injected at commit; a proposal runs one forward over [anchor, MASK x window] at
the anchor's position. The window is fixed per speculator (the block's length
changes every row of a non-causal drafter), and a step's tighter budget only
truncates. Drafts stop where the cumulative probability of the prefix (each
position's top-1 over its top-10 logits) falls below min_draft_prob.
"""

from __future__ import annotations

from ggspec.speculators.base import TOP_K, DraftContext, Speculator, top1_probability


class BlockDraftSpeculator(Speculator):
    name = "block"
    default_min_draft_prob = 0.35
    needs_hidden_state = True
    # the drafter's context is rebuilt from committed rows: a reused prefix only
    # leaves positions it never saw, which it masks
    can_arm_after_prefix_reuse = True

    def __init__(self, drafter, max_draft_tokens: int | None = None, min_draft_prob: float | None = None):
        window = drafter.block_size - 1
        super().__init__(window if max_draft_tokens is None else min(max_draft_tokens, window), min_draft_prob)
        self.drafter = drafter
        self.hidden_layers = drafter.target_layers

    def commit(self, tokens, hidden_rows, start_pos: int) -> None:
        self.drafter.inject(hidden_rows, start_pos)

    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        values, ids = self.drafter.draft(ctx.history[-1], ctx.position, self.max_draft_tokens + 1, TOP_K)
        prefix = 1.0
        n = 0
        for row_values, row_ids in zip(values[:ctx.max_draft], ids[:ctx.max_draft]):
            prefix *= top1_probability(row_values)
            if prefix < self.min_draft_prob:
                break
            out.append(int(row_ids[0]))
            n += 1
        return n


__all__ = ["BlockDraftSpeculator"]
