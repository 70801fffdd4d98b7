"""The one place that knows which speculation algorithms exist.

A factory returns None when its algorithm cannot serve a model; the registry
turns that into the reason an operator reads, and the run goes on plain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ggspec.speculators.base import DraftHeadKind, Speculator

Factory = Callable[[Any, "SpeculatorOptions"], "Speculator | None"]


@dataclass(frozen=True)
class SpeculatorOptions:
    """What the operator asked of the speculator (None: the algorithm's default)."""

    max_draft_tokens: int | None = None
    min_draft_prob: float | None = None


@dataclass(frozen=True)
class _Entry:
    factory: Factory
    requires_draft_head: bool
    decline_reason: str


def draft_head_kind(target: Any) -> DraftHeadKind:
    head = getattr(target, "draft_head", None)
    return DraftHeadKind.NONE if head is None else head.kind


class SpeculatorRegistry:
    def __init__(self):
        self._entries: dict[str, _Entry] = {}

    def register(self, name: str, factory: Factory, *, requires_draft_head: bool = False,
                 decline_reason: str = "") -> None:
        """decline_reason: what the operator reads when the factory returns None."""
        if name in self._entries or name == "auto":
            raise ValueError(f"speculator {name!r} is already registered")
        self._entries[name] = _Entry(factory, requires_draft_head, decline_reason)

    def names(self) -> list[str]:
        return ["auto", *self._entries]

    def requires_draft_head(self, name: str) -> bool:
        return self._entry(name).requires_draft_head

    def resolve(self, name: str, target: Any) -> str:
        """`auto` is the drafter the checkpoint carries or the operator attached, else ngram."""
        if name != "auto":
            self._entry(name)
            return name
        return {DraftHeadKind.PER_TOKEN: "draft-head", DraftHeadKind.BLOCK: "block"}.get(
            draft_head_kind(target), "ngram")

    def create(self, name: str, target: Any, options: SpeculatorOptions) -> tuple[Speculator | None, str | None]:
        """(speculator, None), or (None, why it declined)."""
        name = self.resolve(name, target)
        entry = self._entry(name)
        if entry.requires_draft_head and draft_head_kind(target) is DraftHeadKind.NONE:
            return None, f"{name}: {entry.decline_reason}"
        speculator = entry.factory(target, options)
        if speculator is None:
            return None, f"{name}: {entry.decline_reason}"
        return speculator, None

    def _entry(self, name: str) -> _Entry:
        if name not in self._entries:
            raise ValueError(f"unknown speculator {name!r}; expected one of {', '.join(self.names())}")
        return self._entries[name]


def _ngram(target: Any, options: SpeculatorOptions) -> Speculator:
    from ggspec.speculators.ngram import NGramSpeculator

    # --spec-draft caps the adaptive window rather than fixing it
    return NGramSpeculator(max_draft_tokens=options.max_draft_tokens or 64, min_draft_prob=options.min_draft_prob)


def _draft_head(target: Any, options: SpeculatorOptions) -> Speculator | None:
    import os

    from ggspec.speculators.draft_head import DraftHeadSpeculator

    if target.nextn_head is None:
        return None
    return DraftHeadSpeculator(target.nextn_head, target.n_embd, max_draft_tokens=options.max_draft_tokens or 3,
                               min_draft_prob=options.min_draft_prob,
                               fold_catch_up=os.environ.get("GGSPEC_MTP_FOLD_CATCHUP", "1") != "0")


def _block(target: Any, options: SpeculatorOptions) -> Speculator | None:
    from ggspec.speculators.block import BlockDraftSpeculator

    if target.block_drafter is None:
        return None
    return BlockDraftSpeculator(target.block_drafter, options.max_draft_tokens, options.min_draft_prob)


registry = SpeculatorRegistry()
registry.register("ngram", _ngram)
registry.register("draft-head", _draft_head, requires_draft_head=True,
                  decline_reason="no draft head: the model carries no MTP/NextN head")
registry.register("block", _block, requires_draft_head=True,
                  decline_reason="no block drafter: none was attached (--draft-model a DFlash GGUF)")

__all__ = ["SpeculatorRegistry", "SpeculatorOptions", "registry", "draft_head_kind"]
