"""The server's Prometheus metrics, under vLLM's names (prefix `ggspec:`), one
registry per server. Counters are fed from each finished request's stats, so
they equal the sums of the responses' `timings`."""

from __future__ import annotations

from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class ServerMetrics:
    def __init__(self, running: Callable[[], int], waiting: Callable[[], int]):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("ggspec:request_success", "Finished requests, by finish reason",
                                ["finished_reason"], registry=r)
        self.prompt_tokens = Counter("ggspec:prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("ggspec:generation_tokens", "Generated tokens of finished requests",
                                         registry=r)
        self.ttft = Histogram("ggspec:time_to_first_token_seconds", "From a request's arrival to its first token",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.drafts = Counter("ggspec:spec_decode_num_drafts", "Verifies of at least one drafted token", registry=r)
        self.draft_tokens = Counter("ggspec:spec_decode_num_draft_tokens", "Drafted tokens verified", registry=r)
        self.accepted_tokens = Counter("ggspec:spec_decode_num_accepted_tokens", "Drafted tokens accepted",
                                       registry=r)
        self.accepted_per_position = Counter("ggspec:spec_decode_num_accepted_tokens_per_pos",
                                             "Drafted tokens accepted, by position in the draft", ["position"],
                                             registry=r)
        self.governor_parked = Counter("ggspec:spec_decode_governor_parked_steps",
                                       "Steps the cost governor decoded plain while drafting lost", registry=r)
        self.prefix_cache_hits = Counter("ggspec:prefix_cache_hit_tokens",
                                         "Prompt tokens taken from the prefix cache", registry=r)
        Gauge("ggspec:num_requests_running", "Requests in a slot", registry=r).set_function(running)
        Gauge("ggspec:num_requests_waiting", "Requests waiting for a slot", registry=r).set_function(waiting)

    def finished(self, stats: dict[str, Any], finish_reason: str) -> None:
        """A request's end (on the engine's thread): its Generation's stats."""
        self.requests.labels(finish_reason).inc()
        self.prompt_tokens.inc(stats["prompt_tokens"])
        self.generation_tokens.inc(stats["gen_tokens"])
        self.drafts.inc(stats["verify_steps"])
        self.draft_tokens.inc(stats["draft_n"])
        self.accepted_tokens.inc(stats["draft_n_accepted"])
        for position, accepted in enumerate(stats["draft_n_accepted_per_position"]):
            self.accepted_per_position.labels(str(position)).inc(accepted)
        self.governor_parked.inc(stats["governor_parked_steps"])
        self.prefix_cache_hits.inc(stats["reused_prompt_tokens"])

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["ServerMetrics"]
