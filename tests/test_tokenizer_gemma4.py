"""Gemma 4's tokenizer ("gemma4": BPE over UTF-8 with "▁" spaces and <0xXX> bytes) as llama.cpp runs it.

Tiny gemma4 models carry the vocabulary of tests/fixtures/tiny_gemma4_vocab.py: one
with all 256 byte tokens and add_bos_token false in the file (llama.cpp adds BOS
anyway), one lacking two byte tokens (llama.cpp drops those bytes) and the key.
The tests marked `peer` compare with llama.cpp and fail (never skip) without its build.
"""

from __future__ import annotations

import pytest

import ggspec
from bench.peer.peer import peer_tokenize
from ggspec import ModelFormatError
from ggspec.text import StreamDecoder, Tokenizer
from tests.data.tokenizer_corpus import CORPUS
from tests.fixtures.tiny_gemma4 import write_tiny_gemma4
from tests.fixtures.tiny_gemma4_vocab import BOS_ID, SPACE, gemma4_tokenizer_metadata, write_gemma4_tokenizer_model
from tests.test_peer_tokenize import assert_vocabulary_matches_llama_cpp, check_corpus

MODES = [(True, True), (True, False), (False, False)]  # (add_special, parse_special)
DROPPED_BYTES = (0xE6, 0x82)  # the first byte of "日", the last of "€"

TRICKY = [
    "", " ", "  ", "   ", "    ", " hello", "hello ", " hello  world ", "hello world", "hello\tworld",
    "\n", "\n\n", "\n\n\n", "\n\n\n\n", "\n\n\n\n\n", "\n\n\n\n\n\n\n\n", "a\n\n\nb", "\n \n", " \n\n ", "\r\n\r\n",
    "hello\n\nworld\n", "日本", "日本 €", "é é", " é", "😀", "naïve café", f"{SPACE}hello{SPACE}", "<0x41>",
    "<|turn>hello<turn|>", "<bos>hi<eos>", "<|image|> x", "x<|image|>\n\n", "<turn|>\n\n\n\n<|turn>", "<unk>",
    "<pad><pad>", "<|turn", "test test\ntest",
]


@pytest.fixture(scope="module")
def gemma4_path(tmp_path_factory) -> str:
    return str(write_gemma4_tokenizer_model(tmp_path_factory.mktemp("gemma4") / "full.gguf", add_bos=False))


@pytest.fixture(scope="module")
def dropped_bytes_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("gemma4") / "dropped.gguf"
    return str(write_gemma4_tokenizer_model(path, drop_bytes=DROPPED_BYTES, add_bos=None))


@pytest.fixture(scope="module", params=["full", "dropped_bytes"])
def model(request, gemma4_path, dropped_bytes_path) -> tuple[str, Tokenizer]:
    path = gemma4_path if request.param == "full" else dropped_bytes_path
    return path, Tokenizer.from_gguf(path)


def ids_of(tok: Tokenizer, *texts: str) -> list[int]:
    by_text = {tok.token_text(i): i for i in range(tok.n_vocab)}
    return [by_text[t] for t in texts]


def test_rules_by_hand(gemma4_path):
    tok = Tokenizer.from_gguf(gemma4_path)
    assert tok.add_bos and tok.bos_id == BOS_ID  # forced on although the file says false
    assert tok.encode("") == [BOS_ID]
    # No space prefix; spaces are "▁" and merge like any piece.
    assert tok.encode(" hello world  ", add_special=False) == ids_of(tok, "▁hello", "▁world", "▁▁")
    # A run of newlines that is a token is taken whole, though no merge reaches it...
    assert tok.encode("\n\n\n\n", add_special=False) == ids_of(tok, "\n\n\n\n")
    # ...and one that is not goes through the merges.
    assert tok.encode("\n\n\n", add_special=False) == ids_of(tok, "\n\n", "\n")
    # A character outside the vocabulary falls back to its UTF-8 bytes.
    assert tok.encode("日", add_special=False) == ids_of(tok, "<0xE6>", "<0x97>", "<0xA5>")


def test_missing_byte_tokens_are_dropped(dropped_bytes_path):
    tok = Tokenizer.from_gguf(dropped_bytes_path)
    assert tok.add_bos  # no add_bos_token key: llama.cpp adds BOS for Gemma 4
    # "日" is E6 97 A5 and "€" E2 82 AC: llama.cpp drops the bytes without a token.
    assert tok.encode("日€", add_special=False) == ids_of(tok, "<0x97>", "<0xA5>", "<0xE2>", "<0xAC>")


def test_round_trip(gemma4_path):
    tok = Tokenizer.from_gguf(gemma4_path)
    for parse_special in (False, True):
        for text in TRICKY + CORPUS:
            ids = tok.encode(text, add_special=False, parse_special=parse_special)
            # A "▁" in the text is a space to this vocabulary, as to SentencePiece.
            expected = text.replace(SPACE, " ")
            assert tok.decode(ids, special=True) == expected, repr(text)
            stream = StreamDecoder(tok, special=True)
            assert "".join([stream.push(i) for i in ids] + [stream.flush()]) == expected, repr(text)


def test_model_api(gemma4_path):
    model = ggspec.Model(gemma4_path)
    ids = model.encode_prompt("<|turn>hello world\n\n\n\n")
    assert ids == [BOS_ID] + ids_of(model.tokenizer, "<|turn>", "hello", "▁world", "\n\n\n\n")
    assert model.tokenizer.decode(ids) == "hello world\n\n\n\n"
    assert model.tokenizer.decode(ids, special=True) == "<bos><|turn>hello world\n\n\n\n"


def test_missing_merges_refused(tmp_path):
    meta = gemma4_tokenizer_metadata() | {"tokenizer.ggml.merges": None}
    path = write_tiny_gemma4(tmp_path / "nomerges.gguf", n_vocab=len(meta["tokenizer.ggml.tokens"]), metadata=meta)
    with pytest.raises(ModelFormatError, match="merges"):
        Tokenizer.from_gguf(path)


@pytest.mark.peer
@pytest.mark.parametrize("add_special,parse_special", MODES)
def test_ids_match_llama_cpp(model, add_special, parse_special):
    check_corpus(*model, add_special, parse_special, texts=TRICKY + CORPUS)


@pytest.mark.peer
def test_model_api_matches_llama_cpp(gemma4_path):
    # peer_tokenize's defaults (add_special, parse_special) are encode_prompt's.
    text = "<|turn>user\n hello  world\n\n\n\n日本<turn|>\n"
    assert ggspec.Model(gemma4_path).encode_prompt(text) == peer_tokenize(gemma4_path, text)


@pytest.mark.peer
def test_vocabulary_matches_llama_cpp(model):
    assert_vocabulary_matches_llama_cpp(*model)
