"""A request as its caller sees it, and the hand-off between the caller's thread
and the engine's worker, which alone runs it."""

from __future__ import annotations

import queue
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

_END = object()  # after the last text piece


@dataclass
class Generation:
    """A finished generation. `tokens` excludes the end-of-generation token that stopped it."""

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stats: dict[str, Any] = field(default_factory=dict)


class Request:
    """What the worker needs to run one generation, and what it hands back: text
    pieces through a queue, the tokens so far, then the result or the error."""

    def __init__(self, prompt_ids: list[int], sampler, spec, max_tokens: int, ignore_eos: bool,
                 on_token: Callable[[int], None] | None = None,
                 on_finish: Callable[[Generation], None] | None = None):
        self.prompt_ids = prompt_ids
        self.sampler = sampler
        self.spec = spec              # SpecOptions, or a SpeculationPlan the caller made
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.on_token = on_token
        self.on_finish = on_finish
        self.tokens: list[int] = []   # appended by the worker as tokens come
        self._pieces: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._result: Generation | None = None
        self._error: BaseException | None = None

    # --- the worker's side ---------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def put(self, piece: str) -> None:
        self._pieces.put(piece)

    def finish(self, result: Generation | None = None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._pieces.put(_END)
        self._done.set()

    # --- the caller's side ---------------------------------------------------
    def cancel(self) -> None:
        self._cancelled.set()

    def pieces(self) -> Iterator[str]:
        while True:
            piece = self._pieces.get()
            if piece is _END:
                self._pieces.put(_END)  # a second iteration ends at once
                break
            yield piece
        self.wait()

    def wait(self) -> Generation:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result


class GenerationStream:
    """A submitted generation. Iterating yields text pieces as the engine produces
    them; `tokens` holds the tokens so far; `result` waits for the end and returns
    the Generation; `cancel()` stops it within one step, and so does dropping the
    stream. An error in the request is raised by iterating and by `result`."""

    def __init__(self, request: Request):
        self._request = request
        weakref.finalize(self, request.cancel)

    def __iter__(self) -> Iterator[str]:
        return self._request.pieces()

    @property
    def tokens(self) -> list[int]:
        return list(self._request.tokens)

    @property
    def result(self) -> Generation:
        return self._request.wait()

    @property
    def prompt_ids(self) -> list[int]:
        return self._request.prompt_ids

    def run(self) -> Generation:
        """Waits for the whole generation; returns it."""
        return self.result

    def cancel(self) -> None:
        self._request.cancel()


__all__ = ["Generation", "GenerationStream", "Request"]
