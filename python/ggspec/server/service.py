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
            if c.spec.enabled and c.spec.draft_model:
                # the drafter loads (or is refused) and its step costs are measured now,
                # while /health says loading, not in the first request
                warm = self.engine.submit(self.model.encode_prompt("Hello"), max_tokens=2, spec=c.spec).result
                log.info("drafter %s attached (%s)", c.spec.draft_model,
                         warm.stats["spec_type"] if not warm.stats["decline_reason"] else warm.stats["decline_reason"])
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
            streams = [f.stream for f in self._live() if f.stream is not None]
        for stream in streams:
            stream.cancel()
        if self.engine is not None:
            self.engine.close()

    # --- requests ------------------------------------------------------------
    def require_loaded(self) -> None:
        if not self.loaded:
            raise APIError(503, "Loading model" if self.error is None else f"the model failed to load: {self.error}")

    def _live(self) -> list[InFlight]:
        """The requests still in flight (under the lock). One that ended in any way, an
        engine error included, leaves here: its stream is done. A cancelled one that still
        waits for a slot is not counted: the engine ends it as it reaches one, before its
        prompt's forward."""
        for key in [k for k, f in self.in_flight.items() if f.stream is not None and f.stream.done]:
            del self.in_flight[key]
        return [f for f in self.in_flight.values() if f.stream is None or not f.stream.cancelled]

    def running(self) -> int:
        with self._lock:
            return sum(f.slot is not None for f in self._live())

    def waiting(self) -> int:
        with self._lock:
            return sum(f.slot is None for f in self._live())

    def submit(self, body: Completion) -> tuple[str, GenerationStream]:
        """Starts a request (on a server thread: it tokenizes); returns its id and stream."""
        self.require_loaded()
        kind = "chatcmpl" if isinstance(body, ChatRequest) else "cmpl"
        entry = InFlight(f"{kind}-{uuid.uuid4().hex}", _shown(body), time.perf_counter())
        with self._lock:  # a place in the queue, taken before tokenizing
            if len(self._live()) >= self.config.slots + self.config.max_queue:
                raise APIError(503, f"the queue is full ({self.config.max_queue} requests wait for a slot)",
                               headers={"Retry-After": "1"})
            self.in_flight[entry.id] = entry
        try:
            ids = self.prompt_ids(body)
            # by default, to the context's end (as llama-server's n_predict -1)
            budget = body.token_budget if body.token_budget is not None else max(1, self.model.n_ctx - len(ids))
            entry.stream = self.engine.submit(
                ids, max_tokens=budget, temperature=_pick(body.temperature, _DEFAULTS.temperature),
                top_k=_pick(body.top_k, _DEFAULTS.top_k), top_p=_pick(body.top_p, _DEFAULTS.top_p),
                min_p=_pick(body.min_p, _DEFAULTS.min_p), seed=body.sampling_seed, ignore_eos=body.ignore_eos,
                spec=self.spec_options(body), stop=self.stop_strings(body), logprobs=body.logprob_count,
                on_token=self._first_token_timer(entry), on_finish=self._finished(entry))
        except BaseException:
            with self._lock:
                self.in_flight.pop(entry.id, None)
            raise
        return entry.id, entry.stream

    def prompt_ids(self, body: Completion) -> list[int]:
        """The request's prompt as token ids (a chat through the model's template), checked
        against the vocabulary and a slot's context."""
        model = self.model
        field_name = "messages" if isinstance(body, ChatRequest) else "prompt"
        if isinstance(body, ChatRequest):
            try:
                ids = model.encode_chat(body.message_dicts(), template_kwargs=body.chat_template_kwargs,
                                        default_template=CHATML_TEMPLATE)
            except ChatTemplateError as e:
                raise APIError(400, f"messages: {e}", "messages") from None
            except ValueError as e:
                raise APIError(400, f"chat_template_kwargs: {e}", "chat_template_kwargs") from None
        elif isinstance(body.prompt, str):
            ids = model.encode_prompt(body.prompt)
        elif max(body.prompt) >= model.target.n_vocab:
            raise APIError(400, f"prompt: token id {max(body.prompt)} is outside the vocabulary "
                                f"(0..{model.target.n_vocab - 1})", "prompt")
        else:
            ids = list(body.prompt)
        if not ids:
            raise APIError(400, "prompt: it tokenizes to no tokens (and the model adds no BOS)", "prompt")
        if len(ids) > model.n_ctx:
            raise APIError(400, f"{field_name}: the prompt is {len(ids)} tokens but a slot's context holds "
                                f"{model.n_ctx} (start the server with a larger -c, or shorten the prompt)", field_name)
        return ids

    def _first_token_timer(self, entry: InFlight):
        first = []

        def on_token(_token: int) -> None:  # on the engine's thread
            if not first:
                first.append(True)
                self.metrics.ttft.observe(time.perf_counter() - entry.arrived)
        return on_token

    def _finished(self, entry: InFlight):
        def on_finish(result: Generation) -> None:  # on the engine's thread
            with self._lock:
                self.in_flight.pop(entry.id, None)
            self.metrics.finished(result.stats, finish_reason(result.stats))
            if result.stats["decline_reason"]:
                log.info("%s: speculation declined: %s", entry.id, result.stats["decline_reason"])
        return on_finish

    def stop_strings(self, body: Completion) -> list[str]:
        """The request's, and ChatML's end of turn for a chat on a model without a template."""
        chatml = isinstance(body, ChatRequest) and not self.model.has_chat_template
        return body.stop + [CHATML_END] if chatml else body.stop

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
            by_slot = {f.slot: f for f in self._live() if f.slot is not None}
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


def _shown(body: Completion) -> str:
    """The prompt as /slots shows it."""
    if isinstance(body, ChatRequest):
        return "\n".join(f"{m.role}: {m.content or ''}" for m in body.messages)
    return body.prompt if isinstance(body.prompt, str) else " ".join(map(str, body.prompt))


__all__ = ["Service", "ServerConfig"]
