"""Token attributes, end-of-generation ids and the special-token order, as llama.cpp derives them.

GGUF token types say little about which tokens end a turn, so llama.cpp
(llama_vocab::impl::load in src/llama-vocab.cpp) also recognizes tokens by their
text: well-known end-of-turn and fill-in-the-middle strings are forced to CONTROL
and join the end-of-generation set, a few model families get their own fixes, and
the tokens matched in raw text before tokenization (control, user-defined and
unknown) are tried longest text first. The rules and strings below are those.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# llama_token_attr bits.
UNDEFINED = 0
UNKNOWN = 1 << 0
UNUSED = 1 << 1
NORMAL = 1 << 2
CONTROL = 1 << 3
USER_DEFINED = 1 << 4
BYTE = 1 << 5
LSTRIP = 1 << 7
RSTRIP = 1 << 8

# GGUF token type -> attribute; unknown types are UNDEFINED.
_TYPE_ATTR = {0: UNDEFINED, 1: NORMAL, 2: UNKNOWN, 3: CONTROL, 4: USER_DEFINED, 5: UNUSED, 6: BYTE}

_EOT_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
)
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
            "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
            "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
            "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}
# Every token with one of these texts ends generation.
EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
))
# gpt-oss: always rendered, never treated as control.
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


@dataclass(frozen=True)
class SpecialTokens:
    attrs: np.ndarray  # uint16 llama_token_attr per token
    eog_ids: frozenset[int]
    # Control, user-defined and unknown tokens, longest text (in UTF-8 bytes) first:
    # the order in which they are cut out of raw text.
    partition_order: tuple[int, ...]


def resolve_special_tokens(
    tokens: list[str],
    token_id: dict[str, int],
    types: np.ndarray,
    *,
    eos_id: int | None,
    eot_id: int | None,
    eom_id: int | None,
    fim_ids: dict[str, int | None],
    model_name: str,
    architecture: str,
    pre: str,
) -> SpecialTokens:
    lut = np.array([_TYPE_ATTR[k] for k in range(len(_TYPE_ATTR))], dtype=np.uint16)
    known = (types >= 0) & (types < len(lut))
    attrs = np.where(known, lut[np.where(known, types, 0)], UNDEFINED).astype(np.uint16)

    def find(texts) -> int | None:
        # llama.cpp takes the first match in hash-map order; with several candidates
        # present that order is arbitrary, so the lowest id is taken here.
        found = [token_id[t] for t in texts if t in token_id]
        return min(found) if found else None

    def force_control(i: int) -> None:
        attrs[i] |= CONTROL

    # Text-detected EOT/EOM/FIM tokens, where the metadata names none, become CONTROL.
    # fim_ids: "pre", "suf", "mid", "pad", "rep", "sep" -> id from the metadata or None.
    if eot_id is None:
        eot_id = find(_EOT_TEXTS)
        if eot_id is not None:
            force_control(eot_id)
    if eom_id is None:
        eom_id = find(_EOM_TEXTS)
        if eom_id is not None:
            force_control(eom_id)
    fim = dict(fim_ids)
    for kind, texts in _FIM_TEXTS.items():
        if fim.get(kind) is None:
            fim[kind] = find(texts)
            if fim[kind] is not None:
                force_control(fim[kind])

    # Control tokens named "unused" are marked unused (still control).
    for i in np.flatnonzero(attrs & CONTROL):
        if "unused" in tokens[i]:
            attrs[i] |= UNUSED

    # Fill-in-the-middle padding, repository and file-separator tokens also end generation.
    eog = {fim[k] for k in ("pad", "rep", "sep") if fim[k] is not None}
    for t in EOG_TEXTS:
        i = token_id.get(t)
        if i is not None:
            eog.add(i)
            force_control(i)
    for t in _ALWAYS_RENDERED:
        if t in token_id:
            attrs[token_id[t]] = USER_DEFINED
    eog.update(i for i in (eos_id, eot_id, eom_id) if i is not None)

    _harmony_end_is_not_eog(tokens, attrs, eog)
    _plain_s_marker(tokens, attrs, eog)

    order = sorted(
        (int(i) for i in np.flatnonzero(attrs & (CONTROL | USER_DEFINED | UNKNOWN))),
        key=lambda i: -len(tokens[i].encode("utf-8", errors="surrogateescape")),
    )
    _per_model_strip(tokens, token_id, attrs, order, model_name.lower(), architecture, pre)
    return SpecialTokens(attrs=attrs, eog_ids=frozenset(eog), partition_order=tuple(order))


def _harmony_end_is_not_eog(tokens, attrs, eog) -> None:
    # o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
    texts = {tokens[i]: i for i in eog}
    has_call = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
        end = texts["<|end|>"]
        eog.discard(end)
        attrs[end] = USER_DEFINED


def _plain_s_marker(tokens, attrs, eog) -> None:
    # Gemma 4 and PLaMo use "</s>" as an ordinary token.
    texts = {tokens[i]: i for i in eog}
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        s = texts["</s>"]
        eog.discard(s)
        attrs[s] = NORMAL


def _per_model_strip(tokens, token_id, attrs, order, name, arch, pre) -> None:
    # Whitespace that llama.cpp strips next to some special tokens, keyed by model name.
    if any(p in pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        a in arch for a in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in token_id:
            attrs[token_id["<mask>"]] |= LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for i in order:
            attrs[i] |= RSTRIP
        if "</s>" in token_id:
            attrs[token_id["</s>"]] |= RSTRIP
        for t in ("<unk>", "<s>", "<|endoftext|>"):
            if t in token_id:
                attrs[token_id[t]] &= ~RSTRIP & 0xFFFF
    elif "modern-bert" in name:
        if "[MASK]" in token_id:
            attrs[token_id["[MASK]"]] |= LSTRIP
