"""A synthetic Gemma 4 pair, a gemma4 trunk and its gemma4-assistant: what a verify row
costs, and whether the assistant pays, against plain decoding and against llama.cpp's
draft-mtp on the same files.

    python -m bench.gemma4 [--rounds 3] [--tokens 96] [--rates 0.5 0.8] [--window 3] [-t 2] [--no-peer]

Two random Q8_0 files, written once under ~/.cache/ggspec/bench: a gemma4 in E2B's
proportions (n_embd 1024, 15 layers of kinds 4 sliding-window : 1 global, the last 5
reading the KV of earlier ones, double-wide FFNs on those, per-layer embeddings of 256,
vocabulary 32000: about 450 MB) and an assistant for it (n_embd 256, blocks S S S F,
its own tied 32000-row head). Three parts, as bench.qwen35moe's:

  verify cost   ms of a k-row verify and its cost in one-row steps;
  acceptance    in one process, the assistant at synthetic acceptance (bench/synthetic_
                acceptance.py, the governor off) against plain decoding, paired per round;
  processes     per round, rotated: `ggspec generate` plain and with the assistant
                (--draft-model, the governor on: a random assistant never drafts right,
                so this is "a useless assistant"), llama.cpp's llama-completion and its
                llama-speculative-simple --spec-type draft-mtp -md, on the same files,
                text prompt and threads.
"""

from __future__ import annotations

from pathlib import Path

from bench.harness import synthetic_file
from bench.qwen35moe import arguments, run_parts

SWA_LAYERS = tuple((il + 1) % 5 != 0 for il in range(15))
TARGET_SHAPE = dict(n_vocab=32000, n_embd=1024, swa_layers=SWA_LAYERS, shared_kv_layers=5, n_head=8,
                    n_head_kv_swa=2, n_head_kv_full=2, head_dim_swa=128, head_dim_full=256, n_ff=4096,
                    n_embd_per_layer=256, sliding_window=512, context_length=4096)
ASSISTANT_SHAPE = dict(n_vocab=32000, n_embd=256, n_embd_backbone=1024, swa_layers=(True, True, True, False),
                       n_head=4, n_head_kv_swa=2, n_head_kv_full=2, head_dim_swa=128, head_dim_full=256, n_ff=1024,
                       sliding_window=512, context_length=4096)


def synthetic_pair() -> tuple[Path, Path]:
    from tests.fixtures.tiny_gemma4 import write_tiny_gemma4, write_tiny_gemma4_assistant

    return (synthetic_file("gemma4-synthetic-q8_0.gguf",
                           lambda path: write_tiny_gemma4(path, dtype="q8_0", **TARGET_SHAPE)),
            synthetic_file("gemma4-assistant-synthetic-q8_0.gguf",
                           lambda path: write_tiny_gemma4_assistant(path, dtype="q8_0", **ASSISTANT_SHAPE)))


if __name__ == "__main__":
    run_parts(arguments(__doc__), *synthetic_pair())
