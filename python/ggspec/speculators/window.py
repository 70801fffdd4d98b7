"""A draft window that follows what the target accepts.

It starts at 4 drafts, doubles (up to its cap) after a fully accepted draft that
filled it, and drops to accepted + 1 after a partly rejected one. A draft shorter
than the window (its drafter ran out, or a gate stopped it) never tested the
window's edge, so it leaves the window as it is.
"""

from __future__ import annotations

from typing import Sequence

START = 4


class AdaptiveWindow:
    """fixed: a window the operator fixed (it never adapts); else it adapts up to `cap`."""

    def __init__(self, cap: int, fixed: int | None = None):
        if fixed is not None and fixed < 1:
            raise ValueError(f"window must be at least 1, got {fixed}")
        self.cap = cap
        self.fixed = fixed
        self.reset()

    def reset(self) -> None:
        self.size = self.fixed or min(START, self.cap)
        self._proposed: list[int] = []
        self._proposed_at = -1

    def proposed(self, drafts: Sequence[int], position: int) -> None:
        """The drafts a verifying step will check, proposed after the token at `position`."""
        self._proposed = [int(t) for t in drafts]
        self._proposed_at = position

    def landed(self, tokens: Sequence[int], start_pos: int) -> None:
        """A commit: tokens = [the token the verify started from, accepted drafts...]. Any
        other commit (prefill, a plain step) says nothing about the last proposal."""
        if self.fixed is not None or not self._proposed or start_pos != self._proposed_at:
            return
        accepted = 0
        for proposed, kept in zip(self._proposed, tokens[1:]):
            if int(kept) != proposed:
                break
            accepted += 1
        if accepted < len(self._proposed):
            self.size = accepted + 1
        elif accepted == self.size:
            self.size = min(2 * self.size, self.cap)
        self._proposed = []


__all__ = ["AdaptiveWindow"]
