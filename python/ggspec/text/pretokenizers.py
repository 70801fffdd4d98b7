"""Byte-level BPE pre-tokenization per `tokenizer.ggml.pre`, as llama.cpp does it.

llama.cpp splits text with a list of regexes applied in turn: each regex splits
every piece left by the previous ones, and both the matches and the text between
them become pieces (Hugging Face's Split with behavior "isolated"). The regexes
and per-type flags below are the ones in llama.cpp's src/llama-vocab.cpp
(llm_tokenizer_bpe and llama_vocab::impl::load). For the GPT-2, Llama 3 and Qwen2
patterns llama.cpp runs hand-written matchers equivalent to the regex; their
trailing `\\s+` branch is written out here so that Oniguruma sees the same pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

from ggspec.text.unicode_classes import as_llama_cpp_classes

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# The contractions are case-insensitive in the original (?i:...) form.
LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")


@dataclass(frozen=True)
class PreTokenizerSpec:
    regexes: tuple[str, ...]
    # With ignore_merges, a whole piece that is a vocabulary token is emitted as is.
    ignore_merges: bool = False
    # llama.cpp's add_bos when the GGUF has no tokenizer.ggml.add_bos_token.
    add_bos: bool = False
    # llama.cpp's byte_encode: map bytes to GPT-2's printable characters before BPE.
    byte_level: bool = True
    # llama.cpp's fix for Gemma 4: a piece of only newlines that is a token is taken whole.
    whole_newline_runs: bool = False


_DEFAULT = PreTokenizerSpec(DEFAULT)
_GPT2 = PreTokenizerSpec((GPT2,))
_DIGITS_GPT2 = PreTokenizerSpec((r"\p{N}", GPT2))
_LLAMA3 = PreTokenizerSpec((LLAMA3,), ignore_merges=True, add_bos=True)
_LLAMA3_REGEX_ONLY = PreTokenizerSpec((LLAMA3,))
_QWEN2 = PreTokenizerSpec((QWEN2,))
# Gemma 4 runs BPE over raw UTF-8 whose spaces are already "▁"; it splits only at
# newlines, as llama.cpp's BPE cannot merge across them.
GEMMA4 = PreTokenizerSpec((r"[^\n]+|[\n]+",), add_bos=True, byte_level=False, whole_newline_runs=True)


def _table() -> dict[str, PreTokenizerSpec]:
    groups = {
        _DEFAULT: ["", "default"],
        _LLAMA3: ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                  "jina-v5-nano"],
        _LLAMA3_REGEX_ONLY: ["dbrx", "smaug-bpe"],
        _GPT2: ["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
                "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling"],
        _DIGITS_GPT2: ["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"],
        _QWEN2: ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open"],
    }
    return {name: spec for spec, names in groups.items() for name in names}


PRE_TYPES = _table()


def pre_tokenizer_spec(pre: str | None) -> PreTokenizerSpec | None:
    """The spec for a `tokenizer.ggml.pre` value (missing means "default"), or None if unsupported."""
    return PRE_TYPES.get(pre or "")


def build_pre_tokenizer(spec: PreTokenizerSpec) -> pre_tokenizers.PreTokenizer:
    """Regex splits in llama.cpp's order, then (byte-level specs) the GPT-2 byte-to-character mapping."""
    steps = [
        pre_tokenizers.Split(Regex(as_llama_cpp_classes(r)), behavior="isolated", invert=False)
        for r in spec.regexes
    ]
    if spec.byte_level:
        # use_regex=False: the splitting is done above; ByteLevel only maps bytes to characters.
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False))
    return pre_tokenizers.Sequence(steps)
