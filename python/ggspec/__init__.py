"""ggspec: speculative decoding for GGUF language models over native ggml graphs."""

from ggspec.generation import Generation, GenerationStream, generate, stream
from ggspec.model import Model
from ggspec.sampling import SamplerConfig
from ggspec.session import Session
from ggspec.spec_options import SpecOptions
from ggspec.target import ContextOverflowError, ForwardResult, ModelFormatError, Target, load
from ggspec.text.chat import ChatTemplateError

__all__ = ["load", "Target", "ForwardResult", "Model", "generate", "stream", "Session", "Generation",
           "GenerationStream", "SamplerConfig", "SpecOptions", "ModelFormatError", "ContextOverflowError",
           "ChatTemplateError"]
__version__ = "0.1.0"
