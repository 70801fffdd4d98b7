"""A block drafter (DFlash, DFlash2, DSpark) attached to the target from its own GGUF.

It reads the target's residual rows entering `target_layers` (concatenated per
row) and drafts a whole block [anchor, MASK x n] in one forward; its KV cache
holds the injected rows of committed tokens. Embeddings and LM head are the
target's unless the drafter ships its own (borrowed in the C++ core). A DSpark
block is anchor-first: the anchor's own row drafts too (first_draft_row 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Draft:
    """Pass C's result for the block's rows that draft (from first_draft_row on).

    values, ids: [rows, k]. DFlash: each row's top-k logits and ids, best first;
    DSpark: the same of its Markov-biased logits. DFlash2: each row's candidates
    (unordered) and unary scores, row 0's including its transition from the anchor.
    pairs: DFlash2's [rows - 1, k, k] transition scores, pairs[i - 1][p][c] from row
    i-1's candidate p to row i's candidate c; None otherwise. confidence: a DSpark
    confidence head's [rows] scores (its predicted acceptance of each row); None
    otherwise.
    """

    values: np.ndarray
    ids: np.ndarray
    pairs: np.ndarray | None
    confidence: np.ndarray | None = None

    def walk(self) -> tuple[list[int], list[float]]:
        """The greedy left-to-right draft and each position's probability: DFlash2's
        softmax of the k scores given the chosen predecessor, DFlash's top-1 over its
        top-k logits."""
        tokens, probabilities = [], []
        chosen = None
        for i in range(len(self.ids)):
            scores = self.values[i].astype(np.float64)
            if self.pairs is not None and i > 0:
                scores = scores + self.pairs[i - 1][chosen]
            chosen = int(np.argmax(scores))
            e = np.exp(scores - scores[chosen])
            tokens.append(int(self.ids[i][chosen]))
            probabilities.append(float(1.0 / e.sum()))
        return tokens, probabilities


class BlockDrafter:
    """The drafter's passes on one sequence of the target (seq; for_sequence gives another's)."""

    def __init__(self, core, lock, *, conv: bool, selector: bool, fused: bool, seq: int = 0):
        self._core = core
        self._lock = lock  # the target's: the drafter runs inside the same core
        self.switches = {"conv": conv, "selector": selector, "fused": fused}  # as attached
        self.seq = seq
        self.path = core.drafter_path
        self.target_layers = tuple(core.drafter_target_layers)
        self.block_size = core.drafter_block_size
        self.mask_token = core.drafter_mask_token
        self.lattice = core.drafter_is_lattice  # DFlash2's candidate lattice, walked on the host
        self.dspark = core.drafter_is_dspark
        self.first_draft_row = core.drafter_first_draft_row  # 0: an anchor-first block (DSpark)
        self.max_draft = self.block_size - self.first_draft_row  # the most tokens one block drafts
        self.head_rows = core.drafter_head_rows  # the most top-k ids a row can report

    def for_sequence(self, seq: int) -> "BlockDrafter":
        """The same drafter on sequence `seq`: its own KV region, as the trunk's."""
        return BlockDrafter(self._core, self._lock, **self.switches, seq=seq)

    def inject(self, features: np.ndarray, start: int) -> None:
        """Passes A+B: committed rows' features [n, len(target_layers) * n_embd] at positions start.."""
        with self._lock:
            self._core.drafter_inject(features, int(start), self.seq)

    def draft(self, anchor: int, position: int, n_block: int, top_k: int) -> Draft:
        """Pass C over [anchor, MASK x (n_block - 1)] at positions position..: the rows from
        first_draft_row on, each drafting the token after it."""
        with self._lock:
            return Draft(*self._core.drafter_draft(int(anchor), int(position), int(n_block), int(top_k), self.seq))

    @property
    def readback_bytes(self) -> int:
        """Bytes pass C has copied to the host (a DFlash2 lattice: exactly its size)."""
        return self._core.drafter_readback_bytes

    @property
    def seconds(self) -> dict[str, float]:
        """Time in passes A+B (inject) and pass C (draft) so far."""
        return {"inject": self._core.drafter_inject_seconds, "draft": self._core.drafter_draft_seconds}

    @property
    def graph_calls(self) -> int:
        return self._core.drafter_graph_calls


__all__ = ["BlockDrafter"]
