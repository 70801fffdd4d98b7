"""From the operator's options to a runnable plan: which speculator (or why none),
which governor, which acceptance mode. Declines are reasons, not errors: the run
goes on plain and the stats say why."""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass

from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.stats import SpecStats
from ggspec.engine.step_costs import StepCosts, measure_step_costs
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
    setup_seconds: float = 0.0  # what planning took, until the first generation's stats report it

    def new_stats(self) -> SpecStats:
        """Counters for one generation under this plan."""
        stats = SpecStats(spec_type=self.speculator.name if self.speculator else "none",
                          decline_reason=self.decline_reason)
        stats.seconds["setup"], self.setup_seconds = self.setup_seconds, 0.0
        return stats


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
    """Calls into the target (attaching the drafter, measuring step costs): run it
    where the target's calls run."""
    t0 = time.perf_counter()
    plan = _plan(target, options)
    plan.setup_seconds = time.perf_counter() - t0
    return plan


def _plan(target, options: SpecOptions) -> SpeculationPlan:
    governor = SpeculationCostGovernor(enabled=options.governor)
    if options.draft_model:
        check_draft_model(options.draft_model)
        if not drafter_attached(target, options):
            target.attach_drafter(options.draft_model, **options.drafter_switches())
    if not options.enabled:
        return SpeculationPlan(None, governor, options)
    speculator, reason = registry.create(options.spec_type, target, options.speculator_options())
    if speculator is not None and options.governor:
        governor = SpeculationCostGovernor(costs=step_costs_of(target, speculator, options))
    return SpeculationPlan(speculator, governor, options, reason)


def step_costs_of(target, speculator: Speculator, options: SpecOptions) -> StepCosts | None:
    """The target's step costs with this speculator and drafter: measured the first
    time they are asked for (on the sequence being planned for), then kept for the target."""
    base = getattr(target, "target", target)  # a SequenceView's Target
    known = _MEASURED.setdefault(base, {})
    key = (speculator.name, speculator.max_draft_tokens, options.draft_model, tuple(options.drafter_switches().items()))
    if key not in known:
        known[key] = measure_step_costs(target, speculator)
    return known[key]


_MEASURED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # Target -> {key: StepCosts}


__all__ = ["SpeculationPlan", "plan_speculation", "drafter_attached", "check_draft_model", "SUPPORTED_DRAFTERS"]
