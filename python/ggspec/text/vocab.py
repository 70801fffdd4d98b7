"""The tokenizer part of a GGUF's metadata, with llama.cpp's defaults applied.

Which defaults apply when a key is missing follows llama.cpp's
llama_vocab::impl::load (src/llama-vocab.cpp): SentencePiece ("llama") vocabularies
default to BOS=1, EOS=2, UNK=0, add_bos and a space prefix; byte-level BPE ("gpt2")
ones to BOS=EOS=11, no BOS unless the pre-tokenizer type asks for it. Gemma 4
("gemma4") is a BPE over raw UTF-8 with SentencePiece's "▁" spaces and <0xXX> byte
tokens: no default special ids, and BOS always added.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ggspec.errors import ModelFormatError
from ggspec.text.gguf_meta import read_metadata
from ggspec.text.pretokenizers import GEMMA4, PreTokenizerSpec, pre_tokenizer_spec
from ggspec.text.specials import SpecialTokens, resolve_special_tokens

SUPPORTED_MODELS = ("llama", "gpt2", "gemma4")

TYPE_NORMAL = 1  # gguf.TokenType.NORMAL: every token's type when the GGUF gives none

_K = "tokenizer.ggml."


@dataclass
class Vocab:
    path: str
    model: str  # "llama" (SentencePiece), "gpt2" (byte-level BPE) or "gemma4" (BPE over "▁"-spaced UTF-8)
    pre: str
    tokens: list[str]
    token_id: dict[str, int] = field(repr=False)
    scores: np.ndarray  # float32, one per token (zeros when the GGUF has none)
    types: np.ndarray  # int32 token types (NORMAL when the GGUF has none)
    merges: list[str] | None
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    escape_whitespaces: bool  # spaces become "▁" before the model sees the text
    chat_template: str | None
    pre_spec: PreTokenizerSpec | None  # BPE ("gpt2", "gemma4") only
    specials: SpecialTokens = field(repr=False)

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def load_vocab(path: str | os.PathLike) -> Vocab:
    """Reads and checks the tokenizer metadata; raises ModelFormatError naming the file and the problem."""
    path = os.fspath(path)
    meta = read_metadata(path)
    return vocab_from_metadata(meta, path)


def vocab_from_metadata(meta: dict[str, Any], path: str) -> Vocab:
    def fail(problem: str) -> ModelFormatError:
        return ModelFormatError(f"{path}: {problem}")

    model = meta.get(_K + "model")
    if model is None:
        raise fail("no tokenizer in the GGUF (tokenizer.ggml.model is missing)")
    if not isinstance(model, str) or model not in SUPPORTED_MODELS:
        raise fail(f"tokenizer model {model!r} is not supported (supported: {', '.join(SUPPORTED_MODELS)})")
    pre = _string(meta, _K + "pre", fail)

    tokens = meta.get(_K + "tokens")
    # GGUF arrays are homogeneous: the first item's type is every item's.
    if not isinstance(tokens, list) or not tokens or not isinstance(tokens[0], str):
        raise fail("tokenizer.ggml.tokens is missing or is not a list of strings")
    if "" in tokens:
        # llama.cpp renames empty tokens so that every token has a distinct text.
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    token_id = {t: i for i, t in enumerate(tokens)}
    if len(token_id) != len(tokens):
        raise fail("tokenizer.ggml.tokens has duplicate entries (llama.cpp refuses such a vocabulary too)")
    n = len(tokens)

    scores = _numeric_array(meta, _K + "scores", n, np.float32, fail)
    types = _numeric_array(meta, _K + "token_type", n, np.int32, fail)
    if scores is None:
        scores = np.zeros(n, np.float32)
    if types is None:
        types = np.full(n, TYPE_NORMAL, np.int32)

    merges = None
    pre_spec = None
    if model in ("gpt2", "gemma4"):
        merges = meta.get(_K + "merges")
        if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
            raise fail("BPE tokenizer without tokenizer.ggml.merges")
    if model == "gpt2":
        pre_spec = pre_tokenizer_spec(pre)
        if pre_spec is None:
            raise fail(f"pre-tokenizer type {pre!r} (tokenizer.ggml.pre) is not supported")
        bos, eos, unk = 11, 11, None
        add_bos, add_space_prefix = pre_spec.add_bos, False
    elif model == "gemma4":
        # llama.cpp ignores the GGUF's tokenizer.ggml.pre for this model.
        pre, pre_spec = "gemma4", GEMMA4
        bos = eos = unk = None
        add_bos, add_space_prefix = pre_spec.add_bos, False
    else:
        _require_byte_tokens(token_id, fail)
        bos, eos, unk = 1, 2, 0
        add_bos, add_space_prefix = True, True

    add_bos = _bool(meta, _K + "add_bos_token", add_bos, fail)
    add_eos = _bool(meta, _K + "add_eos_token", False, fail)
    add_space_prefix = _bool(meta, _K + "add_space_prefix", add_space_prefix, fail)
    if model == "gemma4":
        # llama.cpp forces add_bos on for Gemma 4 whatever the GGUF says (its PR #21500).
        add_bos = True

    ids = {
        name: _token_id(meta, _K + key, default, n, fail)
        for name, key, default in [
            ("bos", "bos_token_id", bos),
            ("eos", "eos_token_id", eos),
            ("unk", "unknown_token_id", unk),
            ("pad", "padding_token_id", None),
            ("eot", "eot_token_id", None),
            ("eom", "eom_token_id", None),
            *((f"fim_{k}", f"fim_{k}_token_id", None) for k in ("pre", "suf", "mid", "pad", "rep", "sep")),
        ]
    }
    # The deprecated prefix/suffix/middle keys, when present, win (llama.cpp reads them last).
    for kind, old in (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle")):
        ids[f"fim_{kind}"] = _token_id(meta, _K + f"{old}_token_id", ids[f"fim_{kind}"], n, fail)
    if add_bos and ids["bos"] is None:
        raise fail("the tokenizer adds a BOS token but has no valid BOS id")
    if add_eos and ids["eos"] is None:
        raise fail("the tokenizer adds an EOS token but has no valid EOS id")

    template = meta.get("tokenizer.chat_template")
    specials = resolve_special_tokens(
        tokens,
        token_id,
        types,
        eos_id=ids["eos"],
        eot_id=ids["eot"],
        eom_id=ids["eom"],
        fim_ids={k: ids[f"fim_{k}"] for k in ("pre", "suf", "mid", "pad", "rep", "sep")},
        model_name=_string(meta, "general.name", fail),
        architecture=_string(meta, "general.architecture", fail),
        pre=pre,
    )
    return Vocab(
        path=path,
        model=model,
        pre=pre,
        tokens=tokens,
        token_id=token_id,
        scores=scores,
        types=types,
        merges=merges,
        bos_id=ids["bos"],
        eos_id=ids["eos"],
        unk_id=ids["unk"],
        pad_id=ids["pad"],
        add_bos=add_bos,
        add_eos=add_eos,
        add_space_prefix=add_space_prefix,
        escape_whitespaces=model != "gpt2",
        chat_template=template if isinstance(template, str) else None,
        pre_spec=pre_spec,
        specials=specials,
    )


def _string(meta, key, fail) -> str:
    value = meta.get(key, "")
    if not isinstance(value, str):
        raise fail(f"{key} is not a string (it is stored as {type(value).__name__})")
    return value


def _numeric_array(meta, key, n, dtype, fail) -> np.ndarray | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iuf":
        raise fail(f"{key} is not a numeric array")
    if len(value) < n:
        raise fail(f"{key} has {len(value)} entries for {n} tokens")
    return value[:n].astype(dtype)


def _bool(meta, key, default: bool, fail) -> bool:
    value = meta.get(key, default)
    if isinstance(value, (bool, np.bool_, int)):
        return bool(value)
    raise fail(f"{key} is not a boolean: {value!r}")


def _token_id(meta, key, default: int | None, n: int, fail) -> int | None:
    # As llama.cpp: a default outside the vocabulary is disabled, an id outside it is ignored.
    if default is not None and default >= n:
        default = None
    value = meta.get(key)
    if value is None:
        return default
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise fail(f"{key} is not an integer: {value!r}")
    return int(value) if 0 <= value < n else default


def _require_byte_tokens(token_id: dict[str, int], fail) -> None:
    # SentencePiece falls back to <0xXX> tokens for text it has no piece for.
    missing = [b for b in range(256) if f"<0x{b:02X}>" not in token_id]
    if missing:
        raise fail(f"SentencePiece vocabulary lacks {len(missing)} byte tokens, e.g. <0x{missing[0]:02X}>")
