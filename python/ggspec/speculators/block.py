"""BlockDraftSpeculator: a block drafter (DFlash) proposes a whole window per pass.

The drafter's context is the target's residual rows of every committed token,
injected at commit; a proposal runs one forward over [anchor, MASK x window] at
the anchor's position. The window is fixed per speculator (the block's length
changes every row of a non-causal drafter), and a step's tighter budget only
truncates. The draft is the drafter's greedy walk (a DFlash2 lattice, or each
row's argmax); it stops where the cumulative probability of the prefix falls
below min_draft_prob.
"""

from __future__ import annotations

from ggspec.speculators.base import TOP_K, DraftContext, Speculator


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
        draft = self.drafter.draft(ctx.history[-1], ctx.position, self.max_draft_tokens + 1, TOP_K)
        tokens, probabilities = draft.walk()
        prefix = 1.0
        n = 0
        for token, p in zip(tokens[:ctx.max_draft], probabilities):
            prefix *= p
            if prefix < self.min_draft_prob:
                break
            out.append(token)
            n += 1
        return n


__all__ = ["BlockDraftSpeculator"]
