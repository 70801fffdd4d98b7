"""Text handling: tokenization from GGUF metadata and streaming detokenization."""

from ggspec.text.stream import StreamDecoder
from ggspec.text.tokenizer import Tokenizer

__all__ = ["Tokenizer", "StreamDecoder"]
