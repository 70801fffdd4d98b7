"""The prompt suites for speculative decoding, read from `bench/suites/*.toml`.

Each suite file holds 3-5 prompts. Every prompt has a raw form (for base models
such as Gemma 3 270M, which has no chat template) and a chat form (one user
message, for instruct models such as SmolLM2-135M-Instruct). `{{name}}` in a
prompt is replaced by the text of `bench/prompts/name.*txt` (an original
~380-word document, small code files).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

SUITE_DIR = Path(__file__).with_name("suites")
TEXT_DIR = Path(__file__).with_name("prompts")
SUITE_ORDER = ("prose", "lists", "document", "code", "turns_to_copy")

# What a prompt's continuation is, and so what speculation should do on it.
DOCUMENT_GROUNDED = "document"   # repeat, edit or quote a given text: n-gram should pay
CANNOT_PAY = "cannot-pay"        # free prose, a paraphrase: drafts rarely land
TURNS_TO_COPY = "turns-to-copy"  # prose first, then copying


@dataclass(frozen=True)
class Prompt:
    name: str
    suite: str
    kind: str
    raw: str
    chat: str


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    prompts: tuple[Prompt, ...]


def _texts() -> dict[str, str]:
    return {p.name.split(".")[0]: p.read_text().strip() for p in TEXT_DIR.glob("*.txt")}


def _fill(template: str, texts: dict[str, str], where: str) -> str:
    def text(match: re.Match) -> str:
        if match.group(1) not in texts:
            raise KeyError(f"{where}: no text {match.group(1)!r} in {TEXT_DIR}")
        return texts[match.group(1)]

    return re.sub(r"\{\{(\w+)\}\}", text, template)


def load_suite(name: str, texts: dict[str, str] | None = None) -> Suite:
    texts = _texts() if texts is None else texts
    data = tomllib.loads((SUITE_DIR / f"{name}.toml").read_text())
    prompts = tuple(Prompt(p["name"], name, p.get("kind", data["kind"]),
                           _fill(p["raw"], texts, f"{name}/{p['name']}"),
                           _fill(p["chat"], texts, f"{name}/{p['name']}"))
                    for p in data["prompt"])
    return Suite(name, data["title"], prompts)


_TEXTS = _texts()
SUITES = {name: load_suite(name, _TEXTS) for name in SUITE_ORDER}
PROMPTS = [p for suite in SUITES.values() for p in suite.prompts]
DOCUMENT = _TEXTS["harbor"]


def by_name(name: str) -> Prompt:
    for p in PROMPTS:
        if p.name == name:
            return p
    raise KeyError(f"no prompt {name!r}; expected one of {', '.join(p.name for p in PROMPTS)}")


__all__ = ["Prompt", "Suite", "SUITES", "PROMPTS", "DOCUMENT", "by_name", "load_suite",
           "DOCUMENT_GROUNDED", "CANNOT_PAY", "TURNS_TO_COPY"]
