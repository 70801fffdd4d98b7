"""Speculation counters and phase timers, under llama.cpp's names where it has them."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

# setup: planning (attaching a drafter, measuring step costs), paid by the first request of a plan
PHASES = ("setup", "draft", "verify", "rollback", "snapshot", "commit", "prefix_cache")


@dataclass
class SpecStats:
    spec_type: str = "none"
    decline_reason: str | None = None
    draft_n: int = 0              # drafted tokens sent to verification
    draft_n_accepted: int = 0     # of those, accepted
    verify_steps: int = 0         # steps that verified at least one draft
    plain_steps: int = 0          # one-row steps (nothing drafted, or the governor parked drafting)
    proposed_at: list[int] = field(default_factory=list)  # [i]: steps that proposed a draft at position i
    accepted_at: list[int] = field(default_factory=list)  # [i]: steps whose draft at position i was accepted
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    governor_parked_steps: int = 0
    governor_probes: int = 0
    reforwards: int = 0             # rollbacks that re-forwarded the kept rows (a recurrent trunk's old path)
    state_transfer_bytes: int = 0   # recurrent state moved between host and device
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)

    @contextmanager
    def phase(self, name: str):
        t0 = self.clock()
        try:
            yield
        finally:
            self.seconds[name] += self.clock() - t0

    def record_verify(self, n_drafted: int, n_accepted: int) -> None:
        self.verify_steps += 1
        self.draft_n += n_drafted
        self.draft_n_accepted += n_accepted
        for counts in (self.proposed_at, self.accepted_at):
            counts.extend([0] * (n_drafted - len(counts)))
        for i in range(n_drafted):
            self.proposed_at[i] += 1
            self.accepted_at[i] += i < n_accepted

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec_type": self.spec_type,
            "decline_reason": self.decline_reason,
            "draft_n": self.draft_n,
            "draft_n_accepted": self.draft_n_accepted,
            "verify_steps": self.verify_steps,
            "plain_steps": self.plain_steps,
            # tokens emitted per verify: the accepted drafts plus the target's own token
            "mean_acceptance_length": 1 + self.draft_n_accepted / self.verify_steps if self.verify_steps else 0.0,
            "acceptance_rate": self.draft_n_accepted / self.draft_n if self.draft_n else 0.0,
            "acceptance_per_position": [a / p for a, p in zip(self.accepted_at, self.proposed_at)],
            "draft_n_per_position": list(self.proposed_at),
            "draft_n_accepted_per_position": list(self.accepted_at),
            **{f"{name}_ms": 1000.0 * s for name, s in self.seconds.items()},
            "governor_parked_steps": self.governor_parked_steps,
            "governor_probes": self.governor_probes,
            "reforwards": self.reforwards,
            "state_transfer_bytes": self.state_transfer_bytes,
            "state_transfer_bytes_per_step": (self.state_transfer_bytes / (self.verify_steps + self.plain_steps)
                                              if self.verify_steps + self.plain_steps else 0.0),
        }


__all__ = ["SpecStats", "PHASES"]
