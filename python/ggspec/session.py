"""Multi-turn sessions: the KV survives between turns, and each turn reuses the
longest prefix its prompt shares with what the KV already holds."""

from __future__ import annotations

import os
from typing import Any

from ggspec.generation import (Generation, GenerationStream, Spec, as_model, check_prompt, make_sampler,
                               spec_options)
from ggspec.model import Model
from ggspec.planner import plan_speculation


class Session:
    """A conversation with one model.

    chat=True formats turns with the model's chat template (system: an optional
    system message); chat=False appends each prompt and reply to one running text.
    Sampling options (temperature, top_k, top_p, min_p, seed) and `spec` are
    `ggspec.generate`'s; a turn may override the sampling ones.
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
        # one plan for the whole session: the governor's measurements carry over
        self._plan = plan_speculation(self.model.target, spec_options(spec))
        self._kv_tokens: list[int] = []

    def stream(self, prompt: str, *, max_tokens: int = 128, ignore_eos: bool = False,
               **sampling: Any) -> GenerationStream:
        if self.chat:
            turn_messages = [*self.messages, {"role": "user", "content": prompt}]
            ids = self.model.encode_chat(turn_messages, enable_thinking=self.enable_thinking)
        else:
            ids = self.model.encode_prompt(self.text + prompt)
        check_prompt(self.model, ids)
        sampler = make_sampler(self.model, **{**self.sampling, **sampling})
        reused = self._reuse(ids)

        def finish(result: Generation, kv_tokens: list[int]) -> None:
            self._kv_tokens = kv_tokens
            if self.chat:
                self.messages = [*turn_messages, {"role": "assistant", "content": result.text}]
            else:
                self.text += prompt + result.text

        return GenerationStream(self.model, ids, sampler, self._plan, max_tokens, ignore_eos,
                                reused=reused, on_finish=finish)

    def generate(self, prompt: str, **options: Any) -> Generation:
        return self.stream(prompt, **options).run()

    def _reuse(self, ids: list[int]) -> int:
        """Rewinds the target to the longest prefix of `ids` it holds; returns its length."""
        target = self.model.target
        common = 0
        if self.model.kv_owner is self:
            for a, b in zip(self._kv_tokens, ids):
                if a != b:
                    break
                common += 1
        common = min(common, len(ids) - 1)  # the last prompt token is forwarded for its logits
        try:
            target.rewind(common)
        except ValueError:  # a sliding-window cache no longer holds that far back
            target.reset()
            common = 0
        self.model.kv_owner = self
        return common

__all__ = ["Session"]
