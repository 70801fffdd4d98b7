"""From the operator's options to a runnable plan: which speculator (or why none),
which governor, which acceptance mode. Declines are reasons, not errors: the run
goes on plain and the stats say why."""

from __future__ import annotations

import functools
import os
import time
import weakref
from dataclasses import dataclass

from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.stats import SpecStats
from ggspec.engine.step_costs import StepCosts, measure_step_costs
from ggspec.errors import ModelFormatError
from ggspec.native.target import architectures
from ggspec.speculators.base import Speculator
from ggspec.speculators.options import SpecOptions
from ggspec.speculators.registry import registry
from ggspec.text.gguf_meta import read_metadata
from ggspec.text.vocab import load_vocab
from ggspec.text.vocab_match import vocabulary_mismatch

#: general.architecture values of drafter GGUFs that ggspec can attach, and the speculator
#: each serves; a file of an architecture ggspec runs as a target
#: (ggspec.native.target.architectures()) is a draft model ("draft").
SUPPORTED_DRAFTERS: dict[str, str] = {"dflash": "block", "eagle3": "draft-head", "gemma4-assistant": "draft-head"}


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
    """The speculator a drafter file serves: "block" (a DFlash drafter), "draft-head" (an
    EAGLE-3 drafter, a Gemma 4 assistant) or "draft" (a language model ggspec runs); a
    clear error when it is none of them."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"draft model not found: {path}")
    stat = os.stat(path)
    arch = _architecture(os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if arch in SUPPORTED_DRAFTERS:
        return SUPPORTED_DRAFTERS[arch]
    if arch in architectures():
        return "draft"
    raise ValueError(f"draft model {path}: general.architecture {arch!r} is not a drafter ggspec can attach "
                     f"(drafters: {', '.join(SUPPORTED_DRAFTERS)}; draft models: {', '.join(architectures())})")


@functools.lru_cache(maxsize=64)
def _architecture(path: str, size: int, mtime_ns: int):
    # every request that names a drafter asks; reading a vocabulary's metadata takes 0.1 s
    return read_metadata(path).get("general.architecture")


#: the speculators that draft with a drafter of the target's, and the Target property holding it
_DRAFTER_PROPERTY = {"draft": "draft_model", "draft-head": "draft_head", "block": "block_drafter"}


def attached_drafter(target, kind: str):
    """The target's drafter that the speculator `kind` drafts with (the draft model, the
    per-token head, the block drafter), or None (none attached, or a kind without one)."""
    name = _DRAFTER_PROPERTY.get(kind)
    return None if name is None else getattr(target, name)


def drafter_attached(target, options: SpecOptions) -> bool:
    """Whether the target's drafter of options.draft_model's kind is that file, attached
    with these options."""
    kind = check_draft_model(options.draft_model)
    attached = attached_drafter(target, kind)
    if attached is None or os.path.realpath(attached.path) != os.path.realpath(options.draft_model):
        return False
    if kind == "draft":
        return attached.threads_asked == options.draft_threads
    if kind == "block":
        return attached.switches == options.drafter_switches()
    return True


def attach_drafter(target, options: SpecOptions) -> None:
    """Attaches options.draft_model as what its file is. A draft model must have the
    target's vocabulary (text/vocab_match.py): else a ModelFormatError says where they differ."""
    kind = check_draft_model(options.draft_model)
    if kind == "block":
        target.attach_drafter(options.draft_model, **options.drafter_switches())
        return
    if kind == "draft-head":
        target.attach_draft_head(options.draft_model)
        return
    base = getattr(target, "target", target)  # a SequenceView's Target
    problem = vocabulary_mismatch(load_vocab(base.path), load_vocab(options.draft_model))
    if problem is not None:
        raise ModelFormatError(f"draft model {options.draft_model} cannot draft for {base.path}: its vocabulary "
                               f"is not the target's ({problem})")
    target.attach_draft_model(options.draft_model, n_threads=options.draft_threads)


def plan_speculation(target, options: SpecOptions) -> SpeculationPlan:
    """Calls into the target (attaching the drafter, measuring step costs): run it
    where the target's calls run."""
    t0 = time.perf_counter()
    plan = _plan(target, options)
    plan.setup_seconds = time.perf_counter() - t0
    return plan


def _plan(target, options: SpecOptions) -> SpeculationPlan:
    governor = SpeculationCostGovernor(enabled=options.governor)
    spec_type = options.spec_type
    if options.draft_model:
        if not drafter_attached(target, options):
            attach_drafter(target, options)
        if spec_type == "auto":  # the file's architecture decides
            spec_type = check_draft_model(options.draft_model)
    if not options.enabled:
        return SpeculationPlan(None, governor, options)
    speculator, reason = registry.create(spec_type, target, options.speculator_options())
    if speculator is not None and options.governor:
        governor = SpeculationCostGovernor(costs=step_costs_of(target, speculator, options))
    return SpeculationPlan(speculator, governor, options, reason)


def step_costs_of(target, speculator: Speculator, options: SpecOptions) -> StepCosts | None:
    """The target's step costs with this speculator and drafter: measured the first
    time they are asked for (on the sequence being planned for), then kept for the target."""
    base = getattr(target, "target", target)  # a SequenceView's Target
    known = _MEASURED.setdefault(base, {})
    drafter = attached_drafter(base, speculator.name)  # what drafts: a file's own head, or what was attached
    key = (speculator.name, speculator.max_draft_tokens, None if drafter is None else drafter.path,
           options.draft_threads, tuple(options.drafter_switches().items()))
    if key not in known:
        known[key] = measure_step_costs(target, speculator)
    return known[key]


_MEASURED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # Target -> {key: StepCosts}


__all__ = ["SpeculationPlan", "plan_speculation", "attached_drafter", "drafter_attached", "attach_drafter",
           "check_draft_model", "SUPPORTED_DRAFTERS"]
