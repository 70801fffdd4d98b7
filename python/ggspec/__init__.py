"""ggspec: speculative decoding for GGUF language models over native ggml graphs."""

from ggspec.engine.engine import Engine
from ggspec.engine.sampling import SamplerConfig
from ggspec.engine.stream import Generation, GenerationStream
from ggspec.errors import AllocationError
from ggspec.generation import generate, stream
from ggspec.model import Model
from ggspec.native.target import BatchItem, ContextOverflowError, ForwardResult, ModelFormatError, Target, load
from ggspec.session import Session
from ggspec.speculators.options import SpecOptions
from ggspec.text.chat import ChatTemplateError

__all__ = ["load", "Target", "BatchItem", "ForwardResult", "Model", "Engine", "generate", "stream", "Session", "Generation",
           "GenerationStream", "SamplerConfig", "SpecOptions", "ModelFormatError", "ContextOverflowError",
           "ChatTemplateError", "AllocationError"]
__version__ = "0.1.0"
