"""The Engine: the one loop under every API. Requests enter through `submit` from
any thread; one worker thread per engine runs them, and only a worker calls into
the native target (a model's lease keeps the workers of several engines on one
model from running at once)."""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any, Callable, Sequence

from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.planner import SpeculationPlan, check_draft_model, plan_speculation
from ggspec.engine.sampling import Sampler, SamplerConfig, random_seed
from ggspec.engine.stream import Generation, GenerationStream, Request
from ggspec.native.target import ContextOverflowError, token_array
from ggspec.speculators.options import SpecOptions
from ggspec.text import StreamDecoder

Spec = bool | str | SpecOptions | SpeculationPlan
_DEFAULT = SamplerConfig()  # llama.cpp's sampling defaults
_STOP = object()


class _Call:
    """A function to run on the worker (planning attaches drafters: a native call)."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.done = threading.Event()
        self.value = self.error = None


class Engine:
    """Runs generations on one Model. slots: sequences served at once (1 for now).

    Close it (`close()`, or a `with` block) or drop it, and its worker stops once
    the requests already submitted have ended, releasing the target.
    """

    def __init__(self, model, slots: int = 1):
        if slots != 1:
            raise ValueError(f"slots must be 1 (several sequences in one forward are not served yet), got {slots}")
        self.model = model
        self.slots = slots
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        # the worker holds the queue and the model, never the engine, so dropping the engine stops it
        self._worker = threading.Thread(target=_work, args=(self._jobs, model), name="ggspec-engine", daemon=True)
        self._worker.start()
        self._stop = weakref.finalize(self, self._jobs.put, _STOP)

    def submit(self, prompt: str | Sequence[int], *, max_tokens: int = 128,
               temperature: float = _DEFAULT.temperature, top_k: int = _DEFAULT.top_k, top_p: float = _DEFAULT.top_p,
               min_p: float = _DEFAULT.min_p, seed: int | None = None, ignore_eos: bool = False, spec: Spec = True,
               session: object | None = None, on_token: Callable[[int], None] | None = None,
               on_finish: Callable[[Generation], None] | None = None) -> GenerationStream:
        """Queues a generation of `prompt` (raw text as llama.cpp's tools read it, or token ids).

        Sampling options are `ggspec.generate`'s. spec: True (auto), False, a speculator
        name, SpecOptions, or a SpeculationPlan (a speculator and governor to reuse).
        session: requests with the same key reuse the KV prefix the key's last request
        left, while no other request has used the target since. on_token(id) and
        on_finish(result) run on the engine's thread, as each token comes and at the end.
        """
        if not self._stop.alive:
            raise RuntimeError("this engine is closed")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        model = self.model
        if isinstance(prompt, str):
            ids = model.encode_prompt(prompt)
        else:
            ids = token_array(prompt, model.target.n_vocab).tolist()
        check_prompt(model, ids)
        sampler = Sampler(SamplerConfig(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                        seed=random_seed() if seed is None else seed), model.target.n_vocab)
        if not isinstance(spec, SpeculationPlan):
            spec = spec_options(spec)
            if spec.draft_model:
                check_draft_model(spec.draft_model)  # fails fast; attaching waits for the worker
        request = Request(ids, sampler, spec, max_tokens, ignore_eos, session, on_token, on_finish)
        self._jobs.put(request)
        return GenerationStream(request)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Runs fn() on the engine's thread, after what is queued; returns its value."""
        if not self._stop.alive:
            raise RuntimeError("this engine is closed")
        job = _Call(fn)
        self._jobs.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.value

    def close(self, wait: bool = True) -> None:
        """No new requests; the worker stops after the submitted ones (wait: until it has)."""
        self._stop()
        if wait and threading.current_thread() is not self._worker:
            self._worker.join()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _work(jobs: queue.SimpleQueue, model) -> None:
    while (job := jobs.get()) is not _STOP:
        with model.lease:
            if isinstance(job, _Call):
                try:
                    job.value = job.fn()
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    job.error = e
                job.done.set()
            else:
                try:
                    job.finish(run_request(model, job))
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    model.kv_owner = None  # what the KV holds is unknown now
                    job.finish(error=e)


def run_request(model, request: Request) -> Generation:
    """One generation, on the worker: the prompt's forward, then speculative steps
    until the budget, an end-of-generation token, the context's end or a cancel."""
    target, tokenizer = model.target, model.tokenizer
    spec = request.spec
    plan = spec if isinstance(spec, SpeculationPlan) else plan_speculation(target, spec)
    reused = _reuse(model, request.session, request.prompt_ids)
    execution = _execution(target, plan, request.sampler, reused)
    decoder = StreamDecoder(tokenizer)
    pieces: list[str] = []
    tokens = request.tokens
    emitted: list[int] = []  # everything the runtime produced, past an end-of-generation token too
    clock = _Clock()
    if not reused:
        target.reset()
    clock.start()
    steps = execution.generate(request.prompt_ids, request.max_tokens, reused=reused)
    stop = None
    while stop is None:
        if request.cancelled:
            stop = "cancelled"
            break
        step = next(steps, None)
        if step is None:
            stop = "context" if len(tokens) < request.max_tokens else "length"
            break
        emitted.extend(step)
        for token in step:
            clock.tick(first=clock.t_prompt is None)
            if request.on_token is not None:
                request.on_token(token)
            if token in tokenizer.eog_ids and not request.ignore_eos:
                stop = "eos"
                break
            tokens.append(token)
            piece = decoder.push(token)
            if piece:
                pieces.append(piece)
                request.put(piece)
    tail = decoder.flush()
    if tail:
        pieces.append(tail)
        request.put(tail)
    stats = clock.stats(len(request.prompt_ids), len(tokens), request.sampler.config.seed, stop)
    stats["reused_prompt_tokens"] = reused
    stats.update(execution.stats.as_dict())
    result = Generation("".join(pieces), list(tokens), list(request.prompt_ids), stats)
    model.kv_tokens = (request.prompt_ids + emitted)[:target.cache_seq_len]
    if request.on_finish is not None:
        request.on_finish(result)
    return result


def _reuse(model, session: object | None, ids: list[int]) -> int:
    """Rewinds the target to the longest prefix of `ids` that the session's last
    request left in the KV; returns its length (0: nothing reused)."""
    common = 0
    if session is not None and model.kv_owner is session:
        for a, b in zip(model.kv_tokens, ids):
            if a != b:
                break
            common += 1
    common = min(common, len(ids) - 1)  # the last prompt token is forwarded for its logits
    model.kv_owner = session
    if common > 0:
        try:
            model.target.rewind(common)
        except ValueError:  # a sliding-window cache no longer holds that far back
            return 0
    return common


def _execution(target, plan: SpeculationPlan, sampler: Sampler, reused: int) -> SpeculativeExecution:
    speculator = plan.speculator
    stats = plan.new_stats()
    if speculator is not None and reused and not speculator.can_arm_after_prefix_reuse:
        stats.decline_reason = (f"{speculator.name}: cannot arm after a reused prefix "
                                f"({reused} positions it never saw)")
        stats.spec_type = "none"
        speculator = None
    if speculator is not None:
        speculator.reset()  # a new sequence, or a new turn of one: it re-reads the history
    return SpeculativeExecution(target, sampler, speculator, governor=plan.governor, stats=stats,
                                draft_cap=plan.options.draft, accept=plan.options.accept)


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


def check_prompt(model, prompt_ids: list[int]) -> None:
    if not prompt_ids:
        raise ValueError("the prompt is empty (it tokenizes to no tokens and the model adds no BOS)")
    if len(prompt_ids) > model.n_ctx:
        raise ContextOverflowError(f"the prompt is {len(prompt_ids)} tokens but the context holds {model.n_ctx} "
                                   f"(raise -c/n_ctx or shorten the prompt)")


def spec_options(spec: bool | str | SpecOptions) -> SpecOptions:
    if isinstance(spec, SpecOptions):
        return spec
    if isinstance(spec, bool):
        return SpecOptions(enabled=spec)
    if isinstance(spec, str):
        return SpecOptions(spec_type=spec)
    raise TypeError(f"spec must be a bool, a speculator name or SpecOptions, not {type(spec).__name__}")


__all__ = ["Engine", "Spec", "run_request", "check_prompt", "spec_options"]
