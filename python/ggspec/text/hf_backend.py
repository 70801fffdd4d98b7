"""The Hugging Face `tokenizers` model that turns one text fragment into token ids.

Special tokens, BOS/EOS and SentencePiece's space handling are done around it
(tokenizer.py); this model sees only plain text between special tokens:
- "llama" (SentencePiece): a BPE over the merges derived in spm.py, with <0xXX>
  byte fallback, fed text whose spaces are already "▁";
- "gpt2": a byte-level BPE over the GGUF's merges, behind llama.cpp's
  pre-tokenizer regexes for the vocabulary's `tokenizer.ggml.pre`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from ggspec.text import merges_cache
from ggspec.text.pretokenizers import build_pre_tokenizer
from ggspec.text.spm import matchable, phantom_symbols, spm_merges
from ggspec.text.vocab import Vocab


@dataclass
class Backend:
    hf: HFTokenizer
    n_tokens: int
    # A phantom symbol (id >= n_tokens) left unjoined stands for its UTF-8 bytes' tokens.
    phantom_bytes: dict[int, list[int]]

    def encode(self, text: str) -> list[int]:
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
    tokens = vocab.tokens
    hf_vocab = _hf_vocab(vocab)
    pairs = []
    seen = set()
    for m in vocab.merges or ():
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
    spec = vocab.pre_spec
    model = models.BPE(vocab=hf_vocab, merges=pairs, ignore_merges=spec.ignore_merges)
    hf = HFTokenizer(model)
    hf.pre_tokenizer = build_pre_tokenizer(spec)
    return Backend(hf, len(tokens), {})
