"""One sequence of a many-sequence target, seen as a target of its own.

The speculative runtime drives a sequence through this view as it drives a
one-sequence Target: rewinds, lengths and the context are the sequence's. Its
forwards are one-sequence forwards; a batch scheduler runs many sequences'
rows together with Target.forward_batch instead, and gives each view its rows.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ggspec.native.block_drafter import BlockDrafter
from ggspec.native.draft_model import DraftSequence
from ggspec.native.draft_head import DraftHead
from ggspec.native.target import ForwardResult, Tap, Target


class SequenceView:
    """Sequence `seq` of `target`: its KV region, recurrent state and drafter regions."""

    def __init__(self, target: Target, seq: int):
        self.target = target
        self.seq = seq

    n_vocab = property(lambda self: self.target.n_vocab)
    n_embd = property(lambda self: self.target.n_embd)
    n_threads = property(lambda self: self.target.n_threads)
    max_context_length = property(lambda self: self.target.max_context_length)
    max_verify_rows = property(lambda self: self.target.max_verify_rows)
    max_batch_rows = property(lambda self: self.target.max_batch_rows)
    graph_builds = property(lambda self: self.target.graph_builds)
    verify_persists_accepted_kv = property(lambda self: self.target.verify_persists_accepted_kv)

    @property
    def state_transfer_bytes(self) -> int:
        return self.target.sequence_state_transfer_bytes(self.seq)

    @property
    def draft_head(self) -> DraftHead | None:
        """The target's draft head on this sequence (its own KV region), or None."""
        head = self.target.draft_head
        return None if head is None else head.for_sequence(self.seq)

    @property
    def block_drafter(self) -> BlockDrafter | None:
        """The attached block drafter on this sequence, or None."""
        drafter = self.target.block_drafter
        return None if drafter is None else drafter.for_sequence(self.seq)

    @property
    def draft_model(self) -> DraftSequence | None:
        """The attached draft model's sequence of the same number, or None."""
        model = self.target.draft_model
        return None if model is None else model.for_sequence(self.seq)

    def attach_draft_model(self, path, **options) -> DraftSequence:
        """Attaches a draft model to the whole target (see Target.attach_draft_model); returns
        it on this sequence."""
        return self.target.attach_draft_model(path, **options).for_sequence(self.seq)

    def attach_draft_head(self, path) -> DraftHead:
        """Attaches a draft head (EAGLE-3, a Gemma 4 assistant) to the whole target (see
        Target.attach_draft_head); returns it on this sequence."""
        return self.target.attach_draft_head(path).for_sequence(self.seq)

    def attach_drafter(self, path, **switches) -> BlockDrafter:
        """Attaches a block drafter to the whole target (every sequence's drafter
        region starts empty); returns it on this sequence."""
        return self.target.attach_drafter(path, **switches).for_sequence(self.seq)

    @property
    def cache_seq_len(self) -> int:
        return self.target.sequence_length(self.seq)

    def spec_forward(self, tokens: Sequence[int] | np.ndarray, *, all_logits: bool = False,
                     hidden_layers: Sequence[Tap] = (), top_k: int = 0) -> ForwardResult:
        return self.target.spec_forward(tokens, all_logits=all_logits, hidden_layers=hidden_layers, top_k=top_k,
                                        seq=self.seq)

    def rewind(self, length: int) -> None:
        self.target.rewind(length, self.seq)

    def reset(self) -> None:
        self.target.reset_sequence(self.seq)

    def snapshot_recurrent(self) -> None:
        self.target.snapshot_recurrent(self.seq)

    def restore_recurrent(self) -> None:
        self.target.restore_recurrent(self.seq)


__all__ = ["SequenceView"]
