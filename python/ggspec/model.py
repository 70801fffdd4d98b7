"""A model as a user sees it: the target adapter plus the text around it
(tokenizer, end-of-generation ids, chat template), loaded from one GGUF."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Mapping, Sequence

from ggspec.default_model import default_model_path
from ggspec.native.target import Target, load
from ggspec.text import Tokenizer
from ggspec.text.chat import render_chat

Messages = Sequence[Mapping[str, Any]]


class Model:
    """Loads `path` (default: the embedded Gemma 3 270M) once for many generations.

    prefix_cache_mb: the memory the prefix cache (engine/prefix_cache.py) may take for
    the KV and recurrent checkpoints of earlier requests, so that a prompt beginning
    with their tokens reuses them (0: a sequence reuses only what its own last request
    left; None: every request starts from scratch). Reuse never changes output.
    Other keyword arguments are `ggspec.load`'s: n_ctx, n_threads, device, kv_type, ...
    """

    def __init__(self, path: str | os.PathLike | None = None, *, prefix_cache_mb: float | None = 1024,
                 **target_options: Any):
        if path is None:
            path = default_model_path()
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model file not found: {path}")
        self.path = path
        t0 = time.perf_counter()
        self.target: Target = load(path, **target_options)  # validates the file first
        self.tokenizer = Tokenizer.from_gguf(path)
        #: what loading took (the weights, the tokenizer); a speculation plan's own setup
        #: (a drafter, its step costs) is its first request's setup_ms
        self.load_seconds = time.perf_counter() - t0
        #: held by the engine worker that is running a request on the target: engines
        #: on one model take turns, and only the holder calls into the target
        self.lease = threading.Lock()
        if prefix_cache_mb is not None and (isinstance(prefix_cache_mb, bool) or
                                            not isinstance(prefix_cache_mb, (int, float)) or
                                            not 0 <= prefix_cache_mb < float("inf")):
            raise ValueError(f"prefix_cache_mb must be a number of MiB >= 0 or None, got {prefix_cache_mb!r}")
        self.prefix_cache_mb = prefix_cache_mb
        #: the PrefixCache every engine on the model reuses prefixes through, made by the
        #: first one to run (engine/prefix_cache.py: prefix_cache_of)
        self.prefix_cache = None

    @property
    def n_ctx(self) -> int:
        return self.target.max_context_length

    @property
    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def encode_prompt(self, prompt: str) -> list[int]:
        """A raw prompt as llama.cpp's tools read one: BOS/EOS per the file, special-token text parsed."""
        return self.tokenizer.encode(prompt, add_special=True, parse_special=True)

    def chat_text(self, messages: str | Messages, *, enable_thinking: bool | None = None,
                  template_kwargs: Mapping[str, Any] | None = None, default_template: str | None = None) -> str:
        """A conversation (or one user message) formatted with the model's chat template
        (default_template: the one to use on a model without one; else that is an error);
        template_kwargs: more variables for the template (OpenAI's chat_template_kwargs)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        tok = self.tokenizer
        bos = tok.token_text(tok.bos_id) if tok.bos_id is not None else ""
        eos = tok.token_text(tok.eos_id) if tok.eos_id is not None else ""
        extra = dict(template_kwargs or {})
        reserved = sorted(extra.keys() & {"messages", "bos_token", "eos_token", "template"})
        if reserved:
            raise ValueError(f"chat template variable {reserved[0]!r} is set by ggspec, not by the caller")
        thinking = extra.pop("enable_thinking", None)
        if enable_thinking is None:
            enable_thinking = thinking
        extra.setdefault("add_generation_prompt", True)
        text = render_chat(tok.chat_template or default_template, messages, bos_token=bos, eos_token=eos,
                           enable_thinking=enable_thinking, **extra)
        # Templates that write the BOS themselves would get a second one from
        # add_special; keep exactly one, as llama.cpp does.
        if tok.add_bos and bos and text.startswith(bos):
            text = text[len(bos):]
        return text

    def encode_chat(self, messages: str | Messages, *, enable_thinking: bool | None = None,
                    template_kwargs: Mapping[str, Any] | None = None, default_template: str | None = None) -> list[int]:
        text = self.chat_text(messages, enable_thinking=enable_thinking, template_kwargs=template_kwargs,
                              default_template=default_template)
        return self.tokenizer.encode(text, add_special=True, parse_special=True)

    def __repr__(self) -> str:
        return f"Model({self.path!r}, arch={self.target.arch}, n_ctx={self.n_ctx})"


__all__ = ["Model", "Messages"]
