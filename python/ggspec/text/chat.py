"""Chat templates: the GGUF's `tokenizer.chat_template`, rendered with jinja2 the
way transformers' `apply_chat_template` renders it, so a prompt formats the same
in ggspec as in the model's own tooling.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


# What a chat uses on a model without a template, as llama-server does: ChatML.
# Its end-of-turn marker is text to such a model, so a chat stops at CHATML_END.
CHATML_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
                   "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHATML_END = "<|im_end|>"


class ChatTemplateError(ValueError):
    """The model has no chat template, or its template failed to render."""


def _raise_exception(message: str):
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators=None, sort_keys: bool = False) -> str:
    # transformers' filter: unlike jinja2's built-in, it keeps non-ASCII text as is
    # and does not HTML-escape, so templates that embed tool schemas read naturally.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def render_chat(
    template: str | None,
    messages: Sequence[Mapping[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    enable_thinking: bool | None = None,
    **extra: Any,
) -> str:
    """Renders `messages` ([{"role": ..., "content": ...}, ...]) through the template.

    enable_thinking is passed only when set, so a template's own default applies
    otherwise (as in transformers, where it is a free template keyword).
    """
    if not template:
        raise ChatTemplateError("this model has no chat template (tokenizer.chat_template is absent); "
                                "it is a base model: give a raw prompt instead of --chat")
    variables = dict(extra, messages=list(messages), bos_token=bos_token, eos_token=eos_token,
                     add_generation_prompt=add_generation_prompt)
    if enable_thinking is not None:
        variables["enable_thinking"] = enable_thinking
    try:
        return _compile(template).render(**variables)
    except Exception as e:  # noqa: BLE001 - a template is code from the file: any failure is its own
        raise ChatTemplateError(f"the model's chat template failed to render: {type(e).__name__}: {e}") from None


__all__ = ["render_chat", "ChatTemplateError", "CHATML_TEMPLATE", "CHATML_END"]
