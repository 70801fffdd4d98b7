"""Regex character classes narrowed to the Unicode version llama.cpp's tables know.

The `tokenizers` regex engine (Oniguruma) classifies characters by Unicode 16.0;
llama.cpp's own tables (src/unicode-data.cpp) predate it and treat the characters
16.0 added as unassigned, so for llama.cpp they are neither letters, numbers nor
punctuation. Removing them from \\p{L}, \\p{N} and \\p{P} makes Oniguruma split text
where llama.cpp does. The ranges are the difference between the two tables, for
the categories the pre-tokenizer regexes use.
"""

from __future__ import annotations

_UNKNOWN_TO_LLAMA_CPP = {
    "L": [
        (0x1C89, 0x1C8A), (0xA7CB, 0xA7CD), (0xA7DA, 0xA7DC), (0x105C0, 0x105F3), (0x10D4A, 0x10D65),
        (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x11380, 0x11389), (0x1138B, 0x1138B), (0x1138E, 0x1138E),
        (0x11390, 0x113B5), (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3), (0x11BC0, 0x11BE0),
        (0x13460, 0x143FA), (0x16100, 0x1611D), (0x16D40, 0x16D6C), (0x18CFF, 0x18CFF), (0x1E5D0, 0x1E5ED),
        (0x1E5F0, 0x1E5F0),
    ],
    "N": [
        (0x10D40, 0x10D49), (0x116D0, 0x116E3), (0x11BF0, 0x11BF9), (0x16130, 0x16139), (0x16D70, 0x16D79),
        (0x1CCF0, 0x1CCF9), (0x1E5F1, 0x1E5FA),
    ],
    "P": [
        (0x1B4E, 0x1B4F), (0x1B7F, 0x1B7F), (0x10D6E, 0x10D6E), (0x113D4, 0x113D5), (0x113D7, 0x113D8),
        (0x11BE1, 0x11BE1), (0x16D6D, 0x16D6F), (0x1E5FF, 0x1E5FF),
    ],
}


def _excluded(category: str) -> str:
    parts = []
    for lo, hi in _UNKNOWN_TO_LLAMA_CPP[category]:
        parts.append(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}")
    return "".join(parts)


def as_llama_cpp_classes(regex: str) -> str:
    """regex with each \\p{L}, \\p{N}, \\p{P} replaced by a nested class without the newer characters.

    Oniguruma accepts a nested class both on its own and inside another class.
    """
    for category in _UNKNOWN_TO_LLAMA_CPP:
        regex = regex.replace(f"\\p{{{category}}}", f"[\\p{{{category}}}&&[^{_excluded(category)}]]")
    return regex
