"""Stop strings, matched in the generated text across token boundaries.

Text streams out as it is decoded, except a tail that could still be the start
of a stop string: that tail waits for the next piece, even past a shorter stop
string complete inside it (the one that began first wins). When a stop string
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
        found = _first_match(text, self.stops)
        keep = max((_overlap(text, s) for s in self.stops), default=0)
        start = len(text) - keep  # where the earliest stop string that may still complete begins
        if found and found[0] <= start:  # none can still complete before it
            i, self.matched = found
            self._held = ""
            return text[:i]
        self._held = text[start:]  # with a complete stop string in it, when a longer one began earlier
        return text[:start]

    def flush(self) -> str:
        """The held tail, at the end of generation: the text before a stop string complete in
        it (`matched`), else all of it (no stop string can complete now)."""
        held, self._held = self._held, ""
        found = _first_match(held, self.stops)
        if found:
            self.matched = found[1]
            return held[:found[0]]
        return held


def _first_match(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(where, which) of the stop string that completes first in text, by where it begins."""
    found = [(i, s) for s in stops if (i := text.find(s)) >= 0]
    return min(found) if found else None


def _overlap(text: str, stop: str) -> int:
    """The longest suffix of text that is a proper prefix of stop."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


__all__ = ["StopStrings"]
