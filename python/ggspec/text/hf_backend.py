"""The Hugging Face `tokenizers` model that turns one text fragment into token ids.

Special tokens, BOS/EOS and SentencePiece's space handling are done around it
(tokenizer.py); this model sees only plain text between special tokens:
- "llama" (SentencePiece): a BPE over the merges derived in spm.py, with <0xXX>
  byte fallback, fed text whose spaces are already "▁";
- "gpt2": a byte-level BPE over the GGUF's merges, behind llama.cpp's
  pre-tokenizer regexes for the vocabulary's `tokenizer.ggml.pre`;
- "gemma4": a BPE over the GGUF's merges on raw UTF-8 whose spaces are already
  "▁", split at newlines, with <0xXX> byte fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from ggspec.text import merges_cache
from ggspec.text.pretokenizers import build_pre_tokenizer
from ggspec.text.spm import matchable, phantom_symbols, spm_merges
from ggspec.text.vocab import Vocab

_NEWLINE_RUN = re.compile("\n+")


@dataclass
class Backend:
    hf: HFTokenizer
    n_tokens: int
    # A phantom id (>= n_tokens) left unjoined stands for these tokens: an SPM phantom
    # symbol for its UTF-8 bytes' tokens, a byte token the vocabulary lacks for none.
    phantom_bytes: dict[int, list[int]]
    # Runs of newlines that are tokens and so are taken whole, never merged (Gemma 4).
    newline_tokens: dict[str, int] = field(default_factory=dict)

    def encode(self, text: str) -> list[int]:
        if not self.newline_tokens or "\n" not in text:
            return self._encode(text)
        out: list[int] = []
        start = 0
        for run in _NEWLINE_RUN.finditer(text):
            token = self.newline_tokens.get(run.group())
            if token is not None:
                out += self._encode(text[start : run.start()])
                out.append(token)
                start = run.end()
        return out + self._encode(text[start:])

    def _encode(self, text: str) -> list[int]:
        ids = self.hf.encode(text, add_special_tokens=False).ids
        if self.phantom_bytes and any(i >= self.n_tokens for i in ids):
            ids = [b for i in ids for b in (self.phantom_bytes[i] if i >= self.n_tokens else (i,))]
        return ids


def build_backend(vocab: Vocab) -> Backend:
    if vocab.model == "llama":
        return _spm_backend(vocab)
    return _bpe_backend(vocab)


def _spm_backend(vocab: Vocab) -> Backend:
    tokens, n = vocab.tokens, vocab.n_vocab
    key = merges_cache.vocab_key(tokens, vocab.scores)
    cached = merges_cache.load(key, n)
    if cached is None:
        phantoms = phantom_symbols(tokens)
        merges = spm_merges(tokens, vocab.scores, phantoms)
        merges_cache.store(key, phantoms, merges)
    else:
        phantoms, merges = cached
    symbols = tokens + phantoms
    hf_vocab = _hf_vocab(vocab)
    hf_vocab.update((c, n + j) for j, c in enumerate(phantoms))
    text_of = symbols.__getitem__
    pairs = list(zip(map(text_of, merges[:, 0].tolist()), map(text_of, merges[:, 1].tolist())))
    model = models.BPE(vocab=hf_vocab, merges=pairs, byte_fallback=True, fuse_unk=False)
    # vocab.py made sure all 256 <0xXX> tokens exist.
    phantom_bytes = {n + j: [hf_vocab[f"<0x{b:02X}>"] for b in c.encode("utf-8")] for j, c in enumerate(phantoms)}
    return Backend(HFTokenizer(model), n, phantom_bytes)


def _hf_vocab(vocab: Vocab) -> dict[str, int]:
    # Rust strings must be valid UTF-8: leave out tokens that are not (they never match text).
    if matchable("".join(vocab.tokens)):
        return dict(vocab.token_id)
    return {t: i for t, i in vocab.token_id.items() if matchable(t)}


def _bpe_backend(vocab: Vocab) -> Backend:
    n = vocab.n_vocab
    hf_vocab = _hf_vocab(vocab)
    pairs = _merge_pairs(vocab.merges or (), hf_vocab)
    spec = vocab.pre_spec
    byte_fallback = not spec.byte_level
    phantom_bytes = _missing_byte_tokens(hf_vocab, n) if byte_fallback else {}
    model = models.BPE(vocab=hf_vocab, merges=pairs, ignore_merges=spec.ignore_merges, byte_fallback=byte_fallback,
                       fuse_unk=False)
    hf = HFTokenizer(model)
    hf.pre_tokenizer = build_pre_tokenizer(spec)
    newline_tokens = {}
    if spec.whole_newline_runs:
        newline_tokens = {t: i for t, i in vocab.token_id.items() if t and not t.strip("\n")}
    return Backend(hf, n, phantom_bytes, newline_tokens)


def _missing_byte_tokens(hf_vocab: dict[str, int], n: int) -> dict[int, list[int]]:
    """Gives each absent <0xXX> a phantom id that stands for no tokens.

    llama.cpp falls back byte by byte and drops each byte it has no token for, where
    `tokenizers` would drop the whole character: these ids expand to nothing instead.
    """
    missing = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in hf_vocab]
    hf_vocab.update((text, n + j) for j, text in enumerate(missing))
    return {n + j: [] for j in range(len(missing))}


def _merge_pairs(merges, hf_vocab: dict[str, int]) -> list[tuple[str, str]]:
    pairs = []
    seen = set()
    for m in merges:
        # llama.cpp splits at the first space after the first character.
        cut = m.find(" ", 1)
        if cut < 0:
            continue
        pair = (m[:cut], m[cut + 1 :])
        # A merge whose parts or result is no token can never yield a token; the
        # first of duplicate merges holds the rank, as in llama.cpp's bpe_ranks.
        if pair in seen or pair[0] not in hf_vocab or pair[1] not in hf_vocab or pair[0] + pair[1] not in hf_vocab:
            continue
        seen.add(pair)
        pairs.append(pair)
    return pairs
