"""A per-token draft head carried by the target's own GGUF (MTP / NextN).

The head row for the token at position q reads that token and the trunk's final
hidden row at q - 1 (or, for a chained draft, the head's own output row), and
predicts the token at q + 1. Its weights are the file's block n_layer; what it
lacks it borrows from the trunk in the C++ core.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Step = tuple[np.ndarray, np.ndarray, np.ndarray]  # top-k logits, top-k ids (best first), output hidden row


class NextnHead:
    """The head's rows of one sequence of the target (seq; for_sequence gives another's)."""

    def __init__(self, core, lock, seq: int = 0):
        self._core = core
        self._lock = lock  # the target's: the head runs inside the same core
        self.seq = seq

    def for_sequence(self, seq: int) -> "NextnHead":
        """The same head on sequence `seq`: its own KV region, as the trunk's."""
        return NextnHead(self._core, self._lock, seq)

    def draft_catch_up(self, tokens: Sequence[int], hidden: np.ndarray, start: int) -> None:
        """Rows with exact inputs (committed tokens, the trunk's rows before them) into the
        head's KV at positions start..; forgets what the head held from `start` on."""
        with self._lock:
            self._core.head_forward(np.asarray(tokens, np.int32), hidden, int(start), 0, self.seq)

    def draft_step(self, token: int, hidden_row: np.ndarray, position: int, top_k: int) -> Step:
        """One row: `token` at `position`, reading hidden_row [n_embd]."""
        with self._lock:
            return self._core.head_forward(np.asarray([token], np.int32), hidden_row.reshape(1, -1), int(position),
                                           int(top_k), self.seq)

    def draft_catch_up_and_step(self, tokens: Sequence[int], hidden: np.ndarray, start: int, top_k: int) -> Step:
        """The catch-up over all but the last row and the step on the last, as ONE graph."""
        with self._lock:
            return self._core.head_forward(np.asarray(tokens, np.int32), hidden, int(start), int(top_k), self.seq)

    def skip(self, start: int, end: int) -> None:
        """Forgets what the head held from `start` on and goes on at `end`: positions
        [start, end) stay empty, masked from its attention."""
        with self._lock:
            self._core.head_skip(int(start), int(end), self.seq)

    @property
    def graph_calls(self) -> int:
        """Head graphs computed so far (a catch-up longer than one graph counts each chunk)."""
        return self._core.head_graph_calls


__all__ = ["NextnHead"]
