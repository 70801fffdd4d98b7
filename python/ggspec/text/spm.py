"""BPE merges that make Hugging Face's BPE tokenize like llama.cpp's SentencePiece tokenizer.

llama.cpp's llm_tokenizer_spm starts from one symbol per character and repeatedly
joins the adjacent pair whose concatenation is a vocabulary token with the highest
score. A BPE model does the same if it has a merge for every way of splitting a
token into two symbols, ranked by the joined token's score: that is the list built
here (the approach of transformers' SentencePieceExtractor).

llama.cpp's symbols can also be characters that are not tokens themselves; they
still join when the concatenation is a token. BPE needs every symbol in its
vocabulary, so such characters become "phantom" symbols with ids past the real
vocabulary; one left unjoined stands for its UTF-8 bytes, as in llama.cpp.

Ties in score are broken by token id, then by split point. llama.cpp breaks them
by position (leftmost pair first), which no fixed ranking can reproduce in every
case; it matters only when two different tokens, or two splits of one token,
with the same score compete for one symbol.
"""

from __future__ import annotations

import re

import numpy as np

_SURROGATE = re.compile("[\ud800-\udfff]")


def matchable(token: str) -> bool:
    """False for a token whose bytes are not valid UTF-8 (kept as surrogates): text never contains it."""
    return _SURROGATE.search(token) is None


def phantom_symbols(tokens: list[str]) -> list[str]:
    """Characters that occur inside tokens but are not tokens, in a fixed order."""
    known = set(tokens)
    chars = set("".join(t for t in tokens if matchable(t)))
    return sorted(c for c in chars if c not in known)


def spm_merges(tokens: list[str], scores: np.ndarray, phantoms: list[str]) -> np.ndarray:
    """Merges as an int32 array of (left, right) symbol ids, highest priority first.

    Symbol ids are token ids, then n_tokens + i for phantoms[i].
    """
    symbol = {t: i for i, t in enumerate(tokens)}
    symbol.update((c, len(tokens) + i) for i, c in enumerate(phantoms))
    lefts: list[int] = []
    rights: list[int] = []
    owners: list[int] = []
    splits: list[int] = []
    get = symbol.get
    for i, text in enumerate(tokens):
        if len(text) < 2 or not matchable(text):
            continue
        for k in range(1, len(text)):
            left = get(text[:k])
            if left is None:
                continue
            right = get(text[k:])
            if right is None:
                continue
            lefts.append(left)
            rights.append(right)
            owners.append(i)
            splits.append(k)
    if not owners:
        return np.zeros((0, 2), np.int32)
    owner = np.asarray(owners, np.int64)
    # Highest score first; np.lexsort sorts by its last key first.
    order = np.lexsort((np.asarray(splits), owner, -scores[owner].astype(np.float64)))
    return np.stack([np.asarray(lefts, np.int32)[order], np.asarray(rights, np.int32)[order]], axis=1)
