"""Text <-> token ids for a GGUF model, giving the ids llama.cpp's llama_tokenize gives."""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterable

from ggspec.text.hf_backend import Backend, build_backend
from ggspec.text.partition import SpecialSplitter
from ggspec.text.pieces import token_piece
from ggspec.text.vocab import Vocab, load_vocab

_SPM_SPACE = "\u2581"
_SURROGATE = re.compile("[\ud800-\udfff]")


class Tokenizer:
    """Tokenizer of one GGUF model.

    Attributes: n_vocab, bos_id, eos_id (None when the model has none), eog_ids (the
    ids that end generation, as llama.cpp's llama_vocab_is_eog), add_bos, add_eos
    (whether encode(add_special=True) adds them), chat_template (str or None).
    """

    def __init__(self, vocab: Vocab, backend: Backend):
        self._vocab = vocab
        self._backend = backend
        self._attrs = vocab.specials.attrs
        self._byte_level = vocab.model == "gpt2"
        order = vocab.specials.partition_order
        self._splitters = {
            mode: SpecialSplitter(order, vocab.tokens, self._attrs, parse_special=mode) for mode in (False, True)
        }
        self._pieces: dict[bool, list[bytes | None]] = {False: [None] * vocab.n_vocab, True: [None] * vocab.n_vocab}
        self.path = vocab.path
        self.n_vocab = vocab.n_vocab
        self.bos_id = vocab.bos_id
        self.eos_id = vocab.eos_id
        self.eog_ids = vocab.specials.eog_ids
        self.add_bos = vocab.add_bos
        self.add_eos = vocab.add_eos
        self.chat_template = vocab.chat_template

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> Tokenizer:
        """Reads the GGUF's tokenizer; raises ggspec.ModelFormatError if it is missing or unsupported."""
        vocab = load_vocab(path)
        return cls(vocab, build_backend(vocab))

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of text, as llama_tokenize(vocab, text, add_special, parse_special).

        add_special adds BOS / EOS where the model asks for them; parse_special turns
        the text of control tokens (e.g. "<start_of_turn>") into those tokens, while
        user-defined tokens are always matched.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        # Lone surrogates (e.g. from surrogateescape'd input) have no UTF-8 form.
        if _SURROGATE.search(text):
            text = _SURROGATE.sub("\ufffd", text)
        v = self._vocab
        fragments = self._splitters[bool(parse_special)].split(text)
        out: list[int] = []
        if add_special and self.add_bos:
            out.append(self.bos_id)
        # SentencePiece prefixes a space to text at the start and after each special token.
        prefix_space = v.model == "llama" and v.add_space_prefix
        prev_special = True
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            if prefix_space and prev_special:
                frag = " " + frag
            if v.escape_whitespaces:
                frag = frag.replace(" ", _SPM_SPACE)
            out += self._backend.encode(frag)
            prev_special = False
        if add_special and self.add_eos:
            out.append(self.eos_id)
        return out

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """The bytes of one token, as llama_token_to_piece(vocab, id, buf, len, 0, special)."""
        token_id = self._check_id(token_id)
        cache = self._pieces[bool(special)]
        piece = cache[token_id]
        if piece is None:
            piece = token_piece(self._vocab.tokens[token_id], int(self._attrs[token_id]), self._byte_level, special)
            cache[token_id] = piece
        return piece

    def decode(self, ids: Iterable[int], special: bool = False) -> str:
        """The concatenated pieces as text; invalid UTF-8 becomes U+FFFD."""
        return b"".join(self.token_to_piece(i, special) for i in ids).decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """The token's raw vocabulary string (e.g. "<bos>", "▁the", "Ġthe")."""
        return self._vocab.tokens[self._check_id(token_id)]

    def _check_id(self, token_id: int) -> int:
        try:
            index = operator.index(token_id)  # accepts NumPy integers, refuses floats
        except TypeError:
            index = -1
        if isinstance(token_id, bool) or not 0 <= index < self.n_vocab:
            raise ValueError(f"token id {token_id!r} is outside the vocabulary (0..{self.n_vocab - 1})")
        return index

    def __repr__(self) -> str:
        return f"Tokenizer({self.path!r}, model={self._vocab.model!r}, n_vocab={self.n_vocab})"

