"""What the server serves: one Model and one Engine with its slots, loaded in the
background so that /health can answer 503 while loading, and the requests in
flight (for /slots, the queue limit and the gauges)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ggspec.engine.engine import Engine
from ggspec.engine.sampling import SamplerConfig
from ggspec.engine.stream import Generation, GenerationStream
from ggspec.model import Model
from ggspec.server.errors import APIError
from ggspec.server.metrics import ServerMetrics
from ggspec.server.protocol import ChatRequest, Completion, CompletionRequest
from ggspec.server.responses import finish_reason
from ggspec.speculators.options import SpecOptions
from ggspec.text.chat import CHATML_END, CHATML_TEMPLATE, ChatTemplateError

log = logging.getLogger("ggspec.server")
_DEFAULTS = SamplerConfig()  # llama.cpp's sampling defaults, as llama-server's


@dataclass(frozen=True)
class ServerConfig:
    model_path: str | None = None    # None: the embedded default model
    alias: str | None = None         # the model id /v1/models lists (default: the file's name)
    slots: int = 1
    n_ctx: int = 4096                # each slot's
    n_threads: int | None = None
    spec: SpecOptions = field(default_factory=SpecOptions)
    max_queue: int = 64              # requests waiting for a slot, beyond which a request gets a 503
    api_key: str | None = None
    target_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class InFlight:
    id: str
    prompt: str        # as the client sent it (/slots shows it)
    arrived: float
    stream: GenerationStream | None = None  # None until the engine has it

    @property
    def slot(self) -> int | None:
        return None if self.stream is None else self.stream.slot


class Service:
    def __init__(self, config: ServerConfig):
        self.config = config
        self.model: Model | None = None
        self.engine: Engine | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.in_flight: dict[str, InFlight] = {}
        self._lock = threading.Lock()
        self.metrics = ServerMetrics(self.running, self.waiting)

    # --- loading -------------------------------------------------------------
    def load(self) -> None:
        """Loads the model and starts the engine (on a thread of its own)."""
        c = self.config
        try:
            self.model = Model(c.model_path, n_ctx=c.n_ctx, n_threads=c.n_threads, **c.target_options)
            self.engine = Engine(self.model, slots=c.slots)
            log.info("loaded %s in %.2f s: %d slot(s) of %d tokens", self.model.path, self.model.load_seconds,
                     c.slots, self.model.n_ctx)
            if not self.model.has_chat_template:
                log.info("the model has no chat template: chat requests use ChatML, as llama-server's do")
        except BaseException as e:  # noqa: BLE001 - reported by /health and the command
            self.error = e
        finally:
            self.ready.set()

    @property
    def loaded(self) -> bool:
        return self.ready.is_set() and self.error is None

    @property
    def model_id(self) -> str:
        if self.config.alias:
            return self.config.alias
        return self.model.path.rsplit("/", 1)[-1] if self.model else "loading"

    def close(self) -> None:
        """Cancels what is in flight and stops the engine once it has ended."""
        with self._lock:
            streams = [f.stream for f in self.in_flight.values() if f.stream is not None]
        for stream in streams:
            stream.cancel()
        if self.engine is not None:
            self.engine.close()

    # --- requests ------------------------------------------------------------
    def running(self) -> int:
        with self._lock:
            return sum(f.slot is not None for f in self.in_flight.values())

    def waiting(self) -> int:
        with self._lock:
            return sum(f.slot is None for f in self.in_flight.values())

    def submit(self, body: Completion) -> tuple[str, GenerationStream]:
        """Starts a request (on a server thread: it tokenizes); returns its id and stream."""
        if not self.loaded:
            raise APIError(503, "Loading model" if self.error is None else f"the model failed to load: {self.error}")
        with self._lock:
            full = len(self.in_flight) >= self.config.slots + self.config.max_queue
        if full:
            raise APIError(503, f"the queue is full ({self.config.max_queue} requests wait for a slot)",
                           headers={"Retry-After": "1"})
        model = self.model
        if isinstance(body, ChatRequest):
            kind, shown = "chatcmpl", body.message_dicts()
            try:
                ids = model.encode_chat(shown, template_kwargs=body.chat_template_kwargs,
                                        default_template=CHATML_TEMPLATE)
            except ChatTemplateError as e:
                raise APIError(400, f"messages: {e}", "messages") from None
            except ValueError as e:
                raise APIError(400, f"chat_template_kwargs: {e}", "chat_template_kwargs") from None
        else:
            assert isinstance(body, CompletionRequest)
            kind, shown = "cmpl", body.prompt
            prompt = body.prompt
            if isinstance(prompt, list) and isinstance(prompt[0], str):
                prompt = prompt[0]
            if isinstance(prompt, str):
                ids = model.encode_prompt(prompt)
            elif max(prompt) >= model.target.n_vocab:
                raise APIError(400, f"prompt: token id {max(prompt)} is outside the vocabulary "
                                    f"(0..{model.target.n_vocab - 1})", "prompt")
            else:
                ids = list(prompt)
        if not ids:
            raise APIError(400, "prompt: it tokenizes to no tokens (and the model adds no BOS)", "prompt")
        field = "messages" if kind == "chatcmpl" else "prompt"
        if len(ids) > model.n_ctx:
            raise APIError(400, f"{field}: the prompt is {len(ids)} tokens but a slot's context holds "
                                f"{model.n_ctx} (start the server with a larger -c, or shorten the prompt)", field)
        # by default, to the context's end (as llama-server's n_predict -1)
        budget = body.token_budget if body.token_budget is not None else max(1, model.n_ctx - len(ids))
        entry = InFlight(f"{kind}-{uuid.uuid4().hex}", _shown(shown), time.perf_counter())
        first = []

        def on_token(_token: int) -> None:
            if not first:
                first.append(True)
                self.metrics.ttft.observe(time.perf_counter() - entry.arrived)

        def on_finish(result: Generation) -> None:  # on the engine's thread
            with self._lock:
                self.in_flight.pop(entry.id, None)
            self.metrics.finished(result.stats, finish_reason(result.stats))
            if result.stats["decline_reason"]:
                log.info("%s: speculation declined: %s", entry.id, result.stats["decline_reason"])

        # in flight before the engine has it: a request can finish before submit returns
        with self._lock:
            self.in_flight[entry.id] = entry
        try:
            entry.stream = self.engine.submit(
                ids, max_tokens=budget, temperature=_pick(body.temperature, _DEFAULTS.temperature),
                top_k=_pick(body.top_k, _DEFAULTS.top_k), top_p=_pick(body.top_p, _DEFAULTS.top_p),
                min_p=_pick(body.min_p, _DEFAULTS.min_p), seed=body.seed, ignore_eos=body.ignore_eos,
                spec=self.spec_options(body), stop=self.stop_strings(body), logprobs=body.logprob_count,
                on_token=on_token, on_finish=on_finish)
        except BaseException:
            with self._lock:
                self.in_flight.pop(entry.id, None)
            raise
        return entry.id, entry.stream

    def stop_strings(self, body: Completion) -> list[str]:
        """The request's, and ChatML's end of turn for a chat on a model without a template."""
        chatml = isinstance(body, ChatRequest) and not self.model.has_chat_template
        return body.stop_strings + [CHATML_END] if chatml else body.stop_strings

    def spec_options(self, body: Completion) -> SpecOptions:
        """The server's speculation flags, with what the request's `speculative` sets."""
        spec, base = body.speculative, self.config.spec
        if spec is None:
            return base
        if spec.type == "none":
            return dataclasses.replace(base, enabled=False)
        changes: dict[str, Any] = {}
        if spec.type is not None:
            changes.update(enabled=True, spec_type=spec.type)
        if spec.n_max is not None:
            changes["draft"] = spec.n_max
        if spec.p_min is not None:
            changes["pmin"] = spec.p_min
        return dataclasses.replace(base, **changes)

    def slots(self) -> list[dict[str, Any]]:
        """llama-server's /slots: per slot, whether it runs a request, which, and with what."""
        with self._lock:
            by_slot = {f.slot: f for f in self.in_flight.values() if f.slot is not None}
        out = []
        for i in range(self.config.slots):
            f = by_slot.get(i)
            slot: dict[str, Any] = {"id": i, "n_ctx": self.model.n_ctx, "is_processing": f is not None,
                                    "state": "processing" if f else "idle"}
            if f is not None:
                slot.update(id_task=f.id, spec_type=f.stream.spec_type, speculative=f.stream.spec_type != "none",
                            n_prompt_tokens=len(f.stream.prompt_ids), n_decoded=len(f.stream.tokens),
                            prompt=f.prompt)
            out.append(slot)
        return out


def _pick(value, default):
    return default if value is None else value


def _shown(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if prompt and isinstance(prompt[0], dict):
        return "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in prompt)
    return " ".join(map(str, prompt))


__all__ = ["Service", "ServerConfig"]
