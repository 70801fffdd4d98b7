"""A synthetic qwen35moe with its MoE NextN head: what a verify row costs, and whether
the head pays, against plain decoding and against llama.cpp on the same file.

    python -m bench.qwen35moe [--rounds 3] [--tokens 96] [--rates 0.5 0.8] [-t 2] [--no-peer]

A random qwen35moe (Q8_0, about 530 MB: n_embd 1024, 6 GatedDeltaNet + 2 attention
layers and an MTP block, each with 64 experts of width 256, 8 routed to per row, and
a shared expert; vocabulary 32000) is written once under ~/.cache/ggspec/bench.
Three parts:

  verify cost   ms of a k-row verify (k = 1, 2, 4, 8, 16; LM head on every row, argmax
                in the graph) and its cost in one-row steps: k rows route to up to 8k of
                the 64 experts, so a verify reads more weights than a step;
  processes     per round, in an order rotated each round: `ggspec generate` plain
                (--no-spec) and with the file's own head (--spec-type draft-head, the
                governor on: a random head never drafts right, so this is "a useless
                head"), llama.cpp's llama-completion and its llama-speculative-simple
                --spec-type draft-mtp, on the same file, text prompt and threads;
  acceptance    in one process, the head at synthetic acceptance (bench/synthetic_
                acceptance.py, the governor off) against plain decoding, paired per round.

Prints Markdown tables of medians and per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import ggspec
from bench.harness import rotated, synthetic_file, throughput_cells
from bench.peer.commands import speculative_cmd, completion_cmd
from bench.peer.generation_stats import completion_stats, run_for_stats
from bench.qwen35_rollback import SHAPE, run as rollback_run
from bench.short_runs import fresh_run

MOE_SHAPE = {**SHAPE, "n_ff": 2048, "n_expert": 64, "n_expert_used": 8, "n_ff_exp": 256, "n_ff_shexp": 256}
PROMPT = "The harbor was quiet in the early morning, and the boats"
ROWS = (1, 2, 4, 8, 16)


def synthetic_moe() -> Path:
    from tests.fixtures.tiny_qwen35 import write_tiny_qwen35

    return synthetic_file("qwen35moe-synthetic-q8_0.gguf",
                          lambda path: write_tiny_qwen35(path, dtype="q8_0", **MOE_SHAPE))


def verify_costs(target: ggspec.Target, prompt: list[int], repeats: int) -> dict[int, float]:
    """Median ms of a k-row verify after the prompt, per k (a recurrent trunk cannot rewind
    past its last verify, so each verify starts again from a fresh prefill)."""
    rng = np.random.default_rng(1)
    times: dict[int, list[float]] = {k: [] for k in ROWS}
    for _ in range(repeats):
        for k in ROWS:
            target.reset()
            target.spec_forward(prompt)
            rows = rng.integers(3, target.n_vocab, size=k).tolist()
            t0 = time.perf_counter()
            target.spec_forward(rows, all_logits=True, top_k=1)
            times[k].append(1000 * (time.perf_counter() - t0))
    return {k: statistics.median(v) for k, v in times.items()}


def process_round(model: Path, draft_model: Path | None, tokens: int, threads: int, peer: bool,
                  round_: int) -> dict[str, float]:
    """draft_model: an assistant GGUF the head comes from, or None: the file's own head."""
    head = ["--spec-type", "draft-head"] + ([] if draft_model is None else ["--draft-model", str(draft_model)])
    runs = {
        "ggspec plain": lambda: fresh_run(model, tokens, threads, PROMPT, ["--no-spec"]),
        "ggspec draft-head (governor on)": lambda: fresh_run(model, tokens, threads, PROMPT, head),
    }
    if peer:
        runs["llama.cpp plain"] = lambda: run_for_stats(
            completion_cmd(model, PROMPT, tokens, threads, ctx=1024), parse=completion_stats)["tokens_per_second"]
        runs["llama.cpp draft-mtp"] = lambda: run_for_stats(
            speculative_cmd(model, PROMPT, "draft-mtp", tokens, threads, ctx=1024,
                            draft_model=draft_model))["tokens_per_second"]
    return {name: runs[name]() for name in rotated(list(runs), round_)}


def report_verify_costs(target: ggspec.Target, prompt: list[int]) -> None:
    verify_costs(target, prompt, 1)  # warm-up: builds every graph shape once
    costs = verify_costs(target, prompt, 5)
    print("\n| rows | ms | one-row steps |\n|---|---|---|")
    for k, ms in costs.items():
        print(f"| {k} | {ms:.1f} | {ms / costs[1]:.2f} |")


def report_acceptance(target: ggspec.Target, prompt: list[int], rates: list[float], tokens: int, rounds: int,
                      window: int) -> None:
    """The target's draft head at synthetic acceptance (governor off) against plain decoding, paired per round."""
    rate_of = {"plain": None, **{f"rate {r}": r for r in rates}}  # None: no head

    def run(config: str, n: int, seed: int) -> dict:
        rate = rate_of[config]
        return {**rollback_run(target, "plain" if rate is None else "snapshots", prompt, n, window, rate or 0.0,
                               seed=seed), "config": config}

    configs = list(rate_of)
    for config in configs:  # warm-up
        run(config, 16, 2**32 - 1)
    runs = [run(config, tokens, r) for r in range(rounds) for config in rotated(configs, r)]
    base = {x["seed"]: x["tokens_per_second"] for x in runs if x["config"] == "plain"}
    print("\n| head at synthetic acceptance (governor off) | tok/s median (min-max) | ratio to plain | "
          "acceptance |\n|---|---|---|---|")
    for config in configs:
        rs = [x for x in runs if x["config"] == config]
        print(f"| {config} | {throughput_cells(rs, base)} | "
              f"{statistics.median(x['acceptance_rate'] for x in rs):.2f} |")


def report_processes(model: Path, draft_model: Path | None, tokens: int, threads: int, peer: bool,
                     rounds: int) -> None:
    rates: dict[str, list[float]] = {}
    for r in range(rounds):
        for name, tps in process_round(model, draft_model, tokens, threads, peer, r).items():
            rates.setdefault(name, []).append(tps)
            print(f"round {r}: {name} {tps:.2f} tok/s", flush=True)
    plain = rates["ggspec plain"]
    print("\n| process | tok/s (median) | ratio to ggspec plain (median of rounds) |\n|---|---|---|")
    for name, values in rates.items():
        ratio = statistics.median(v / b for v, b in zip(values, plain))
        print(f"| {name} | {statistics.median(values):.2f} | {ratio:.3f} |")
    if "llama.cpp plain" in rates:
        ratio = statistics.median(a / b for a, b in zip(plain, rates["llama.cpp plain"]))
        print(f"\n- ggspec plain / llama.cpp plain, median of rounds: {ratio:.3f} (goal >= 0.95)")


def arguments(doc: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--rates", type=float, nargs="*", default=[0.5, 0.8])
    p.add_argument("--window", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--no-peer", action="store_true", help="skip llama.cpp's runs")
    return p.parse_args()


def run_parts(args: argparse.Namespace, model: Path, draft_model: Path | None = None) -> None:
    """The three parts on model, its head the file's own or draft_model's."""
    target = ggspec.load(model, n_ctx=1024, n_threads=args.threads)
    if draft_model is not None:
        target.attach_draft_head(draft_model)
    prompt = np.random.default_rng(0).integers(3, target.n_vocab, size=64).tolist()
    print(f"{target}: {target._core.weight_bytes / 2**20:.0f} MiB of weights", flush=True)
    report_verify_costs(target, prompt)
    report_acceptance(target, prompt, args.rates, args.tokens, args.rounds, args.window)
    del target
    report_processes(model, draft_model, args.tokens, args.threads, not args.no_peer, args.rounds)


if __name__ == "__main__":
    run_parts(arguments(__doc__), synthetic_moe())
