"""Multi-turn sessions: each turn's prompt begins with the conversation so far,
whose KV the model's prefix cache holds from the turn before, so a turn forwards
only its new tokens."""

from __future__ import annotations

import os
from typing import Any

from ggspec.engine.engine import Engine, Spec, spec_options
from ggspec.engine.planner import plan_speculation
from ggspec.engine.stream import Generation, GenerationStream
from ggspec.generation import as_model
from ggspec.model import Model


class Session:
    """A conversation with one model, on an Engine of its own.

    chat=True formats turns with the model's chat template (system: an optional
    system message); chat=False appends each prompt and reply to one running text.
    Sampling options (temperature, top_k, top_p, min_p, seed) and `spec` are
    `ggspec.generate`'s; a turn may override the sampling ones. A turn starts once
    the one before it has ended.
    """

    def __init__(self, model: Model | str | os.PathLike | None = None, *, chat: bool = True,
                 system: str | None = None, spec: Spec = True, enable_thinking: bool | None = None,
                 **sampling: Any):
        self.model = as_model(model)
        self.chat = chat
        self.enable_thinking = enable_thinking
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self.text = ""
        self.sampling = sampling
        self._engine = Engine(self.model)
        # one plan for the whole session: the governor's measurements carry over. Made on
        # the engine's thread: attaching a drafter calls into the target.
        options = spec_options(spec)
        self._plan = self._engine.call(lambda: plan_speculation(self.model.target, options))
        self._turn: GenerationStream | None = None

    def stream(self, prompt: str, *, max_tokens: int = 128, ignore_eos: bool = False,
               **sampling: Any) -> GenerationStream:
        if self._turn is not None:
            try:
                self._turn.result  # the reply goes into the history before the next turn is rendered
            except Exception:  # noqa: BLE001 - that turn's caller has had its error
                pass
        if self.chat:
            turn_messages = [*self.messages, {"role": "user", "content": prompt}]
            ids = self.model.encode_chat(turn_messages, enable_thinking=self.enable_thinking)
        else:
            ids = self.model.encode_prompt(self.text + prompt)

        def finish(result: Generation) -> None:
            if result.stats["stop"] == "cancelled":
                return  # the turn did not happen
            if self.chat:
                self.messages = [*turn_messages, {"role": "assistant", "content": result.text}]
            else:
                self.text += prompt + result.text

        self._turn = self._engine.submit(ids, max_tokens=max_tokens, ignore_eos=ignore_eos, spec=self._plan,
                                         on_finish=finish, **{**self.sampling, **sampling})
        return self._turn

    def generate(self, prompt: str, **options: Any) -> Generation:
        return self.stream(prompt, **options).result


__all__ = ["Session"]
