"""The prompt suite for speculative decoding: where it should pay and where it cannot.

Each prompt has a raw form (for base models such as Gemma 3 270M, which has no
chat template) and a chat form (one user message, for instruct models such as
SmolLM2-135M-Instruct). The document is an original ~380-word text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOCUMENT = (Path(__file__).with_name("prompts") / "harbor.txt").read_text().strip()

DOCUMENT_GROUNDED = "document"   # repeat, edit or quote a given text: n-gram should pay
CANNOT_PAY = "cannot-pay"        # free prose, a paraphrase: drafts rarely land
TURNS_TO_COPY = "turns-to-copy"  # prose first, then copying


@dataclass(frozen=True)
class Prompt:
    name: str
    kind: str
    raw: str
    chat: str


def _doc(intro: str) -> str:
    return f"{intro}\n\n{DOCUMENT}\n\n"


_FIRST = DOCUMENT[:120]  # a base model copies once the copy has begun


PROMPTS = [
    Prompt("doc-repeat", DOCUMENT_GROUNDED,
           raw=f"Kellwick: a history\n\n{DOCUMENT}\n\nKellwick: a history (second printing)\n\n{_FIRST}",
           chat=_doc("Repeat the following text exactly, word for word, with no comments.")),
    Prompt("doc-edit", DOCUMENT_GROUNDED,
           raw=_doc("Original text:") + "The same text, with Kellwick renamed Branmouth:\n\n"
               + _FIRST.replace("Kellwick", "Branmouth"),
           chat=_doc("Rewrite the following text exactly, but change the town's name from Kellwick to Branmouth.")),
    Prompt("doc-quote", DOCUMENT_GROUNDED,
           raw=_doc("Read the text.") + "Question: What saved Kellwick, and how? Answer by quoting the text's "
               "third paragraph in full.\nAnswer: \"What saved Kellwick was a lighthouse.",
           chat=_doc("Read the text below.") + "What saved Kellwick, and how? Answer by quoting the third "
                "paragraph of the text in full."),
    Prompt("prose-story", CANNOT_PAY,
           raw="Once upon a time, in a village between two rivers, there lived a clockmaker who",
           chat="Write a short story about a clockmaker who builds a clock that runs backwards."),
    Prompt("prose-essay", CANNOT_PAY,
           raw="The most important thing I learned from travelling alone is",
           chat="Write an essay about what people learn from travelling alone."),
    Prompt("doc-paraphrase", CANNOT_PAY,
           raw=_doc("Text:") + "The same story told in completely different words, for a child:\n\n",
           chat=_doc("Retell the following text in your own words for a seven-year-old. "
                     "Do not reuse its sentences.")),
    Prompt("prose-then-copy", TURNS_TO_COPY,
           raw=f"Kellwick: a history\n\n{DOCUMENT}\n\nKellwick: a history (second edition)\n\n"
               "Preface to the second edition.",
           chat=_doc("First write three sentences of your own about why small towns change. Then repeat the "
                     "following text exactly, word for word.")),
]


def by_name(name: str) -> Prompt:
    for p in PROMPTS:
        if p.name == name:
            return p
    raise KeyError(f"no prompt {name!r}; expected one of {', '.join(p.name for p in PROMPTS)}")


__all__ = ["Prompt", "PROMPTS", "DOCUMENT", "by_name", "DOCUMENT_GROUNDED", "CANNOT_PAY", "TURNS_TO_COPY"]
