"""One sequence of a many-sequence target, seen as a target of its own.

The speculative runtime drives a sequence through this view as it drives a
one-sequence Target: rewinds, lengths and the context are the sequence's. Its
forwards are one-sequence forwards; a batch scheduler runs many sequences'
rows together with Target.forward_batch instead, and gives each view its rows.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ggspec.native.target import ForwardResult, Tap, Target


class SequenceView:
    """Sequence `seq` of `target` (an attention-only trunk: recurrent ones hold one)."""

    verify_persists_accepted_kv = True  # an attention cache rewinds; nothing re-forwards
    state_transfer_bytes = 0

    def __init__(self, target: Target, seq: int):
        self.target = target
        self.seq = seq

    n_vocab = property(lambda self: self.target.n_vocab)
    max_context_length = property(lambda self: self.target.max_context_length)
    max_verify_rows = property(lambda self: self.target.max_verify_rows)
    graph_builds = property(lambda self: self.target.graph_builds)

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
        """Nothing to keep: an attention cache rolls back by rewinding."""

    def restore_recurrent(self) -> None:
        """Nothing to restore (see snapshot_recurrent)."""


__all__ = ["SequenceView"]
