"""A block drafter (DFlash) attached to the target from its own GGUF.

It reads the target's residual rows entering `target_layers` (concatenated per
row) and drafts a whole block [anchor, MASK x n] in one forward; its KV cache
holds the injected rows of committed tokens. Embeddings and LM head are the
target's unless the drafter ships its own (borrowed in the C++ core).
"""

from __future__ import annotations

import numpy as np

from ggspec.speculators.base import DraftHeadKind


class BlockDrafter:
    kind = DraftHeadKind.BLOCK

    def __init__(self, core):
        self._core = core
        self.path = core.drafter_path
        self.target_layers = tuple(core.drafter_target_layers)
        self.block_size = core.drafter_block_size
        self.mask_token = core.drafter_mask_token

    def inject(self, features: np.ndarray, start: int) -> None:
        """Passes A+B: committed rows' features [n, len(target_layers) * n_embd] at positions start.."""
        self._core.drafter_inject(features, int(start))

    def draft(self, anchor: int, position: int, n_block: int, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Pass C over [anchor, MASK x (n_block - 1)] at positions position..: the top-k logits
        and ids (best first) of each MASK row, [n_block - 1, top_k] each."""
        return self._core.drafter_draft(int(anchor), int(position), int(n_block), int(top_k))

    @property
    def graph_calls(self) -> int:
        return self._core.drafter_graph_calls


__all__ = ["BlockDrafter"]
