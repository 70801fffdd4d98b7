"""A request as its caller sees it, and the hand-off between the caller's thread
and the engine's worker, which alone runs it."""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

_END = object()  # after the last text piece


@dataclass
class Generation:
    """A finished generation. `tokens` excludes the end-of-generation token that stopped it;
    `logprobs` (when asked for) holds one TokenLogprob (engine/logprobs.py) per token."""

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stats: dict[str, Any] = field(default_factory=dict)
    logprobs: list | None = None


class Request:
    """What the worker needs to run one generation, and what it hands back: text
    pieces through a queue, the tokens so far, then the result or the error."""

    def __init__(self, prompt_ids: list[int], sampler, spec, max_tokens: int, ignore_eos: bool,
                 on_token: Callable[[int], None] | None = None,
                 on_finish: Callable[[Generation], None] | None = None, stop: Sequence[str] = (),
                 logprobs: int | None = None):
        self.prompt_ids = prompt_ids
        self.sampler = sampler
        self.spec = spec              # SpecOptions, or a SpeculationPlan the caller made
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.on_token = on_token
        self.on_finish = on_finish
        self.stop = list(stop)        # stop strings (text/stop_strings.py)
        self.logprobs = logprobs      # None, or how many of each row's best tokens to report with its own
        self.tokens: list[int] = []   # appended by the worker as tokens come
        self.token_logprobs: list = []  # with logprobs: each token's, appended before its text is queued
        self.read_tokens = 0          # the tokens the last piece a reader took covers
        self.slot: int | None = None  # the sequence it runs on, once it runs
        self.spec_type: str | None = None  # the speculator it runs with ("none": plain), once it runs
        self._pieces: queue.SimpleQueue = queue.SimpleQueue()
        self._wake: Callable[[], None] | None = None  # an async reader's: a piece or the end is queued
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._result: Generation | None = None
        self._error: BaseException | None = None

    # --- the worker's side ---------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def started(self, slot: int, spec_type: str) -> None:
        self.slot, self.spec_type = slot, spec_type

    def put(self, piece: str) -> None:
        """A text piece, covering the tokens so far."""
        self._pieces.put((piece, len(self.tokens)))
        self._notify()

    def finish(self, result: Generation | None = None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()
        self._pieces.put(_END)
        self._notify()

    def _notify(self) -> None:
        wake = self._wake
        if wake is not None:
            wake()

    # --- the caller's side ---------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    def _read(self, item) -> str | None:
        """A queued item's text piece; None at the end (put back: a second reader ends at once)."""
        if item is _END:
            self._pieces.put(_END)
            return None
        piece, self.read_tokens = item
        return piece

    def pieces(self) -> Iterator[str]:
        while (piece := self._read(self._pieces.get())) is not None:
            yield piece
        self.wait()

    async def apieces(self) -> AsyncIterator[str]:
        """pieces() for an asyncio reader: waits without holding a thread."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:  # on the worker: it must not fail if the loop has closed
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:
                pass

        self._wake = wake
        try:
            while True:
                try:
                    item = self._pieces.get_nowait()
                except queue.Empty:
                    await ready.wait()
                    ready.clear()
                    continue
                piece = self._read(item)
                if piece is None:
                    return
                yield piece
        finally:
            self._wake = None

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

    def __aiter__(self) -> AsyncIterator[str]:
        """The text pieces for an asyncio reader; `result` is ready when they end."""
        return self._request.apieces()

    @property
    def tokens(self) -> list[int]:
        return list(self._request.tokens)

    @property
    def result(self) -> Generation:
        return self._request.wait()

    @property
    def prompt_ids(self) -> list[int]:
        return self._request.prompt_ids

    def logprobs(self, start: int = 0) -> list:
        """With logprobs: the logprobs (engine/logprobs.py) of tokens `start` on, up to
        the last one the text read so far covers."""
        request = self._request
        return request.token_logprobs[start:request.read_tokens]

    @property
    def slot(self) -> int | None:
        """The engine slot it runs on; None while it waits for one."""
        return self._request.slot

    @property
    def spec_type(self) -> str | None:
        """The speculator it runs with ("none": plain decoding); None while it waits."""
        return self._request.spec_type

    @property
    def done(self) -> bool:
        return self._request.done

    @property
    def cancelled(self) -> bool:
        return self._request.cancelled

    def run(self) -> Generation:
        """Waits for the whole generation; returns it."""
        return self.result

    def cancel(self) -> None:
        self._request.cancel()


__all__ = ["Generation", "GenerationStream", "Request"]
