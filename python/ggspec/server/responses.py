"""OpenAI's response and stream-chunk shapes, with llama-server's `timings`."""

from __future__ import annotations

import json
import time
from itertools import accumulate
from dataclasses import dataclass, field
from typing import Any, Callable

from ggspec.engine.stream import Generation

# the engine's stop reasons → OpenAI's (a cancelled request has no response)
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "cancelled"}


def finish_reason(stats: dict[str, Any]) -> str:
    return FINISH_REASONS[stats["stop"]]


def timings(stats: dict[str, Any]) -> dict[str, Any]:
    """llama-server's timings, from a Generation's stats, and what speculation did."""
    prompt_n = stats["prompt_tokens"] - stats["reused_prompt_tokens"]
    prompt_ms = 1000.0 * stats["prompt_seconds"]
    predicted_ms = 1000.0 * stats["gen_seconds"]
    return {
        "cache_n": stats["reused_prompt_tokens"],
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000.0 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": stats["gen_tokens"],
        "predicted_ms": predicted_ms,
        # the first token comes with the prompt's forward: the rate counts the rest, as the stats do
        "predicted_per_token_ms": predicted_ms / (stats["gen_tokens"] - 1) if stats["gen_tokens"] > 1 else 0.0,
        "predicted_per_second": stats["gen_tokens_per_second"],
        "draft_n": stats["draft_n"],
        "draft_n_accepted": stats["draft_n_accepted"],
        "spec_type": stats["spec_type"],
        "mean_acceptance_length": stats["mean_acceptance_length"],
        "spec_decline_reason": stats["decline_reason"],
        "governor_parked_steps": stats["governor_parked_steps"],
        "rpc_round_trips": stats["rpc_round_trips"],
        "rpc_bytes": stats["rpc_bytes"],
        "seed": stats["seed"],
    }


def usage(result: Generation) -> dict[str, Any]:
    n_prompt, n_out = len(result.prompt_tokens), len(result.tokens)
    return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out,
            "prompt_tokens_details": {"cached_tokens": result.stats["reused_prompt_tokens"]}}


@dataclass
class Reply:
    """One response's identity and shape: chat or text completion."""

    chat: bool
    model: str
    id: str
    return_tokens: bool = False
    token_bytes: Callable[[int], bytes] | None = None  # a token's text, for logprobs
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = self.object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": "ggspec"}

    def complete(self, result: Generation) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason(result.stats),
                                  "logprobs": self._logprobs(result.logprobs)}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": result.text}
        else:
            choice["text"] = result.text
        if self.return_tokens:
            choice["tokens"] = result.tokens
        return {**self._head(False), "choices": [choice], "usage": usage(result), "timings": timings(result.stats)}

    def _logprobs(self, logprobs, offset: int = 0) -> dict[str, Any] | None:
        """OpenAI's chat form (content: one entry per token) or its legacy completions form
        (offset: the characters of text before these tokens)."""
        if logprobs is None:
            return None
        def text(token: int) -> str:
            return self.token_bytes(token).decode("utf-8", errors="replace")
        if self.chat:
            def entry(token: int, logprob: float) -> dict[str, Any]:
                return {"token": text(token), "logprob": logprob, "bytes": list(self.token_bytes(token))}
            return {"content": [{**entry(t.token, t.logprob), "top_logprobs": [entry(i, lp) for i, lp in t.top]}
                                for t in logprobs]}
        texts = [text(t.token) for t in logprobs]
        offsets = list(accumulate(map(len, texts), initial=offset))[:-1]
        return {"tokens": texts, "token_logprobs": [t.logprob for t in logprobs],
                "top_logprobs": [{text(i): lp for i, lp in t.top} for t in logprobs], "text_offset": offsets}

    def chunk(self, text: str | None = None, *, role: bool = False, finish: str | None = None,
              logprobs: list | None = None, offset: int = 0) -> dict[str, Any]:
        """A stream chunk; logprobs: the tokens' since the last chunk (offset: the text before them)."""
        entries = self._logprobs(logprobs, offset) if logprobs else None
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": entries}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": entries}
        return {**self._head(True), "choices": [choice]}

    def last_chunks(self, result: Generation, include_usage: bool, logprobs_sent: int = 0,
                    offset: int = 0) -> list[dict[str, Any]]:
        """The chunk with the finish reason (and the logprobs not yet sent), then
        (include_usage) OpenAI's usage chunk with no choices; the last one carries the timings."""
        rest = result.logprobs[logprobs_sent:] if result.logprobs else None
        chunks = [self.chunk(finish=finish_reason(result.stats), logprobs=rest, offset=offset)]
        if self.return_tokens:
            chunks[0]["choices"][0]["tokens"] = result.tokens
        if include_usage:
            chunks.append({**self._head(True), "choices": [], "usage": usage(result)})
        chunks[-1]["timings"] = timings(result.stats)
        return chunks


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event."""
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


__all__ = ["Reply", "timings", "usage", "finish_reason", "sse", "FINISH_REASONS"]
