"""Short generations with a useless drafter: does speculation cost anything there?

    python -m bench.short_runs [--rounds 3] [--tokens 96] [--requests 20] [-t 2]
                               [--kinds fresh engine] [--drafters draft-head block]

On a random qwen35 of the shape the governor's issue names (f16, n_embd 1024, 16
layers, about 565 MB, with its random NextN head) and a random DFlash drafter
(block 8), written once under ~/.cache/ggspec/bench, so no draft is ever right:

  fresh    a fresh process's first generation of --tokens tokens
           (`ggspec generate -n N --json`), drafting against `--no-spec`;
  engine   --requests consecutive requests of --tokens tokens in one Engine, whose
           governor carries what it learned from one request to the next, against
           the same requests with speculation off, in sum; an Engine per drafter,
           taking each prompt in turn.

Each round runs every configuration, in an order rotated each round; reported
per (drafter, kind): the median of the per-round ratios of generated tokens/s
to plain, and the ratio in sum over all rounds (every generated token over every
second of generation, each side). The prompts are token ids drawn from the
vocabulary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

import ggspec
from bench.dflash_bench import synthetic_drafter
from bench.harness import rotated, synthetic_file
from bench.qwen35_rollback import SHAPE
from ggspec.speculators.options import SpecOptions

DRAFTERS = ("draft-head", "block")


def synthetic_model() -> Path:
    from tests.fixtures.tiny_qwen35 import write_tiny_qwen35

    return synthetic_file("qwen35-synthetic-16l-f16.gguf",
                          lambda path: write_tiny_qwen35(path, dtype="f16", **{**SHAPE, "n_layer": 16}))


def spec_flags(drafter: str, drafter_path: Path) -> list[str]:
    if drafter == "none":
        return ["--no-spec"]
    if drafter == "block":
        return ["--spec-type", "block", "--draft-model", str(drafter_path)]
    return ["--spec-type", drafter]


def fresh_run(model: Path, tokens: int, threads: int, prompt: str, flags: list[str]) -> tuple[int, float]:
    """Generated tokens and seconds of a fresh `ggspec generate` with these speculation flags;
    prints its load and speculation setup time."""
    cmd = [sys.executable, "-m", "ggspec", "generate", "-m", str(model), "-p", prompt, "-n", str(tokens),
           "--ignore-eos", "--temp", "0", "-t", str(threads), "--json", *flags]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    result = json.loads(out.splitlines()[-1])
    print(f"  load {result['load_ms']:.0f} ms, speculation setup {result['stats']['setup_ms']:.0f} ms")
    return result["stats"]["gen_tokens"] - 1, result["stats"]["gen_seconds"]


def engine_round(model: ggspec.Model, drafter_path: Path, prompts: list[list[int]], tokens: int,
                 order: list[str]) -> dict[str, tuple[int, float]]:
    """Generated tokens and seconds per drafter over consecutive requests, each drafter
    in an Engine of its own (its governor carrying what it learned from one request to
    the next); the engines take each prompt in turn, so host drift hits them alike."""
    specs = {"none": False, "draft-head": "draft-head",
             "block": SpecOptions(spec_type="block", draft_model=str(drafter_path))}
    generated = dict.fromkeys(order, 0)
    seconds = dict.fromkeys(order, 0.0)
    engines = {drafter: ggspec.Engine(model) for drafter in order}
    try:
        for i, ids in enumerate(prompts):
            for drafter in rotated(order, i):
                r = engines[drafter].submit(ids, max_tokens=tokens, ignore_eos=True, temperature=0,
                                            spec=specs[drafter]).result
                generated[drafter] += r.stats["gen_tokens"] - 1
                seconds[drafter] += r.stats["gen_seconds"]
    finally:
        for engine in engines.values():
            engine.close()
    return {drafter: (generated[drafter], seconds[drafter]) for drafter in order}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--kinds", nargs="+", default=["fresh", "engine"], choices=["fresh", "engine"])
    ap.add_argument("--drafters", nargs="+", default=list(DRAFTERS), choices=DRAFTERS)
    args = ap.parse_args()
    model_path, drafter_path = synthetic_model(), synthetic_drafter()
    rng = np.random.default_rng(0)
    # no prefix cache: the engines run the same prompts, and a reused prefix would turn the head off
    model = ggspec.Model(str(model_path), n_ctx=1024, n_threads=args.threads, prefix_cache_mb=None)
    prompts = [rng.integers(3, model.target.n_vocab, size=48).tolist() for _ in range(args.requests)]
    text = "The harbor was quiet in the early morning, and the boats"
    configs = ("none", *args.drafters)
    runs: dict[tuple[str, str], list[tuple[int, float]]] = {}  # (generated tokens, seconds) per round
    for round_ in range(args.rounds):
        order = rotated(configs, round_)
        for kind in args.kinds:
            if kind == "fresh":
                round_runs = {d: fresh_run(model_path, args.tokens, args.threads, text, spec_flags(d, drafter_path))
                              for d in order}
            else:
                round_runs = engine_round(model, drafter_path, prompts, args.tokens, order)
            for drafter, (tokens, seconds) in round_runs.items():
                runs.setdefault((kind, drafter), []).append((tokens, seconds))
                print(f"round {round_} {kind} {drafter}: {tokens / seconds:.2f} tok/s", flush=True)
    print("\n| kind | drafter | tok/s (median) | ratio to plain (median of rounds) | in sum over all rounds |\n"
          "|---|---|---|---|---|")
    for kind in args.kinds:
        plain = runs[(kind, "none")]
        for drafter in configs:
            rates = [t / s for t, s in runs[(kind, drafter)]]
            ratio = statistics.median(r / (t / s) for r, (t, s) in zip(rates, plain))
            in_sum = _rate(runs[(kind, drafter)]) / _rate(plain)
            print(f"| {kind} | {drafter} | {statistics.median(rates):.2f} | {ratio:.3f} | {in_sum:.3f} |")


def _rate(runs: list[tuple[int, float]]) -> float:
    return sum(t for t, _ in runs) / sum(s for _, s in runs)


if __name__ == "__main__":
    main()
