"""ggspec's tokenizer gives llama.cpp's token ids, pieces and special-token sets on the real models.

Marked `peer`: these fail (never skip) when the peer build is missing; the
README's test command builds it first. One peer process per (model, mode) runs
the whole corpus (tests/data/tokenizer_corpus.py). Gemma 3 covers SentencePiece,
SmolLM2 byte-level BPE; SmolLM2's vocabulary rewritten under other
`tokenizer.ggml.pre` values covers the other pre-tokenizers.
"""

from __future__ import annotations

import pytest

from bench.peer.peer import peer_tokenize_many, peer_vocab_info
from ggspec.text import StreamDecoder, Tokenizer
from ggspec.text.gguf_meta import read_metadata
from tests.data.tokenizer_corpus import CORPUS
from tests.fixtures.tiny_models import write_tiny_model

pytestmark = pytest.mark.peer

MODES = [(True, True), (True, False), (False, False)]  # (add_special, parse_special)


@pytest.fixture(scope="module", params=["gemma3", "smollm2"])
def model(request) -> tuple[str, Tokenizer]:
    path = request.getfixturevalue(f"{request.param}_path")
    return path, Tokenizer.from_gguf(path)


def check_corpus(path: str, tok: Tokenizer, add_special: bool, parse_special: bool,
                 texts: list[str] = CORPUS) -> None:
    theirs = peer_tokenize_many(path, texts, add_special=add_special, parse_special=parse_special)
    ours = [tok.encode(text, add_special=add_special, parse_special=parse_special) for text in texts]
    mismatches = [(text, o, t) for text, o, t in zip(texts, ours, theirs) if o != t]
    assert not mismatches, (
        f"{len(mismatches)}/{len(texts)} strings differ from llama.cpp; first: "
        + "; ".join(f"{text!r}: ours {o[:16]} llama.cpp {t[:16]}" for text, o, t in mismatches[:3])
    )


@pytest.mark.parametrize("add_special,parse_special", MODES)
def test_corpus_ids_match_llama_cpp(model, add_special, parse_special):
    check_corpus(*model, add_special, parse_special)


def smollm2_with_pre(tmp_path_factory, smollm2_path: str, pre: str) -> str:
    """SmolLM2's byte-level vocabulary under another pre-tokenizer type, in a tiny model.

    llama.cpp loads only the vocabulary (vocab_only), so the random weights do not matter.
    """
    meta = read_metadata(smollm2_path)
    vocab = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": meta["tokenizer.ggml.tokens"],
        "tokenizer.ggml.token_type": meta["tokenizer.ggml.token_type"].tolist(),
        "tokenizer.ggml.merges": meta["tokenizer.ggml.merges"],
        "tokenizer.ggml.scores": None,
        "tokenizer.ggml.unknown_token_id": None,
    }
    n_vocab = len(vocab["tokenizer.ggml.tokens"])
    path = tmp_path_factory.mktemp("pre") / f"{pre}.gguf"
    return str(write_tiny_model(path, "llama", n_vocab=n_vocab, n_layer=1, metadata=vocab))


@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2", "gpt-2", "starcoder"])
def test_pre_tokenizer_types_match_llama_cpp(tmp_path_factory, smollm2_path, pre):
    # Each type's regexes and flags (ignore_merges, add_bos) are what differs.
    path = smollm2_with_pre(tmp_path_factory, smollm2_path, pre)
    tok = Tokenizer.from_gguf(path)
    assert tok.add_bos == (pre == "llama-bpe")
    for add_special, parse_special in MODES[:2]:
        check_corpus(path, tok, add_special, parse_special)


def codepoint_sweep() -> list[str]:
    """Every code point from U+0020 to U+2FFFF (no surrogates), 12 to a string, next to
    letters, spaces and digits: any character whose class differs between llama.cpp's
    Unicode tables and the regex engine's shows up as a different split."""
    cps = [c for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF]
    out = []
    for i in range(0, len(cps), 12):
        chunk = [chr(c) for c in cps[i : i + 12]]
        out.append("".join(c + "a 1"[j % 3] for j, c in enumerate(chunk)))
        out.append(" ".join(chunk))
    return out


@pytest.mark.parametrize("which", ["gemma3", "smollm2", "smollm2-default-pre"])
def test_codepoint_sweep_matches_llama_cpp(request, tmp_path_factory, which):
    if which == "smollm2-default-pre":
        # "default" is the type whose regexes use \p{P}, besides \p{L} and \p{N}.
        path = smollm2_with_pre(tmp_path_factory, request.getfixturevalue("smollm2_path"), "default")
    else:
        path = request.getfixturevalue(f"{which}_path")
    texts = codepoint_sweep()
    tok = Tokenizer.from_gguf(path)
    theirs = peer_tokenize_many(path, texts, add_special=False, parse_special=False)
    bad = [t for t, ids in zip(texts, theirs) if tok.encode(t, add_special=False) != ids]
    assert not bad, f"{len(bad)}/{len(texts)} differ, e.g. {[hex(ord(c)) for c in bad[0]]}"


def test_vocabulary_matches_llama_cpp(model):
    assert_vocabulary_matches_llama_cpp(*model)


def assert_vocabulary_matches_llama_cpp(path, tok) -> None:
    """The specials, BOS/EOS flags, end-of-generation ids and every token's piece."""
    info = peer_vocab_info(path)
    assert tok.n_vocab == info["n_vocab"]
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.add_eos) == (
        info["bos"], info["eos"], info["add_bos"], info["add_eos"])
    assert tok.eog_ids == set(info["eog_ids"])
    for key, special in (("pieces", False), ("special_pieces", True)):
        bad = [i for i in range(tok.n_vocab) if tok.token_to_piece(i, special).hex() != info[key][i]]
        assert not bad, f"{len(bad)} {key} differ, e.g. token {bad[0]} {tok.token_text(bad[0])!r}"


@pytest.mark.parametrize("parse_special", [False, True])
def test_decode_and_stream_round_trip(model, parse_special):
    path, tok = model
    for text in CORPUS:
        ids = tok.encode(text, add_special=False, parse_special=parse_special)
        # Neither model adds a space prefix; to SentencePiece (Gemma) a "▁" in text is a space.
        expected = text.replace("\u2581", " ") if "gemma" in path else text
        assert tok.decode(ids, special=True) == expected, repr(text)
        stream = StreamDecoder(tok, special=True)
        pieces = [stream.push(i) for i in ids] + [stream.flush()]
        assert "".join(pieces) == expected, repr(text)
        # Held-back bytes never surface as a replacement character.
        assert sum(p.count("\ufffd") for p in pieces) == expected.count("\ufffd"), repr(text)
