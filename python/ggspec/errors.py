"""The errors ggspec raises on bad input. All are ValueErrors; the C++ core
raises these same classes (bindings.cpp translates its exceptions into them)."""


class ModelFormatError(ValueError):
    """A GGUF file that is corrupt, truncated, or not a model ggspec can run."""


class ContextOverflowError(ValueError):
    """A sequence that would run past the context the target was loaded with."""


class AllocationError(ValueError):
    """Memory the model needs could not be allocated: a context or model too large for
    this machine, or a file that asks for absurd sizes."""


__all__ = ["ModelFormatError", "ContextOverflowError", "AllocationError"]
