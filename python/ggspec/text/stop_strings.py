"""Stop strings, matched in the generated text across token boundaries.

Text streams out as it is decoded, except a tail that could still be the start
of a stop string: that tail waits for the next piece. When a stop string
completes, the text before it is the last to go out, and the stop string itself
never does (OpenAI's and llama-server's `stop`).
"""

from __future__ import annotations

from typing import Sequence


class StopStrings:
    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in dict.fromkeys(stops) if s]
        self._held = ""       # a tail that may begin a stop string
        self.matched: str | None = None

    def push(self, piece: str) -> str:
        """The text that can go out now, after `piece`; once a stop string has
        completed (`matched`), only the text before it, and nothing after."""
        if self.matched is not None:
            return ""
        text = self._held + piece
        if not self.stops:
            return text
        found = [(i, s) for s in self.stops if (i := text.find(s)) >= 0]
        if found:
            i, self.matched = min(found)
            self._held = ""
            return text[:i]
        keep = max((_overlap(text, s) for s in self.stops), default=0)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        """The held tail, at the end of generation (no stop string can complete now)."""
        held, self._held = self._held, ""
        return held


def _overlap(text: str, stop: str) -> int:
    """The longest suffix of text that is a proper prefix of stop."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


__all__ = ["StopStrings"]
