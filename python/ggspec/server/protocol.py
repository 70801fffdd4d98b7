"""The request bodies of the OpenAI endpoints, as ggspec serves them.

Every field is checked: an unknown one, a wrong type or a value out of range is a
400 that names the field (server/errors.py). A null is the field's default, as
OpenAI reads it. Fields OpenAI defines that ggspec does not implement are refused
by name unless they hold their neutral value; those that only concern OpenAI's
service (store, metadata, service_tier, ...) are accepted and ignored. Sampling
defaults are llama.cpp's (as llama-server's), not OpenAI's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ggspec.engine.logprobs import MAX_TOP
from ggspec.speculators.options import MAX_DRAFT, SPEC_TYPES

_MAX_STOPS = 16
_PENALTIES = ("penalties are not supported (they would make output depend on more than the trunk's rows); "
              "send 0 or leave it out")
_SEED_MAX = 0xFFFFFFFF


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data):
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


def neutral_only(reason: str, *neutral: Any) -> AfterValidator:
    """A field ggspec does not implement: accepted at a neutral value only (empty or
    zero, or one of `neutral`), refused with `reason` otherwise."""
    def check(value):
        if value and value not in neutral:
            raise ValueError(reason)
        return value
    return AfterValidator(check)


def _spec_type(value: str) -> str:
    if value != "none" and value not in SPEC_TYPES:
        raise ValueError(f"unknown speculation type {value!r}; expected none, {', '.join(SPEC_TYPES)}")
    return value


def _stop_strings(value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ValueError("must be a string or a list of strings")
    if len(stops) > _MAX_STOPS:
        raise ValueError(f"at most {_MAX_STOPS} stop strings, got {len(stops)}")
    if not all(stops):
        raise ValueError("a stop string must not be empty")
    return stops


SpecType = Annotated[str, AfterValidator(_spec_type)]
DraftWindow = Annotated[int, Field(ge=1, le=MAX_DRAFT)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP)]


class StreamOptions(_Body):
    include_usage: bool = False


class Speculative(_Body):
    """Per-request speculation (llama-server's `speculative.*`)."""

    type: SpecType | None = None     # a --spec-type name, or "none" (off)
    n_max: DraftWindow | None = None
    p_min: Probability | None = None


class Completion(_Body):
    """What /v1/completions and /v1/chat/completions share."""

    model: str | None = None     # any value: the server serves one model
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None     # <= 0: off
    min_p: Probability | None = None
    seed: Annotated[int, Field(ge=-1, le=_SEED_MAX)] | None = None  # -1: a random one, as llama.cpp's
    stop: Annotated[Any, AfterValidator(_stop_strings)] = []
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Annotated[int, Field(ge=1), neutral_only("only n=1 is supported", 1)] = 1
    ignore_eos: bool = False     # llama-server's
    return_tokens: bool = False  # llama-server's: each choice carries its token ids
    speculative: Speculative | None = None
    # llama-server's flat spellings of `speculative`
    speculative_type: SpecType | None = Field(None, alias="speculative.type")
    speculative_n_max: DraftWindow | None = Field(None, alias="speculative.n_max")
    speculative_p_min: Probability | None = Field(None, alias="speculative.p_min")
    # OpenAI's service fields: accepted, nothing to do here
    user: str | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    # OpenAI fields accepted at their neutral value only
    presence_penalty: Annotated[float, neutral_only(_PENALTIES)] = 0.0
    frequency_penalty: Annotated[float, neutral_only(_PENALTIES)] = 0.0
    logit_bias: Annotated[dict[str, float], neutral_only("logit_bias is not supported")] | None = None

    @model_validator(mode="after")
    def _flat_speculative(self):
        """The flat keys fill what the nested object leaves unset."""
        flat = {"type": self.speculative_type, "n_max": self.speculative_n_max, "p_min": self.speculative_p_min}
        flat = {k: v for k, v in flat.items() if v is not None}
        if flat:
            nested = self.speculative.model_dump(exclude_none=True) if self.speculative else {}
            self.speculative = Speculative.model_construct(**{**flat, **nested})
        return self

    @property
    def sampling_seed(self) -> int | None:
        return None if self.seed == -1 else self.seed

    @property
    def token_budget(self) -> int | None:
        return self.max_tokens

    @property
    def logprob_count(self) -> int | None:
        """None: no logprobs; else how many of each row's best tokens to report."""
        return None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def _prompt(value: Any) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]  # a batch of one
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        if min(value) < 0:
            raise ValueError(f"token id {min(value)} is negative")
        return value
    raise ValueError("must be a string, a list of one string, or a non-empty list of token ids")


class CompletionRequest(Completion):
    prompt: Annotated[Any, AfterValidator(_prompt)]
    logprobs: TopLogprobs | None = None  # the legacy form: how many best tokens
    echo: Annotated[bool, neutral_only("echo is not supported")] = False
    suffix: Annotated[str, neutral_only("suffix (fill-in-the-middle) is not supported")] | None = None

    @property
    def logprob_count(self) -> int | None:
        return self.logprobs


def _text_content(value: Any) -> str:
    """A message's content as one string: only text parts are supported."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError("must be a string or a list of content parts")
    texts = []
    for i, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValueError(f"part {i}: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported, "
                             f"got {kind!r}")
        texts.append(part["text"])
    return "".join(texts)


class Message(_Body):
    """A chat message. Fields beyond role and content (a name, tool calls, reasoning)
    pass to the chat template as they are."""

    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Annotated[Any, AfterValidator(_text_content)] = ""


class ChatRequest(Completion):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tools: Annotated[list[dict[str, Any]], neutral_only("tools are not supported")] | None = None
    tool_choice: Annotated[Any, neutral_only("tool_choice is not supported", "none", "auto")] = None
    parallel_tool_calls: bool | None = None  # tools are refused: nothing to run in parallel
    response_format: dict[str, Any] | None = None

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value):
        if value is not None and value.get("type", "text") != "text":
            raise ValueError(f"only the text response format is supported, got {value.get('type')!r}")
        return value

    @model_validator(mode="after")
    def _top_needs_logprobs(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs: needs logprobs true")
        return self

    @property
    def token_budget(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def message_dicts(self) -> list[dict[str, Any]]:
        return [m.model_dump() for m in self.messages]


__all__ = ["CompletionRequest", "ChatRequest", "Speculative", "Message"]
