"""ggspec.text: tokenization from GGUF metadata, detokenization, streaming; no llama.cpp needed.

Small vocabularies are written to GGUF files here, so each rule (SentencePiece
merges and byte fallback, special-token matching, BOS/EOS, pieces, EOG detection,
errors) is checked against expectations worked out by hand or against a direct
implementation of llama.cpp's SentencePiece algorithm.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter, TokenType

from ggspec import ModelFormatError
from ggspec.text import StreamDecoder, Tokenizer
from ggspec.text import merges_cache
from ggspec.text.gguf_meta import read_metadata
from ggspec.text.pretokenizers import build_pre_tokenizer, pre_tokenizer_spec
from tests.data.tokenizer_corpus import CORPUS
from tests.fixtures.tiny_vocab import BOS_ID, EOS_ID, N_BYTE_TOKENS, SPECIALS

N, U, C, UD, B = (int(TokenType.NORMAL), int(TokenType.UNKNOWN), int(TokenType.CONTROL),
                  int(TokenType.USER_DEFINED), int(TokenType.BYTE))
SP = "\u2581"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    # Merge caches go to a per-test directory, never to the user's ~/.cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def write_vocab(path: Path, model: str, tokens, types, scores=None, merges=None, pre=None, **kv) -> str:
    """A GGUF holding only tokenizer metadata. kv: add_bos, add_eos, add_space_prefix, bos, eos,
    eot, chat_template, name."""
    w = GGUFWriter(str(path), "llama")
    if model is not None:
        w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id), ("eot", w.add_eot_token_id),
                     ("add_bos", w.add_add_bos_token), ("add_eos", w.add_add_eos_token),
                     ("add_space_prefix", w.add_add_space_prefix), ("chat_template", w.add_chat_template),
                     ("name", w.add_name)):
        if key in kv:
            add(kv[key])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


BYTES = [f"<0x{b:02X}>" for b in range(N_BYTE_TOKENS)]
BYTE0 = len(SPECIALS)  # id of <0x00>


def spm_file(tmp_path, pieces: list[tuple[str, float, int]], name="spm.gguf", **kv) -> str:
    """<unk> <s> </s>, the 256 byte tokens, then pieces as (text, score, type)."""
    tokens = list(SPECIALS) + BYTES + [p[0] for p in pieces]
    scores = [0.0] * (len(SPECIALS) + N_BYTE_TOKENS) + [p[1] for p in pieces]
    types = [U, C, C] + [B] * N_BYTE_TOKENS + [p[2] for p in pieces]
    kv.setdefault("bos", BOS_ID)
    kv.setdefault("eos", EOS_ID)
    return write_vocab(tmp_path / name, "llama", tokens, types, scores, **kv)


PIECES = [
    (SP, -1.0, N), ("a", -2.0, N), ("b", -3.0, N), ("c", -4.0, N), ("ab", -5.0, N), ("bc", -6.0, N),
    ("abc", -7.0, N), (SP + "ab", -8.0, N), ("h", -9.0, N), ("i", -10.0, N), (SP + "hi", -11.0, N), ("hi", -12.0, N),
    ("<start_of_turn>", 0.0, C), ("<end_of_turn>", 0.0, C), ("<tool>", 0.0, UD), ("\n", 0.0, UD),
]


@pytest.fixture
def spm(tmp_path) -> Tokenizer:
    return Tokenizer.from_gguf(spm_file(tmp_path, PIECES))


def ids_of(tok: Tokenizer, *texts: str) -> list[int]:
    index = {tok.token_text(i): i for i in range(tok.n_vocab)}
    return [index[t] for t in texts]


# ---- SentencePiece ------------------------------------------------------------------


def test_spm_merges_by_score_and_space_prefix(spm):
    # "abc" -> "▁abc": "ab" (-5) beats "bc" (-6); then "abc" (-7) beats "▁ab" (-8), so "▁" stays alone.
    assert spm.encode("abc", add_special=False) == ids_of(spm, SP, "abc")
    # "▁ab" forms when no "c" follows.
    assert spm.encode("ab", add_special=False) == ids_of(spm, SP + "ab")
    # "▁hi" is reachable only through "hi" (-12), which forms first.
    assert spm.encode("hi hi", add_special=False) == ids_of(spm, SP + "hi", SP + "hi")


def test_spm_byte_fallback(spm):
    # "é" is no piece: its UTF-8 bytes C3 A9 become <0xC3><0xA9>.
    assert spm.encode("é", add_special=False) == ids_of(spm, SP) + [BYTE0 + 0xC3, BYTE0 + 0xA9]
    emoji = spm.encode("\U0001F600", add_special=False)[1:]
    assert emoji == [BYTE0 + b for b in "\U0001F600".encode()]
    assert spm.decode(emoji) == "\U0001F600"


def test_spm_bos_eos(tmp_path, spm):
    assert spm.add_bos and not spm.add_eos
    assert spm.encode("a")[0] == BOS_ID
    assert spm.encode("", add_special=True) == [BOS_ID]
    assert spm.encode("", add_special=False) == []
    both = Tokenizer.from_gguf(spm_file(tmp_path, PIECES, "eos.gguf", add_bos=False, add_eos=True))
    assert both.encode("a") == both.encode("a", add_special=False) + [EOS_ID]


def test_special_tokens_parse_special(spm):
    text = "<start_of_turn>hi<tool>\n<end_of_turn>"
    start, end, tool, nl = ids_of(spm, "<start_of_turn>", "<end_of_turn>", "<tool>", "\n")
    parsed = spm.encode(text, add_special=False, parse_special=True)
    # Text after a special token gets the SentencePiece space prefix again.
    assert parsed == [start, *ids_of(spm, SP + "hi"), tool, nl, end]
    # Without parse_special, control tokens stay text but user-defined ones are still matched.
    plain = spm.encode(text, add_special=False, parse_special=False)
    assert start not in plain and end not in plain
    assert tool in plain and nl in plain
    # SentencePiece puts a space before text at the start and after every special token.
    assert spm.decode(plain) == " <start_of_turn>hi<tool>\n <end_of_turn>"
    # Partial special text is plain text.
    assert start not in spm.encode("<start_of_tur", parse_special=True)


def test_no_space_prefix(tmp_path):
    tok = Tokenizer.from_gguf(spm_file(tmp_path, PIECES, add_space_prefix=False))
    assert tok.encode("ab", add_special=False) == ids_of(tok, "ab")
    assert tok.encode(" ab", add_special=False) == ids_of(tok, SP + "ab")


def reference_spm(text: str, pieces: dict[str, tuple[int, float]]) -> list[int]:
    """llama.cpp's SentencePiece rule, directly: merge the best-scoring adjacent pair
    (leftmost on ties) until none is a token; leftover non-tokens become byte tokens."""
    symbols = list(text)
    while True:
        best = None
        for i in range(len(symbols) - 1):
            hit = pieces.get(symbols[i] + symbols[i + 1])
            if hit is not None and (best is None or hit[1] > best[0]):
                best = (hit[1], i)
        if best is None:
            break
        i = best[1]
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    out = []
    for s in symbols:
        out += [pieces[s][0]] if s in pieces else [BYTE0 + b for b in s.encode()]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_spm_matches_reference_on_random_vocabularies(tmp_path, seed):
    rng = random.Random(seed)
    alphabet = "abcx" + SP
    # "x" is never a token on its own, only inside longer ones (a character llama.cpp can
    # still merge); "é" and "z" are in no token at all (byte fallback).
    texts_alphabet = "abcx éz"
    words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(2, 5))) for _ in range(60)}
    singles = ["a", "b", "c", SP]
    scores = rng.sample(range(-5000, 0), len(words) + len(singles))  # unique, as in real vocabularies
    pieces = [(t, float(s), N) for t, s in zip(singles + sorted(words), scores)]
    path = spm_file(tmp_path, pieces, add_space_prefix=bool(seed % 2))
    tok = Tokenizer.from_gguf(path)
    table = {tok.token_text(i): (i, float(np.float32(s))) for i, (t, s, _) in enumerate(pieces, BYTE0 + 256)}
    for _ in range(300):
        text = "".join(rng.choice(texts_alphabet) for _ in range(rng.randint(1, 25)))
        spm_text = (" " + text if seed % 2 else text).replace(" ", SP)
        assert tok.encode(text, add_special=False) == reference_spm(spm_text, table), text


# ---- byte-level BPE ------------------------------------------------------------------


def gpt2_alphabet() -> list[str]:
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    moved = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(moved)}
    return [table[b] for b in range(256)]


@pytest.fixture
def bpe(tmp_path) -> Tokenizer:
    # 0..2 control, then the 256 byte characters, then merged tokens.
    merged = ["he", "ll", "hell", "hello", "Ġw", "Ġwor", "or", "12"]
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "1 2"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + gpt2_alphabet() + merged
    types = [C, C, C] + [N] * (256 + len(merged))
    path = write_vocab(tmp_path / "bpe.gguf", "gpt2", tokens, types, merges=merges, pre="smollm", bos=1, eos=2,
                       add_bos=False)
    return Tokenizer.from_gguf(path)


def test_bpe_merges_and_pretokenizer(bpe):
    assert bpe.encode("hello") == ids_of(bpe, "hello")
    assert bpe.encode("hello wor") == ids_of(bpe, "hello", "Ġwor")
    # smollm splits every digit apart first, so the "1 2" merge never applies.
    assert bpe.encode("12") == ids_of(bpe, "1", "2")
    assert bpe.encode("<|im_start|>hello<|im_end|>", parse_special=True) == [1, *ids_of(bpe, "hello"), 2]
    assert 1 not in bpe.encode("<|im_start|>", parse_special=False)


@pytest.mark.parametrize("pre,spans", [
    ("smollm", [(0, 1), (1, 2), (2, 3), (3, 5), (5, 7)]),
    ("default", [(0, 1), (1, 2), (2, 3), (3, 5), (5, 6), (6, 7)]),
    ("llama-bpe", [(0, 1), (1, 3), (3, 5), (5, 7)]),
])
def test_unicode_16_characters_split_as_unassigned(pre, spans):
    # U+1C89 (a letter) and U+1B4E (punctuation) are new in Unicode 16.0, which llama.cpp's
    # tables predate: to llama.cpp they are neither letter nor punctuation.
    pre_tokenizer = build_pre_tokenizer(pre_tokenizer_spec(pre))
    assert [span for _, span in pre_tokenizer.pre_tokenize_str("a\u1c89b x\u1b4e!")] == spans


def test_bpe_pieces_and_round_trip(bpe):
    text = "Hello wörld 😀 \t\r\n 123"
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text
    assert bpe.token_to_piece(ids_of(bpe, "Ġw")[0]) == b" w"
    assert bpe.token_to_piece(0) == b"" and bpe.token_to_piece(0, special=True) == b"<|endoftext|>"
    # <|endoftext|> and <|im_end|> end generation (llama.cpp's text rules), <|im_start|> does not.
    assert bpe.eog_ids == {0, 2}


def test_stream_decoder_holds_back_split_character_bpe(bpe):
    text = "é😀!"
    ids = bpe.encode(text)
    assert len(ids) == len(text.encode())  # one byte per token: every character is split
    stream = StreamDecoder(bpe)
    outputs = [stream.push(i) for i in ids]
    assert outputs == ["", "é", "", "", "", "😀", "!"]
    assert stream.flush() == ""


# ---- pieces, decode, streaming --------------------------------------------------------


def test_token_to_piece(spm):
    start, tool, sp, ab = ids_of(spm, "<start_of_turn>", "<tool>", SP, SP + "ab")
    assert spm.token_to_piece(start) == b""
    assert spm.token_to_piece(start, special=True) == b"<start_of_turn>"
    assert spm.token_to_piece(tool) == b"<tool>"  # user-defined: always rendered
    assert spm.token_to_piece(sp) == b" " and spm.token_to_piece(ab) == b" ab"
    assert spm.token_to_piece(BYTE0 + 0x41) == b"A"
    assert spm.token_to_piece(BOS_ID) == b"" and spm.token_text(BOS_ID) == "<s>"
    assert spm.token_to_piece(np.int64(BYTE0 + 0x41)) == b"A"
    for bad in (-1, spm.n_vocab, 1.0, "3"):
        with pytest.raises(ValueError):
            spm.token_to_piece(bad)


def test_decode(spm):
    ids = spm.encode("<start_of_turn>ab é", parse_special=True)
    assert spm.decode(ids) == " ab é"
    assert spm.decode(ids, special=True) == "<s><start_of_turn> ab é"
    assert spm.decode([BYTE0 + 0xF0, BYTE0 + 0x9F]) == "\ufffd"  # cut-off character


def test_stream_decoder_holds_back_split_emoji(spm):
    ids = spm.encode("a\U0001F600b", add_special=False)
    emoji = [BYTE0 + b for b in "\U0001F600".encode()]  # <0xF0><0x9F><0x98><0x80>
    assert ids == ids_of(spm, SP, "a") + emoji + ids_of(spm, "b")
    stream = StreamDecoder(spm)
    assert [stream.push(i) for i in ids] == [" ", "a", "", "", "", "\U0001F600", "b"]
    assert stream.flush() == ""


def test_stream_decoder_flush_and_invalid_bytes(spm):
    stream = StreamDecoder(spm)
    assert stream.push(BYTE0 + 0xE2) == ""
    assert stream.push(BYTE0 + 0x82) == ""
    assert stream.flush() == "\ufffd"  # an incomplete sequence left at the end
    assert stream.push(BYTE0 + 0x80) == "\ufffd"  # a lone continuation byte cannot complete
    assert stream.push(BYTE0 + 0xC3) + stream.push(ids_of(spm, "a")[0]) == "\ufffda"
    special = StreamDecoder(spm, special=True)
    assert special.push(BOS_ID) == "<s>"


def test_round_trip_tiny_model(tiny_model):
    tok = Tokenizer.from_gguf(tiny_model("llama"))
    assert tok.n_vocab == 320 and tok.bos_id == BOS_ID and tok.eos_id == EOS_ID
    for text in CORPUS:
        ids = tok.encode(text, add_special=False)
        # Every character is a piece or bytes; SentencePiece adds one leading space, and
        # a "▁" in the text is a space to it.
        assert tok.decode(ids) == (" " + text if text else "").replace(SP, " "), repr(text)


# ---- vocabulary rules ---------------------------------------------------------------


def test_eog_detection_by_text(tmp_path):
    pieces = [("<|im_end|>", 0.0, N), ("<end_of_turn>", 0.0, C), ("<|fim_pad|>", 0.0, C), ("<|im_start|>", 0.0, C),
              ("<unused3>", 0.0, C)]
    tok = Tokenizer.from_gguf(spm_file(tmp_path, pieces))
    im_end, eot, fim_pad, im_start = ids_of(tok, "<|im_end|>", "<end_of_turn>", "<|fim_pad|>", "<|im_start|>")
    assert tok.eog_ids == {EOS_ID, im_end, eot, fim_pad}
    # A normal-typed "<|im_end|>" is treated as control, as llama.cpp does.
    assert tok.token_to_piece(im_end) == b""
    assert im_end not in tok.encode("<|im_end|>", parse_special=False)
    assert tok.encode("<|im_end|>", add_special=False, parse_special=True) == [im_end]
    assert im_start not in tok.eog_ids


def test_harmony_end_is_not_eog(tmp_path):
    pieces = [("<|end|>", 0.0, C), ("<|return|>", 0.0, C), ("<|call|>", 0.0, C), ("<|channel|>", 0.0, C)]
    tok = Tokenizer.from_gguf(spm_file(tmp_path, pieces))
    end, ret, call, channel = ids_of(tok, "<|end|>", "<|return|>", "<|call|>", "<|channel|>")
    assert tok.eog_ids == {EOS_ID, ret, call}
    # "<|end|>" and "<|channel|>" become user-defined: rendered, and matched without parse_special.
    assert tok.token_to_piece(end) == b"<|end|>" and tok.token_to_piece(channel) == b"<|channel|>"
    assert tok.encode("<|channel|>", add_special=False) == [channel]


def test_chat_template_and_token_text(tmp_path):
    tok = Tokenizer.from_gguf(spm_file(tmp_path, PIECES, chat_template="{{ bos_token }}"))
    assert tok.chat_template == "{{ bos_token }}"
    assert tok.token_text(tok.bos_id) == "<s>"
    assert Tokenizer.from_gguf(spm_file(tmp_path, PIECES, "plain.gguf")).chat_template is None


def test_merges_cache(tmp_path, monkeypatch):
    from ggspec.text import hf_backend

    path = spm_file(tmp_path, PIECES)
    first = Tokenizer.from_gguf(path)
    entries = list(merges_cache.cache_dir().glob("spm-*.npz"))
    assert len(entries) == 1
    # The second load reads the merges instead of deriving them.
    derive = hf_backend.spm_merges
    monkeypatch.setattr(hf_backend, "spm_merges", lambda *a: pytest.fail("merges derived again"))
    assert Tokenizer.from_gguf(path).encode("abc hi") == first.encode("abc hi")
    # A damaged entry is ignored, and replaced.
    entries[0].write_bytes(b"garbage")
    monkeypatch.setattr(hf_backend, "spm_merges", derive)
    assert Tokenizer.from_gguf(path).encode("abc hi") == first.encode("abc hi")
    assert merges_cache.load(entries[0].stem[4:], first.n_vocab) is not None


def test_metadata_reader_matches_gguf_reader(tiny_model):
    path = tiny_model("llama")
    ours = read_metadata(path)
    reader = GGUFReader(path)
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        theirs = field.contents()
        mine = ours[name]
        if isinstance(mine, np.ndarray):
            mine = mine.tolist()
        assert mine == pytest.approx(theirs) if isinstance(theirs, float) else mine == theirs, name
    assert set(ours) == {n for n in reader.fields if not n.startswith("GGUF.")}


# ---- errors --------------------------------------------------------------------------


def test_unsupported_tokenizer_model(tmp_path):
    path = write_vocab(tmp_path / "bert.gguf", "bert", ["[PAD]", "a"], [C, N])
    with pytest.raises(ModelFormatError, match=r"bert\.gguf.*'bert'.*not supported"):
        Tokenizer.from_gguf(path)


def test_missing_tokenizer(tmp_path):
    path = write_vocab(tmp_path / "none.gguf", None, ["a"], [N])
    with pytest.raises(ModelFormatError, match=r"none\.gguf.*tokenizer\.ggml\.model is missing"):
        Tokenizer.from_gguf(path)


def test_unsupported_pre_tokenizer_and_missing_merges(tmp_path):
    tokens, types = gpt2_alphabet(), [N] * 256
    path = write_vocab(tmp_path / "pre.gguf", "gpt2", tokens, types, merges=["a b"], pre="no-such-pre")
    with pytest.raises(ModelFormatError, match="pre-tokenizer type 'no-such-pre'"):
        Tokenizer.from_gguf(path)
    path = write_vocab(tmp_path / "nomerges.gguf", "gpt2", tokens, types, pre="smollm")
    with pytest.raises(ModelFormatError, match="merges"):
        Tokenizer.from_gguf(path)


def test_spm_without_byte_tokens(tmp_path):
    path = write_vocab(tmp_path / "nobytes.gguf", "llama", ["<unk>", "<s>", "</s>", "a"], [U, C, C, N], [0.0] * 4)
    with pytest.raises(ModelFormatError, match="byte tokens"):
        Tokenizer.from_gguf(path)


@pytest.mark.parametrize(
    "content", [b"", b"GGUF", b"not a gguf file at all, just text", b"GGUF\x03\x00\x00\x00" + b"\xff" * 20]
)
def test_not_gguf_or_truncated(tmp_path, content):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelFormatError, match="bad.gguf"):
        Tokenizer.from_gguf(path)


def test_truncated_vocabulary(tmp_path):
    data = Path(spm_file(tmp_path, PIECES)).read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match="truncated"):
        Tokenizer.from_gguf(path)
    with pytest.raises(ModelFormatError, match="cannot read"):
        Tokenizer.from_gguf(tmp_path / "missing.gguf")


def test_text_with_lone_surrogate(spm):
    # Python strings can hold lone surrogates (e.g. from surrogateescape); they become U+FFFD.
    assert spm.encode("a\udcff", add_special=False) == spm.encode("a\ufffd", add_special=False)
    with pytest.raises(TypeError):
        spm.encode(b"bytes")
