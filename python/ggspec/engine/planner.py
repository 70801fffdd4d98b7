"""From the operator's options to a runnable plan: which speculator (or why none),
which governor, which acceptance mode. Declines are reasons, not errors: the run
goes on plain and the stats say why."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.stats import SpecStats
from ggspec.speculators.base import Speculator
from ggspec.speculators.options import SpecOptions
from ggspec.speculators.registry import registry

#: general.architecture values of drafter GGUFs that ggspec can attach.
SUPPORTED_DRAFTERS: tuple[str, ...] = ("dflash",)


@dataclass
class SpeculationPlan:
    speculator: Speculator | None
    governor: SpeculationCostGovernor
    options: SpecOptions
    decline_reason: str | None = None

    def new_stats(self) -> SpecStats:
        """Counters for one generation under this plan."""
        return SpecStats(spec_type=self.speculator.name if self.speculator else "none",
                         decline_reason=self.decline_reason)


def check_draft_model(path: str) -> str:
    """The drafter file's general.architecture; a clear error when it cannot be attached."""
    from ggspec.text.gguf_meta import read_metadata

    if not os.path.isfile(path):
        raise FileNotFoundError(f"draft model not found: {path}")
    arch = read_metadata(path).get("general.architecture")
    if arch not in SUPPORTED_DRAFTERS:
        supported = ", ".join(SUPPORTED_DRAFTERS) or "none yet"
        raise ValueError(f"draft model {path}: general.architecture {arch!r} is not a drafter ggspec can attach "
                         f"(supported: {supported})")
    return arch


def drafter_attached(target, options: SpecOptions) -> bool:
    """Whether the target's block drafter is options.draft_model with its switches."""
    attached = target.block_drafter
    return (attached is not None and os.path.realpath(attached.path) == os.path.realpath(options.draft_model)
            and attached.switches == options.drafter_switches())


def plan_speculation(target, options: SpecOptions) -> SpeculationPlan:
    """Calls into the target (attaching the drafter): run it where the target's calls run."""
    governor = SpeculationCostGovernor(enabled=options.governor)
    if options.draft_model:
        check_draft_model(options.draft_model)
        if not drafter_attached(target, options):
            target.attach_drafter(options.draft_model, **options.drafter_switches())
    if not options.enabled:
        return SpeculationPlan(None, governor, options)
    speculator, reason = registry.create(options.spec_type, target, options.speculator_options())
    return SpeculationPlan(speculator, governor, options, reason)


__all__ = ["SpeculationPlan", "plan_speculation", "drafter_attached", "check_draft_model", "SUPPORTED_DRAFTERS"]
