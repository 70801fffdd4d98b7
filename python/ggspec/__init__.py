"""ggspec: speculative decoding for GGUF language models over native ggml graphs."""

from ggspec.target import ContextOverflowError, ForwardResult, ModelFormatError, Target, load

__all__ = ["load", "Target", "ForwardResult", "ModelFormatError", "ContextOverflowError"]
__version__ = "0.1.0"
