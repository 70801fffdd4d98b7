"""Detokenizing a stream of tokens without splitting a character.

A token can end in the middle of a UTF-8 sequence (SentencePiece byte tokens,
byte-level BPE pieces of an emoji). Decoding each piece on its own would print
replacement characters; the incremental UTF-8 decoder instead holds back a
sequence that is incomplete but may still complete, and replaces bytes that
can never form a character at once.
"""

from __future__ import annotations

import codecs

from ggspec.text.tokenizer import Tokenizer


class StreamDecoder:
    """push(token_id) -> the text completed by that token; flush() -> what is left."""

    def __init__(self, tokenizer: Tokenizer, special: bool = False):
        self._tokenizer = tokenizer
        self._special = special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self._tokenizer.token_to_piece(token_id, self._special))

    def flush(self) -> str:
        """The held-back bytes (as U+FFFD), and a fresh start for the next push."""
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text
