"""The Engine: the one loop under every API. Requests enter through `submit` from
any thread; one worker thread per engine runs them, and only a worker calls into
the native target (a model's lease keeps the workers of several engines on one
model from running at once)."""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Any, Callable, Sequence

from ggspec.engine.batching import BatchScheduler
from ggspec.engine.governor import GovernorMemory
from ggspec.engine.logprobs import MAX_TOP
from ggspec.engine.planner import SpeculationPlan, check_draft_model, plan_speculation
from ggspec.engine.prefix_cache import prefix_cache_of
from ggspec.engine.request_run import RequestRun, new_execution
from ggspec.engine.sampling import Sampler, SamplerConfig, random_seed
from ggspec.engine.stream import Generation, GenerationStream, Request
from ggspec.native.target import ContextOverflowError, token_array
from ggspec.speculators.options import SpecOptions

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
    """Runs generations on one Model. slots: sequences served at once, all their rows
    in one forward per step, each slot's tokens the ones its request gives alone
    (engine/batching.py); each slot holds the model's n_ctx positions.

    Close it (`close()`, or a `with` block) or drop it, and its worker stops once
    the requests already submitted have ended, releasing the target.
    """

    def __init__(self, model, slots: int = 1):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive integer, got {slots!r}")
        self.model = model
        self.slots = slots
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        # the worker holds the queue and the model, never the engine, so dropping the engine stops it
        work, args = (_work, (self._jobs, model)) if slots == 1 else (_work_batched, (self._jobs, model, slots))
        self._worker = threading.Thread(target=work, args=args, name="ggspec-engine", daemon=True)
        self._worker.start()
        self._stop = weakref.finalize(self, self._jobs.put, _STOP)

    def submit(self, prompt: str | Sequence[int], *, max_tokens: int = 128,
               temperature: float = _DEFAULT.temperature, top_k: int = _DEFAULT.top_k, top_p: float = _DEFAULT.top_p,
               min_p: float = _DEFAULT.min_p, seed: int | None = None, ignore_eos: bool = False, spec: Spec = True,
               stop: Sequence[str] = (), logprobs: int | None = None, on_token: Callable[[int], None] | None = None,
               on_finish: Callable[[Generation], None] | None = None) -> GenerationStream:
        """Queues a generation of `prompt` (raw text as llama.cpp's tools read it, or token ids).

        Sampling options and `stop` are `ggspec.generate`'s. spec: True (auto), False, a
        speculator name, SpecOptions, or a SpeculationPlan (a speculator and governor to reuse).
        logprobs: None, or the result's `logprobs` gives each token's log-probability and
        its row's `logprobs` (0-20) most likely tokens.
        A prompt that begins with tokens an earlier request on the model computed reuses
        them from the model's prefix cache (Model.prefix_cache), with the same output as
        a fresh run. on_token(id) and on_finish(result) run on the engine's thread, as
        each token comes and at the end.
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
        if isinstance(spec, SpeculationPlan) and self.slots > 1:
            raise ValueError("a SpeculationPlan holds one sequence's speculator; an Engine with slots > 1 takes "
                             "spec=True/False, a speculator name or SpecOptions")
        if not isinstance(spec, SpeculationPlan):
            spec = spec_options(spec)
            if spec.draft_model:
                check_draft_model(spec.draft_model)  # fails fast; attaching waits for the worker
        stop = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) for s in stop):
            raise TypeError("stop must be a string or a sequence of strings")
        if logprobs is not None and (isinstance(logprobs, bool) or not 0 <= logprobs <= MAX_TOP):
            raise ValueError(f"logprobs must be None or 0..{MAX_TOP}, got {logprobs!r}")
        request = Request(ids, sampler, spec, max_tokens, ignore_eos, on_token, on_finish, stop, logprobs)
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
    memory = GovernorMemory()
    while (job := jobs.get()) is not _STOP:
        with model.lease:
            if isinstance(job, _Call):
                _run_call(job)
            else:
                try:
                    run_request(model, job, memory)
                except BaseException as e:  # noqa: BLE001 - planning's or on_finish's, handed to the caller
                    job.finish(error=e)


def _work_batched(jobs: queue.SimpleQueue, model, n_slots: int) -> None:
    """The worker of an Engine with several slots: requests join and leave between
    steps; the model's lease is held while any slot runs."""
    scheduler = BatchScheduler(model, n_slots)
    stopping = False

    def handle(job) -> None:
        nonlocal stopping
        if job is _STOP:
            stopping = True
        elif isinstance(job, _Call):
            _run_call(job)
        else:
            scheduler.submit(job)

    while not stopping or scheduler.busy:
        first = None if scheduler.busy else jobs.get()  # idle: wait for work
        with model.lease:  # a call runs under it too, as on a one-slot engine
            if first is not None:
                handle(first)
            _drain(jobs, handle)
            if scheduler.busy:
                scheduler.claim()
            while scheduler.busy:
                try:
                    scheduler.step()
                except BaseException as e:  # noqa: BLE001 - a scheduler bug must not strand requests
                    scheduler.fail_all(e)
                _drain(jobs, handle)


def _drain(jobs: queue.SimpleQueue, handle: Callable[[Any], None]) -> None:
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            return
        handle(job)


def _run_call(job: _Call) -> None:
    try:
        job.value = job.fn()
    except BaseException as e:  # noqa: BLE001 - handed to the caller
        job.error = e
    job.done.set()


def run_request(model, request: Request, memory: GovernorMemory | None = None) -> None:
    """One generation, on the worker, to its end: the prompt's forward (after the longest
    prefix the prefix cache holds), then speculative steps until the budget, an
    end-of-generation token, the context's end or a cancel; the request finishes with its
    Generation or the step's error. memory: where the governor starts from what earlier
    requests learned (a caller's SpeculationPlan keeps its own governor)."""
    target = model.target
    spec = request.spec
    plan = spec if isinstance(spec, SpeculationPlan) else plan_speculation(target, spec)
    if isinstance(spec, SpeculationPlan):
        memory = None
    key = GovernorMemory.key(plan, 1)
    if memory is not None:
        memory.start(plan.governor, key)
    prefix = prefix_cache_of(model).begin(0, request.prompt_ids)
    run = RequestRun(model.tokenizer, request, new_execution(target, plan, request.sampler, prefix, request.logprobs))
    try:
        run.start()
        steps = run.execution.generate(request.prompt_ids, request.max_tokens, reused=prefix.reused)
        while run.stop is None:
            if request.cancelled:
                run.end("cancelled")
                break
            step = next(steps, None)
            if step is None:
                run.end("context" if len(request.tokens) < request.max_tokens else "length")
                break
            run.take(step)
    except BaseException as e:  # noqa: BLE001 - the request's own error
        run.fail(e)
        return
    if memory is not None:
        memory.keep(plan.governor, key)
    request.finish(run.finish())


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
