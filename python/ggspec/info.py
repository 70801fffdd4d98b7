"""What a GGUF file is, as ggspec sees it (`ggspec info MODEL`): its shape,
tokenizer and quantization mix, the drafters it carries, which --spec-type values
can serve it, and what ggspec refuses in it and why. The refusal is the loader's
own: the file is loaded (with a small context) to find out."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from gguf import GGMLQuantizationType

from ggspec.engine.planner import SUPPORTED_DRAFTERS
from ggspec.native.target import load
from ggspec.speculators.registry import SpeculatorOptions, registry
from ggspec.text.gguf_meta import read_header


def model_info(path: str | os.PathLike) -> dict[str, Any]:
    """The report as a dict: architecture, layers, context_length, embedding_length,
    tokenizer, types (a count per tensor type), drafters, spec_types, refused."""
    path = os.fspath(path)
    meta, tensors = read_header(path)  # a file that is not GGUF raises here, naming it
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None

    def key(suffix: str) -> Any:
        value = meta.get(f"{arch}.{suffix}")
        return int(value) if isinstance(value, int) else None

    tokens = meta.get("tokenizer.ggml.tokens")
    template = meta.get("tokenizer.chat_template")
    info: dict[str, Any] = {
        "path": path,
        "architecture": arch,
        "layers": key("block_count"),
        "context_length": key("context_length"),
        "embedding_length": key("embedding_length"),
        "tokenizer": None if "tokenizer.ggml.model" not in meta else {
            "model": meta.get("tokenizer.ggml.model"),
            "pre": meta.get("tokenizer.ggml.pre"),
            "tokens": len(tokens) if isinstance(tokens, list) else None,
            "chat_template": isinstance(template, str) and bool(template),
        },
        "types": dict(Counter(_type_name(t.type) for t in tensors).most_common()),
        "drafters": [],
        "spec_types": [],
        "refused": [],
    }
    if arch in SUPPORTED_DRAFTERS:  # a drafter file: attached to a target, never run alone
        kind = SUPPORTED_DRAFTERS[arch]
        info["drafters"] = [f"{arch} drafter for {kind} (attach it with --draft-model to a target)"]
        info["spec_types"] = [kind]
        return info
    try:
        target = load(path, n_ctx=64, n_threads=1)
    except (ValueError, OSError) as e:
        info["refused"] = [" ".join(str(e).split())]
        return info
    if target.draft_head is not None:
        info["drafters"].append(f"MTP/NextN head ({key('nextn_predict_layers') or 1} block)")
    for name in registry.names()[1:]:
        speculator, reason = registry.create(name, target, SpeculatorOptions())
        if speculator is not None:
            info["spec_types"].append(name)
        elif name in ("draft", "block"):  # with a drafter file
            info["spec_types"].append(f"{name} (with --draft-model)")
    info["spec_types"].insert(0, f"auto ({registry.resolve('auto', target)})")
    return info


def _type_name(type_id: int) -> str:
    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"unknown type {type_id}"


def format_info(info: dict[str, Any]) -> str:
    tokenizer = info["tokenizer"]
    lines = [
        f"file:           {info['path']}",
        f"architecture:   {info['architecture']}",
        f"layers:         {info['layers']}   embedding: {info['embedding_length']}   "
        f"context: {info['context_length']}",
        "tokenizer:      " + ("none" if tokenizer is None else
                             f"{tokenizer['model']} ({tokenizer['pre'] or 'default'}), {tokenizer['tokens']} tokens, "
                             f"chat template: {'yes' if tokenizer['chat_template'] else 'no'}"),
        "types:          " + ", ".join(f"{name} x{n}" for name, n in info["types"].items()),
        "drafters:       " + ("; ".join(info["drafters"]) or "none"),
        "--spec-type:    " + (", ".join(info["spec_types"]) or "none (the file does not load)"),
        "refused:        " + ("; ".join(info["refused"]) or "nothing"),
    ]
    return "\n".join(lines)


__all__ = ["model_info", "format_info"]
