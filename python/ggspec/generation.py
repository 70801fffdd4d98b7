"""One-shot text generation: prompt → tokens → sampled continuation → streamed text.

`stream()` yields text as it completes; `generate()` collects it. Both run on an
Engine of their own (several threads on one Model take turns) and time prompt
processing and generation alone (model loading excluded).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ggspec.engine.engine import Engine, Spec
from ggspec.engine.sampling import SamplerConfig
from ggspec.engine.stream import Generation, GenerationStream
from ggspec.model import Messages, Model

_DEFAULT = SamplerConfig()  # llama.cpp's sampling defaults


def stream(
    model: Model | str | os.PathLike | None,
    prompt: str | Messages,
    *,
    max_tokens: int = 128,
    temperature: float = _DEFAULT.temperature,
    top_k: int = _DEFAULT.top_k,
    top_p: float = _DEFAULT.top_p,
    min_p: float = _DEFAULT.min_p,
    seed: int | None = None,
    chat: bool = False,
    enable_thinking: bool | None = None,
    ignore_eos: bool = False,
    stop: Sequence[str] = (),
    spec: Spec = True,
) -> GenerationStream:
    """Starts a generation; iterate over the result for text as it is produced.

    model: a loaded Model, or a GGUF path (None: the embedded default model).
    prompt: text; with chat=True, text (one user message) or a list of messages.
    temperature <= 0 is greedy; top_k <= 0, top_p = 1 and min_p = 0 switch those off.
    seed: the draw for output position p depends only on (seed, p); None picks one
    (reported in the stats).
    stop: strings that end the generation when the text produces one; the text stops
    before it (stop reason "stop").
    spec: speculative decoding — True (auto), False, a speculator name, or SpecOptions.
    It never changes the output, only how fast it comes.
    """
    model = as_model(model, prefix_cache_mb=None)  # a model loaded for one request has no later ones to serve
    if chat:
        prompt = model.encode_chat(prompt, enable_thinking=enable_thinking)
    elif not isinstance(prompt, str):
        raise TypeError("a list of messages needs chat=True")
    engine = Engine(model)
    try:
        return engine.submit(prompt, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                             min_p=min_p, seed=seed, ignore_eos=ignore_eos, stop=stop, spec=spec)
    finally:
        engine.close(wait=False)  # its worker ends with the request


def generate(model: Model | str | os.PathLike | None, prompt: str | Messages, **options: Any) -> Generation:
    """Generates a completion (see `stream` for the options) and returns it whole."""
    return stream(model, prompt, **options).result


def as_model(model: Model | str | os.PathLike | None, **options: Any) -> Model:
    """A loaded Model as it is, or one loaded from a path with Model's options."""
    return model if isinstance(model, Model) else Model(model, **options)


__all__ = ["generate", "stream", "as_model"]
