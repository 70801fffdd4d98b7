"""A per-token draft head: a NextN (MTP) block carried by the target's own GGUF, or an
EAGLE-3 drafter or a Gemma 4 assistant attached from its own (Target.attach_draft_head).

The head row for the token at position q reads that token and the trunk's rows at
q - 1 (NextN, the Gemma 4 assistant: the final hidden row; EAGLE-3: three tapped
layers' rows), or, for a chained draft, the head's own output row, and predicts the
token at q + 1. A NextN head's row for token 0 reads a zero row; EAGLE-3 has no row
for token 0 (it pairs token P + 1 with the trunk's rows at P, at position P). The
Gemma 4 assistant keeps no KV (it attends over the trunk's cache): a catch-up costs
it nothing, and every step of its draft sits at the position of the token the draft
follows. What the head lacks it borrows from the trunk in the C++ core.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Step = tuple[np.ndarray, np.ndarray, np.ndarray]  # top-k logits, top-k ids (best first), output row


class DraftHead:
    """The head's rows of one sequence of the target (seq; for_sequence gives another's).
    path: the GGUF it came from (the target's own for a NextN head)."""

    def __init__(self, core, lock, path: str, seq: int = 0):
        self._core = core
        self._lock = lock  # the target's: the head runs inside the same core
        self.path = path
        self.seq = seq
        #: the Target taps a head row reads (Target.spec_forward's hidden_layers), concatenated
        self.trunk_taps = tuple("final" if tap < 0 else int(tap) for tap in core.head_trunk_taps)
        self.trunk_row_width = core.head_trunk_width

    def for_sequence(self, seq: int) -> "DraftHead":
        """The same head on sequence `seq`: its own KV region, as the trunk's."""
        return DraftHead(self._core, self._lock, self.path, seq)

    def draft_catch_up(self, tokens: Sequence[int], trunk_rows: np.ndarray, start: int) -> None:
        """Rows with exact inputs (committed tokens, the trunk's rows before them) into the
        head's KV for the tokens at positions start..; forgets what it held from `start` on."""
        with self._lock:
            self._core.head_forward(np.asarray(tokens, np.int32), trunk_rows, int(start), 0, self.seq)

    def draft_catch_up_and_step(self, tokens: Sequence[int], trunk_rows: np.ndarray, start: int, top_k: int) -> Step:
        """The catch-up over all but the last row and the first draft step on the last, as ONE graph."""
        with self._lock:
            return self._core.head_forward(np.asarray(tokens, np.int32), trunk_rows, int(start), int(top_k), self.seq)

    def draft_step(self, token: int, head_row: np.ndarray, position: int, top_k: int) -> Step:
        """A chained row: `token` at `position`, reading the head's own output row before it."""
        with self._lock:
            return self._core.head_forward(np.asarray([token], np.int32), head_row.reshape(1, -1), int(position),
                                           int(top_k), self.seq, chained=True)

    def skip(self, start: int, end: int) -> None:
        """Forgets what the head held from `start` on and goes on at `end`: positions
        [start, end) stay empty, masked from its attention."""
        with self._lock:
            self._core.head_skip(int(start), int(end), self.seq)

    @property
    def graph_calls(self) -> int:
        """Head graphs computed so far (a catch-up longer than one graph counts each chunk)."""
        return self._core.head_graph_calls


__all__ = ["DraftHead"]
