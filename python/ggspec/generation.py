"""Text generation: prompt → tokens → sampled continuation → streamed text.

`stream()` yields text as it completes; `generate()` collects it. Both time
prompt processing and generation alone (model loading excluded).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ggspec.model import Messages, Model
from ggspec.planner import SpeculationPlan, plan_speculation
from ggspec.runtime import SpeculativeExecution
from ggspec.sampling import Sampler, SamplerConfig, random_seed
from ggspec.spec_options import SpecOptions
from ggspec.target import ContextOverflowError
from ggspec.text import StreamDecoder

Spec = bool | str | SpecOptions
_DEFAULT = SamplerConfig()  # llama.cpp's sampling defaults


@dataclass
class Generation:
    """A finished generation. `tokens` excludes the end-of-generation token that stopped it."""

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stats: dict[str, Any] = field(default_factory=dict)


class GenerationStream:
    """Iterates over text pieces as they complete; `result` is set once exhausted.

    reused: leading prompt positions already in the target's KV (a session's
    previous turns); the target must hold exactly those. on_finish(result,
    kv_tokens) learns which tokens the KV holds afterwards. on_token(id) sees every
    token the moment the runtime emits it (timing, progress).
    """

    def __init__(self, model: Model, prompt_ids: list[int], sampler: Sampler, plan: SpeculationPlan,
                 max_tokens: int, ignore_eos: bool, reused: int = 0,
                 on_finish: Callable[[Generation, list[int]], None] | None = None,
                 on_token: Callable[[int], None] | None = None):
        self.model = model
        self.prompt_ids = prompt_ids
        self.sampler = sampler
        self.plan = plan
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.reused = reused
        self.on_finish = on_finish
        self.on_token = on_token
        self.result: Generation | None = None

    def __iter__(self) -> Iterator[str]:
        decoder = StreamDecoder(self.model.tokenizer)
        pieces: list[str] = []
        tokens: list[int] = []
        emitted: list[int] = []  # everything the runtime produced, past an end-of-generation token too
        stop = "length"
        clock = _Clock()
        execution = self._execution()
        for token in self._tokens(execution, clock, emitted):
            if token in self.model.tokenizer.eog_ids and not self.ignore_eos:
                stop = "eos"
                break
            tokens.append(token)
            piece = decoder.push(token)
            if piece:
                pieces.append(piece)
                yield piece
        else:
            stop = "context" if len(tokens) < self.max_tokens else "length"
        tail = decoder.flush()
        if tail:
            pieces.append(tail)
            yield tail
        stats = clock.stats(len(self.prompt_ids), len(tokens), self.sampler.config.seed, stop)
        stats["reused_prompt_tokens"] = self.reused
        stats.update(execution.stats.as_dict())
        self.result = Generation("".join(pieces), tokens, list(self.prompt_ids), stats)
        if self.on_finish is not None:
            kv = (self.prompt_ids + emitted)[:self.model.target.cache_seq_len]
            self.on_finish(self.result, kv)

    def run(self) -> Generation:
        """Consumes the stream; returns the result."""
        for _ in self:
            pass
        return self.result

    def _execution(self) -> SpeculativeExecution:
        plan = self.plan
        speculator = plan.speculator
        stats = plan.new_stats()
        if speculator is not None and self.reused and not speculator.can_arm_after_prefix_reuse:
            stats.decline_reason = (f"{speculator.name}: cannot arm after a reused prefix "
                                    f"({self.reused} positions it never saw)")
            stats.spec_type = "none"
            speculator = None
        if speculator is not None:
            speculator.reset()  # a new sequence, or a new turn of one: it re-reads the history
        return SpeculativeExecution(self.model.target, self.sampler, speculator, governor=plan.governor,
                                    stats=stats, draft_cap=plan.options.draft, accept=plan.options.accept)

    def _tokens(self, execution: SpeculativeExecution, clock: "_Clock", emitted: list[int]) -> Iterator[int]:
        if not self.reused:
            self.model.target.reset()
        clock.start()
        for step in execution.generate(self.prompt_ids, self.max_tokens, reused=self.reused):
            emitted.extend(step)
            for token in step:
                clock.tick(first=clock.t_prompt is None)
                if self.on_token is not None:
                    self.on_token(token)
                yield token


class _Clock:
    def __init__(self):
        self.t_start = self.t_prompt = self.t_last = None

    def start(self) -> None:
        self.t_start = time.perf_counter()

    def tick(self, first: bool) -> None:
        self.t_last = time.perf_counter()
        if first:
            self.t_prompt = self.t_last

    def stats(self, n_prompt: int, n_gen: int, seed: int, stop: str) -> dict[str, Any]:
        prompt_s = (self.t_prompt - self.t_start) if self.t_prompt else 0.0
        gen_s = (self.t_last - self.t_prompt) if self.t_prompt else 0.0
        # The first token comes with the prompt's forward; generation speed counts the rest.
        return {
            "prompt_tokens": n_prompt,
            "gen_tokens": n_gen,
            "prompt_seconds": prompt_s,
            "gen_seconds": gen_s,
            "prompt_tokens_per_second": n_prompt / prompt_s if prompt_s > 0 else 0.0,
            "gen_tokens_per_second": (n_gen - 1) / gen_s if gen_s > 0 and n_gen > 1 else 0.0,
            "seed": seed,
            "stop": stop,
        }


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
    spec: Spec = True,
) -> GenerationStream:
    """Starts a generation; iterate over the result for text as it is produced.

    model: a loaded Model, or a GGUF path (None: the embedded default model).
    prompt: text; with chat=True, text (one user message) or a list of messages.
    temperature <= 0 is greedy; top_k <= 0, top_p = 1 and min_p = 0 switch those off.
    seed: the draw for output position p depends only on (seed, p); None picks one
    (reported in the stats).
    spec: speculative decoding — True (auto), False, a speculator name, or SpecOptions.
    It never changes the output, only how fast it comes.
    """
    model = as_model(model)
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    sampler = make_sampler(model, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    if chat:
        prompt_ids = model.encode_chat(prompt, enable_thinking=enable_thinking)
    elif isinstance(prompt, str):
        prompt_ids = model.encode_prompt(prompt)
    else:
        raise TypeError("a list of messages needs chat=True")
    check_prompt(model, prompt_ids)
    model.kv_owner = None
    plan = plan_speculation(model.target, spec_options(spec))
    return GenerationStream(model, prompt_ids, sampler, plan, max_tokens, ignore_eos)


def generate(model: Model | str | os.PathLike | None, prompt: str | Messages, **options: Any) -> Generation:
    """Generates a completion (see `stream` for the options) and returns it whole."""
    return stream(model, prompt, **options).run()


def as_model(model: Model | str | os.PathLike | None) -> Model:
    return model if isinstance(model, Model) else Model(model)


def make_sampler(model: Model, *, temperature: float = _DEFAULT.temperature, top_k: int = _DEFAULT.top_k,
                 top_p: float = _DEFAULT.top_p, min_p: float = _DEFAULT.min_p, seed: int | None = None) -> Sampler:
    config = SamplerConfig(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                           seed=random_seed() if seed is None else seed)
    return Sampler(config, model.target.n_vocab)


def check_prompt(model: Model, prompt_ids: list[int]) -> None:
    if not prompt_ids:
        raise ValueError("the prompt is empty (it tokenizes to no tokens and the model adds no BOS)")
    if len(prompt_ids) > model.n_ctx:
        raise ContextOverflowError(f"the prompt is {len(prompt_ids)} tokens but the context holds {model.n_ctx} "
                                   f"(raise -c/n_ctx or shorten the prompt)")


def spec_options(spec: Spec) -> SpecOptions:
    if isinstance(spec, SpecOptions):
        return spec
    if isinstance(spec, bool):
        return SpecOptions(enabled=spec)
    if isinstance(spec, str):
        return SpecOptions(spec_type=spec)
    raise TypeError(f"spec must be a bool, a speculator name or SpecOptions, not {type(spec).__name__}")


__all__ = ["generate", "stream", "Generation", "GenerationStream"]
