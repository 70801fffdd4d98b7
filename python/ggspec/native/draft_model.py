"""A standalone draft model attached to a target: a smaller language model of its own
GGUF, loaded as a Target of its own (weights, a KV region per sequence, threads).

Each sequence of the target has the draft's sequence of the same number. The draft
sequence records which tokens its cache holds, so whoever drafts with it can keep
what still matches the target's history and forward only the rest.

The two models take turns on the same cores: the draft pauses the target's thread
pool before each of its forwards and its own when it has drafted, so that the idle
pool's workers sleep instead of polling for work (ggml's default) on a core the
busy one needs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Step = tuple[np.ndarray, np.ndarray]  # the last row's top-k logits and ids, best first


class DraftModel:
    """The draft Target, sized to the trunk's sequences; DraftSequence drafts on one.
    threads_asked: the thread count the caller asked for (None: the trunk's)."""

    def __init__(self, draft, trunk, path: str, threads_asked: int | None = None):
        self.target = draft
        self.path = path
        self.threads_asked = threads_asked
        self._trunk = trunk
        self.n_threads = draft.n_threads
        if draft.recurrent:
            # a draft rolls back to where its drafting began: a state kept on the host
            draft.set_recurrent_rollback("reforward")
        if draft.sequences != trunk.sequences:
            draft.set_sequences(trunk.sequences)
        self._held: list[list[int]] = [[] for _ in range(trunk.sequences)]
        # per sequence, the length its recurrent state was kept at by mark(), or -1
        self._marks: list[int] = [-1] * trunk.sequences

    @property
    def n_vocab(self) -> int:
        return self.target.n_vocab

    def set_sequences(self, n: int) -> None:
        """One draft sequence per trunk sequence; a change empties every one (as the trunk's)."""
        if self.target.sequences == n:
            return
        self.target.set_sequences(n)
        self._held = [[] for _ in range(n)]
        self._marks = [-1] * n

    def empty(self, seq: int) -> None:
        """Sequence seq holds nothing again (and has no mark)."""
        self.target.reset_sequence(seq)
        self._held[seq] = []
        self._marks[seq] = -1


class DraftSequence:
    """The draft model's sequence `seq`: what its cache holds, and forwards that extend it."""

    def __init__(self, model: DraftModel, seq: int = 0):
        self.model = model
        self.seq = seq
        self.path = model.path
        self.n_threads = model.n_threads
        self.threads_asked = model.threads_asked

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

    @property
    def stamp(self) -> int:
        """Changes whenever this sequence's cache does: equal stamps, the same held tokens."""
        return self.model.target.sequence_stamp(self.seq)

    def rewind(self, length: int) -> int:
        """Keeps at most the first `length` held positions; returns how many it kept. An
        attention-only draft keeps min(length, held) where its cache can go back that far
        (a sliding-window ring keeps only its recent positions); a recurrent one goes back
        only to its last mark(). Where it cannot, the sequence starts again from empty."""
        model, target = self.model, self.model.target
        held = self.held
        length = min(length, len(held))
        if length == len(held):
            return length
        mark = model._marks[self.seq]
        if target.recurrent:
            if length < mark or mark < 0:
                model.empty(self.seq)
                return 0
            length = mark
        try:
            if target.recurrent:
                target.restore_recurrent(self.seq)
            target.rewind(length, self.seq)
        except ValueError:  # the ring no longer holds position `length`
            model.empty(self.seq)
            return 0
        del held[length:]
        return length

    def mark(self) -> None:
        """Remembers this point as one a recurrent draft can rewind to (a no-op otherwise)."""
        model = self.model
        if model.target.recurrent:
            model.target.snapshot_recurrent(self.seq)
            model._marks[self.seq] = len(self.held)

    def extend(self, tokens: Sequence[int], top_k: int) -> Step:
        """Forwards `tokens` after what is held (one batched forward, chunked when long);
        returns the last row's top_k logits and ids."""
        self.model._trunk.pause_threads()
        try:
            out = self.model.target.spec_forward(tokens, top_k=top_k, seq=self.seq)
        except BaseException:
            # what the forward left behind is unknown: the next drafting starts afresh
            self.model.empty(self.seq)
            raise
        self.held.extend(int(t) for t in tokens)
        return out.logits[-1], out.ids[-1]

    def pause(self) -> None:
        """Drafting is over for this step: the draft's threads sleep while the trunk verifies."""
        self.model.target.pause_threads()


__all__ = ["DraftModel", "DraftSequence"]
