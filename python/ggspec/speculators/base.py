"""What every speculation algorithm implements, and what it is told each step.

Correctness is never a speculator's job: whatever it proposes, the runtime emits
only tokens drawn from target rows. A speculator is free to be wrong; it must
not be slow.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


TOP_K = 10  # the logits a learned drafter's confidence is computed over
#: rejection mode, a chain that keeps every id: a drafter row reports its best this many,
#: and q is the chain over them (exactly the distribution its draft is drawn from)
CHAIN_ROWS_WITHOUT_TOP_K = 64


def rows_top_k(sampler) -> int:
    """The logits per drafter row a proposal asks for: TOP_K for the confidence gate, and in
    rejection mode (a DraftContext.sampler) what the request's chain reads."""
    if sampler is None:
        return TOP_K
    return max(sampler.forward_top_k or CHAIN_ROWS_WITHOUT_TOP_K, TOP_K)


def pick_draft(sampler, values: np.ndarray, ids: np.ndarray, position: int,
               n_vocab: int | None = None) -> "tuple[int, tuple[np.ndarray, np.ndarray] | None] | None":
    """A drafter row's draft for output position `position`, as (token, q): in match mode
    (sampler None) the row's best id, with no q (a one-hot); in rejection mode drawn from
    q, the request's chain over the row. None where the row has no draft: its best id is
    one the target lacks (>= n_vocab), or the chain keeps no id the target has."""
    if sampler is None:
        token = int(ids[0])
        return None if n_vocab is not None and token >= n_vocab else (token, None)
    return sampler.sample(values, ids, position)


def top1_probability(top_logits: np.ndarray) -> float:
    """Softmax of the best logit over the top-k logits (best first; the first TOP_K)."""
    top_logits = top_logits[:TOP_K]
    e = np.exp(top_logits.astype(np.float64) - float(top_logits[0]))
    return float(e[0] / e.sum())


@dataclass
class DraftContext:
    """Everything a speculator may look at when it proposes. One dataclass, so a
    new signal is a new field and not a new overload of `propose`.

    history: the whole sequence so far; its last token is the one the next verify
        starts from (sampled, not yet forwarded through the target). It is the
        runtime's live list, not a copy (a copy per step would cost O(context)):
        read it during propose, do not keep it.
    position: that last token's position (len(history) - 1).
    max_draft: the most tokens this step may propose (window, context room and the
        generation's remaining budget already applied).
    hidden: the target's hidden row(s) that the last commit ended on, for
        speculators with needs_hidden_state; else None.
    shadow: the drafts will not be verified (the governor parked drafting and
        only checks whether they would have landed): propose, but learn nothing
        from this proposal.
    sampler: in rejection mode, the request's chain for drafter rows
        (engine.sampling.DraftSampler: distribution(values, ids) is q, draw(q,
        position) a draft from it); a drafter with a distribution draws its drafts
        from q and reports q (draft_probabilities). None in match mode: draft the
        most likely token.
    """

    history: Sequence[int]
    position: int
    max_draft: int
    hidden: np.ndarray | None = None
    shadow: bool = False
    sampler: Any = None


class Speculator(ABC):
    """One speculation algorithm bound to one sequence."""

    name: str = ""
    #: The confidence gate's default when --spec-pmin is not given. Its meaning is
    #: the algorithm's own (n-gram: scales the required match length).
    default_min_draft_prob: float = 0.0
    needs_hidden_state: bool = False
    #: The target taps the verify returns for commit (ggspec.Target.spec_forward's
    #: hidden_layers) when needs_hidden_state.
    hidden_layers: tuple = ()
    handles_own_prefill: bool = False
    #: Whether drafting may start on a sequence whose KV prefix it never saw
    #: (the next turn of a chat). Per-position heads chain state token by token
    #: and cannot; history-mining and ring-buffer drafters can.
    can_arm_after_prefix_reuse: bool = False
    #: Proposing costs next to nothing (no forward pass), so while the governor
    #: parks drafting the runtime may still propose, unverified, to see whether
    #: drafting would pay again.
    proposes_cheaply: bool = False
    #: Each draft is a pass of its own (a per-token head), so a step's drafting cost
    #: grows with its drafts; else one pass proposes the whole window.
    pass_per_draft: bool = False

    def __init__(self, max_draft_tokens: int, min_draft_prob: float | None = None):
        if not 1 <= max_draft_tokens <= 64:
            raise ValueError(f"max_draft_tokens must be in [1, 64], got {max_draft_tokens}")
        self.max_draft_tokens = max_draft_tokens
        self.min_draft_prob = self.default_min_draft_prob if min_draft_prob is None else min_draft_prob

    @abstractmethod
    def propose(self, ctx: DraftContext, out: list[int]) -> int:
        """Appends up to ctx.max_draft guesses for the tokens after ctx.history to
        `out`; returns how many (0 = take a plain step)."""

    #: the q of each draft of the last proposal, as pick_draft gave it (None: a one-hot);
    #: a speculator that draws its drafts sets it in each proposal
    proposal_q: Sequence = ()

    def draft_probabilities(self, index: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(ids, probs) of the distribution draft `index` of the last proposal was
        drawn from, for the rejection acceptance mode; None = deterministic (a
        one-hot at the proposed token)."""
        return self.proposal_q[index] if index < len(self.proposal_q) else None

    def begin(self, history: Sequence[int]) -> None:
        """The prompt is in the target's KV, and history (the runtime's live list) ends
        with its first sampled token, the pending one. A drafter with a context of its
        own (a draft model) builds it here, in the prompt's time, instead of in the first
        drafting step, which the governor judges."""

    def commit(self, tokens: Sequence[int], hidden_rows: np.ndarray | None, start_pos: int) -> None:
        """What landed in the target: `tokens` at positions start_pos.., with their
        exact hidden rows when needs_hidden_state."""

    def idle(self) -> None:
        """The coming step proposes nothing: the governor parked drafting. A speculator
        that catches up lazily on what it missed may stop keeping all of it."""

    def reset(self) -> None:
        """The sequence was replaced: forget everything about it."""
