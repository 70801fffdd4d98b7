"""Cutting special tokens out of raw text before tokenization (llama.cpp's tokenizer_st_partition).

Special tokens are taken one at a time, longest text first; each cuts every
occurrence (leftmost first, no overlaps) out of every text fragment still left.
Without parse_special only user-defined tokens are cut; control and unknown
tokens' text stays text. A token marked LSTRIP / RSTRIP also removes the ASCII
whitespace (C isspace) before / after it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ggspec.text.specials import CONTROL, LSTRIP, RSTRIP, UNKNOWN

_C_SPACE = " \t\n\v\f\r"

Fragment = str | int  # raw text, or a token id


class SpecialSplitter:
    """The special tokens one parse_special mode cuts, ready to apply to many texts."""

    def __init__(self, order: Sequence[int], tokens: Sequence[str], attrs: np.ndarray, parse_special: bool):
        skip = 0 if parse_special else CONTROL | UNKNOWN
        self._entries = [
            (tid, tokens[tid], bool(attrs[tid] & LSTRIP), bool(attrs[tid] & RSTRIP))
            for tid in order
            if not attrs[tid] & skip
        ]
        # Gemma has ~6000 control tokens; looking only at those whose first character
        # occurs in the text keeps a short encode from testing every one of them.
        self._by_first: dict[str, list[int]] = {}
        for rank, (_, text, _, _) in enumerate(self._entries):
            self._by_first.setdefault(text[0], []).append(rank)

    def split(self, text: str) -> list[Fragment]:
        fragments: list[Fragment] = [text] if text else []
        if not self._entries or not text:
            return fragments
        present = set(text).intersection(self._by_first)
        ranks = sorted(r for c in present for r in self._by_first[c])
        for rank in ranks:
            tid, special, lstrip, rstrip = self._entries[rank]
            # Every fragment is a substring of text, so a token absent from it is absent everywhere.
            if special in text:
                fragments = _cut(fragments, tid, special, lstrip, rstrip)
        return fragments


def _cut(fragments: list[Fragment], tid: int, special: str, lstrip: bool, rstrip: bool) -> list[Fragment]:
    out: list[Fragment] = []
    for frag in fragments:
        if isinstance(frag, int) or special not in frag:
            out.append(frag)
            continue
        start = 0
        while True:
            at = frag.find(special, start)
            if at < 0:
                if start < len(frag):
                    out.append(frag[start:])
                break
            left = frag[start:at]
            if lstrip:
                left = left.rstrip(_C_SPACE)
            if left:
                out.append(left)
            out.append(tid)
            start = at + len(special)
            if rstrip:
                while start < len(frag) and frag[start] in _C_SPACE:
                    start += 1
    return out
