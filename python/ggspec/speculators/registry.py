"""The one list of speculation algorithms: the CLI's --spec-type choices, the
options' checks and `auto` all read it.

A factory returns None when its algorithm cannot serve a model; the registry
turns that into the reason an operator reads, and the run goes on plain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ggspec.speculators.base import Speculator

Factory = Callable[[Any, "SpeculatorOptions"], "Speculator | None"]
Serves = Callable[[Any], bool]


@dataclass(frozen=True)
class SpeculatorOptions:
    """What the operator asked of the speculator (None: the algorithm's default)."""

    max_draft_tokens: int | None = None
    min_draft_prob: float | None = None
    fold_catch_up: bool = True  # a per-token head's catch-up and first step in one graph


@dataclass(frozen=True)
class _Entry:
    factory: Factory
    serves: Serves            # whether the model has what the algorithm needs (a drafter)
    needs_drafter: bool
    decline_reason: str


class SpeculatorRegistry:
    def __init__(self):
        self._entries: dict[str, _Entry] = {}
        self._auto: list[str] = []  # most specific first

    def register(self, name: str, factory: Factory, *, drafter: Serves | None = None, decline_reason: str = "",
                 auto_first: bool = False) -> None:
        """drafter: for an algorithm that runs a drafter, whether a target carries one.
        decline_reason: what the operator reads when it cannot serve. auto_first: `auto`
        tries this one before those registered earlier."""
        if name in self._entries or name == "auto":
            raise ValueError(f"speculator {name!r} is already registered")
        self._entries[name] = _Entry(factory, drafter or (lambda target: True), drafter is not None, decline_reason)
        self._auto.insert(0 if auto_first else len(self._auto), name)

    def names(self) -> list[str]:
        return ["auto", *self._entries]

    def needs_drafter(self, name: str) -> bool:
        return self._entry(name).needs_drafter

    def resolve(self, name: str, target: Any) -> str:
        """`auto` is the drafter the operator attached or the checkpoint carries, else ngram."""
        if name != "auto":
            self._entry(name)
            return name
        return next(n for n in self._auto if self._entries[n].serves(target))

    def create(self, name: str, target: Any, options: SpeculatorOptions) -> tuple[Speculator | None, str | None]:
        """(speculator, None), or (None, why it declined)."""
        name = self.resolve(name, target)
        entry = self._entry(name)
        speculator = entry.factory(target, options) if entry.serves(target) else None
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


def _draft_head(target: Any, options: SpeculatorOptions) -> Speculator:
    from ggspec.speculators.draft_head import DraftHeadSpeculator

    return DraftHeadSpeculator(target.draft_head, max_draft_tokens=options.max_draft_tokens or 3,
                               min_draft_prob=options.min_draft_prob, fold_catch_up=options.fold_catch_up)


def _draft_model(target: Any, options: SpeculatorOptions) -> Speculator:
    from ggspec.speculators.draft_model import DraftModelSpeculator

    # --spec-draft caps the adaptive window rather than fixing it
    return DraftModelSpeculator(target.draft_model, target.n_vocab, max_draft_tokens=options.max_draft_tokens or 16,
                                min_draft_prob=options.min_draft_prob)


def _block(target: Any, options: SpeculatorOptions) -> Speculator:
    from ggspec.speculators.block import BlockDraftSpeculator

    return BlockDraftSpeculator(target.block_drafter, options.max_draft_tokens, options.min_draft_prob)


registry = SpeculatorRegistry()
registry.register("ngram", _ngram)
registry.register("draft-head", _draft_head, drafter=lambda target: getattr(target, "draft_head", None) is not None,
                  decline_reason="no draft head: the model carries no MTP/NextN head", auto_first=True)
registry.register("draft", _draft_model, drafter=lambda target: getattr(target, "draft_model", None) is not None,
                  decline_reason="no draft model: none was attached (--draft-model a language model's GGUF)",
                  auto_first=True)
registry.register("block", _block, drafter=lambda target: getattr(target, "block_drafter", None) is not None,
                  decline_reason="no block drafter: none was attached (--draft-model a DFlash GGUF)",
                  auto_first=True)

__all__ = ["SpeculatorRegistry", "SpeculatorOptions", "registry"]
