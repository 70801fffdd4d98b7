"""A standalone draft model attached to a target: a smaller language model of its own
GGUF, loaded as a Target of its own (weights, a KV region per sequence, threads).

Each sequence of the target has the draft's sequence of the same number. The draft
sequence records which tokens its cache holds, so whoever drafts with it can keep
what still matches the target's history and forward only the rest.

The two models take turns on the same cores: each forward of one pauses the other's
thread pool first, so that the idle pool's workers sleep instead of polling for
work (ggml's default) on a core the busy one needs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Step = tuple[np.ndarray, np.ndarray]  # the last row's top-k logits and ids, best first


class DraftModel:
    """The draft Target, sized to the trunk's sequences; DraftSequence drafts on one."""

    def __init__(self, draft, trunk, path: str):
        self.target = draft
        self.path = path
        self._trunk = trunk
        self.n_threads = draft.n_threads
        if draft.recurrent:
            # a draft rolls back to where its drafting began: a state kept on the host
            draft.set_recurrent_rollback("reforward")
        self._held: list[list[int]] = []
        self.set_sequences(trunk.sequences)

    @property
    def n_vocab(self) -> int:
        return self.target.n_vocab

    def set_sequences(self, n: int) -> None:
        """One draft sequence per trunk sequence; every one starts empty."""
        if self.target.sequences != n:
            self.target.set_sequences(n)
        else:
            self.target.reset()
        self._held = [[] for _ in range(n)]


class DraftSequence:
    """The draft model's sequence `seq`: what its cache holds, and forwards that extend it."""

    def __init__(self, model: DraftModel, seq: int = 0):
        self.model = model
        self.seq = seq
        self.path = model.path
        self.n_threads = model.n_threads
        self._mark = -1  # where the last mark() kept a recurrent state to roll back to

    def for_sequence(self, seq: int) -> "DraftSequence":
        """The same draft model on sequence `seq`."""
        return DraftSequence(self.model, seq)

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def held(self) -> list[int]:
        """The tokens the draft's cache holds, positions 0.. (do not modify)."""
        return self.model._held[self.seq]

    @property
    def max_context_length(self) -> int:
        return self.model.target.max_context_length

    def rewind(self, length: int) -> int:
        """Keeps at most the first `length` held positions; returns how many it kept. An
        attention-only draft keeps exactly min(length, held); a recurrent one can only go
        back to its last mark() (or to the start), so it may keep fewer."""
        held = self.held
        length = min(length, len(held))
        if length < len(held):
            target = self.model.target
            if target.recurrent:
                if self._mark < 0 or length < self._mark:
                    length = 0
                    target.reset_sequence(self.seq)
                else:
                    length = self._mark
                    target.restore_recurrent(self.seq)
                    target.rewind(length, self.seq)
            else:
                target.rewind(length, self.seq)
            del held[length:]
        return length

    def mark(self) -> None:
        """Remembers this point as one a recurrent draft can rewind to (a no-op otherwise)."""
        target = self.model.target
        if target.recurrent:
            target.snapshot_recurrent(self.seq)
            self._mark = len(self.held)

    def extend(self, tokens: Sequence[int], top_k: int) -> Step:
        """Forwards `tokens` after what is held (one batched forward, chunked when long);
        returns the last row's top_k logits and ids."""
        self.model._trunk.pause_threads()
        try:
            out = self.model.target.spec_forward(tokens, top_k=top_k, seq=self.seq)
        except BaseException:
            # what the forward left behind is unknown: the next drafting starts afresh
            self.model._held[self.seq] = []
            self.model.target.reset_sequence(self.seq)
            raise
        self.held.extend(int(t) for t in tokens)
        return out.logits[-1], out.ids[-1]

    def pause(self) -> None:
        """Drafting is over for this step: the draft's threads sleep while the trunk verifies."""
        self.model.target.pause_threads()


__all__ = ["DraftModel", "DraftSequence"]
