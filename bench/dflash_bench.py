"""A DFlash2 block drafter on a synthetic qwen35 target: pass costs, lattice
readback, verify cost by window, and tokens/s at synthetic acceptance.

    python -m bench.dflash_bench [--rounds 3] [--tokens 128] [--rates 0.8,0.5,0] [-t 2]
                                 [--row-kernels auto] [--out runs.json]

The target is bench.qwen35_rollback's synthetic qwen35 (298 MiB f16); the drafter,
written once next to it, is a random DFlash2 (2 layers, block 8, conv kernel 4,
selector rank 32, top-k 8, 73 MiB f16) tapping target layers 1, 4 and 6. Its
drafts are random, so the verify keeps each draft position with probability
`--rates` (bench/synthetic_acceptance.py); `--row-kernels off` gives ggml's
products, as before ggspec had kernels for F16. Prints:

  - passes A+B (inject) and pass C (draft block) ms per step;
  - pass C's host readback bytes per draft against the lattice size
    4 * (2 * k * g + k * k * (g - 1)) for k candidates and that draft's window g
    (a governor probe drafts a window of 2);
  - the target's verify ms by window (1..8 rows, medians);
  - tokens/s for plain and each acceptance rate (governor on), in rounds
    that rotate the order, with the median per-round ratio to plain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import ggspec
from bench.decode import timed_generation
from bench.harness import rotated, synthetic_file, throughput_cells
from bench.qwen35_rollback import synthetic_model
from bench.synthetic_acceptance import SyntheticAcceptance
from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.sampling import Sampler, SamplerConfig
from ggspec.speculators.block import BlockDraftSpeculator

DRAFTER = dict(n_vocab=32000, n_embd=1024, n_layer=2, n_head=8, n_head_kv=2, head_dim=128, n_ff=3072,
               target_layers=(1, 4, 6), block_size=8,
               dflash2=dict(conv_kernel_size=4, conv_group_size=64, selector_rank=32, selector_top_k=8))


def synthetic_drafter() -> Path:
    from tests.fixtures.tiny_dflash import write_tiny_dflash

    return synthetic_file("dflash2-synthetic-f16.gguf", lambda path: write_tiny_dflash(path, dtype="f16", **DRAFTER))


def lattice_bytes(k: int, window: int) -> int:
    """k candidate ids and k scores per MASK row, k * k pair scores per row after the first."""
    return 4 * (2 * k * window + k * k * (window - 1))


class CheckedDrafter:
    """The drafter, noting what each pass C copied to the host and its lattice's size."""

    def __init__(self, drafter, k: int):
        self.drafter, self.k, self.drafts = drafter, k, []

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def draft(self, anchor, position, n_block, top_k):
        before = self.drafter.readback_bytes
        out = self.drafter.draft(anchor, position, n_block, top_k)
        self.drafts.append((self.drafter.readback_bytes - before, lattice_bytes(self.k, n_block - 1), n_block - 1))
        return out


def run(target: ggspec.Target, config: str, prompt: list[int], n: int, seed: int) -> dict:
    target.reset()
    sampler = Sampler(SamplerConfig(temperature=0), target.n_vocab)
    drafter = CheckedDrafter(target.block_drafter, DRAFTER["dflash2"]["selector_top_k"])
    if config == "plain":
        execution = SpeculativeExecution(target, sampler)
    else:
        speculator = BlockDraftSpeculator(drafter, min_draft_prob=0.0)
        execution = SyntheticAcceptance(target, sampler, speculator, governor=SpeculationCostGovernor(),
                                        rate=float(config.split("-")[1]), seed=seed)
    seconds0, readback0 = drafter.seconds, drafter.readback_bytes
    tokens, _, elapsed = timed_generation(execution, prompt, n)
    stats = execution.stats.as_dict()
    n_steps = max(1, stats["verify_steps"] + stats["plain_steps"])
    seconds = {k: v - seconds0[k] for k, v in drafter.seconds.items()}
    return {
        "config": config, "seed": seed, "tokens_per_second": (len(tokens) - 1) / elapsed,
        "steps": n_steps, "verify_steps": stats["verify_steps"], "draft_n": stats["draft_n"],
        "acceptance_rate": stats["acceptance_rate"], "governor_parked_steps": stats["governor_parked_steps"],
        "inject_ms_per_step": 1000 * seconds["inject"] / n_steps,
        "draft_block_ms_per_draft": 1000 * seconds["draft"] / max(1, stats["verify_steps"]),
        "readback_bytes": drafter.readback_bytes - readback0,
        "drafts": drafter.drafts,  # (bytes read back, lattice size, window) per pass C
        "verify_ms_per_step": stats["verify_ms"] / n_steps,
    }


def verify_cost(target: ggspec.Target, prompt: list[int], repeats: int = 5) -> dict[int, float]:
    """Median ms of a k-row verify (LM head on every row, argmax in the graph) after the prompt."""
    rng = np.random.default_rng(1)
    out = {}
    for k in range(1, 9):
        times = []
        for _ in range(repeats + 1):  # the first builds the graph
            target.reset()
            target.spec_forward(prompt)
            rows = rng.integers(3, target.n_vocab, size=k).tolist()
            t0 = time.perf_counter()
            target.spec_forward(rows, all_logits=True, top_k=1)
            times.append(time.perf_counter() - t0)
        out[k] = 1000 * statistics.median(times[1:])
    return out


def report(runs: list[dict], verify_ms: dict[int, float], configs: list[str]) -> str:
    by = {c: [r for r in runs if r["config"] == c] for c in configs}
    plain = {r["seed"]: r["tokens_per_second"] for r in by["plain"]}
    lines = ["| configuration | tok/s median (min-max) | ratio to plain | acceptance | governor parked steps "
             "| A+B ms/step | C ms/draft | readback bytes/draft |", "|---" * 8 + "|"]
    for config, rs in by.items():
        drafts = [d for r in rs for d in r["drafts"]]
        per_draft = sum(d[0] for d in drafts) / len(drafts) if drafts else 0.0
        lines.append(f"| {config} | {throughput_cells(rs, plain)} "
                     f"| {statistics.median(r['acceptance_rate'] for r in rs):.2f} "
                     f"| {statistics.median(r['governor_parked_steps'] for r in rs):.0f} "
                     f"| {statistics.median(r['inject_ms_per_step'] for r in rs):.2f} "
                     f"| {statistics.median(r['draft_block_ms_per_draft'] for r in rs):.2f} | {per_draft:.0f} |")
    drafts = [d for r in runs for d in r["drafts"]]
    full = [d for d in drafts if d[2] == max(x[2] for x in drafts)]
    lines += ["", f"- pass C read back exactly its lattice on {sum(d[0] == d[1] for d in drafts)} of {len(drafts)} "
                  f"drafts ({len(full)} full windows of {full[0][2]}: {full[0][1]} bytes each; the rest are "
                  "governor probes, whose window is 2)",
              "- verify ms by window (rows = window + 1): "
              + ", ".join(f"{k} rows {ms:.1f}" for k, ms in verify_ms.items())]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rates", default="0.8,0.5,0", help="synthetic acceptance rates")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--row-kernels", default="auto")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    configs = ["plain", *(f"accept-{float(r):g}" for r in args.rates.split(","))]

    target = ggspec.load(synthetic_model(), n_ctx=1024, n_threads=args.threads, row_kernels=args.row_kernels)
    drafter = target.attach_drafter(synthetic_drafter())
    prompt = np.random.default_rng(0).integers(3, target.n_vocab, size=64).tolist()
    print(f"{target} (row_kernels {target.row_kernels}); drafter {drafter.path} (DFlash2, block {drafter.block_size}, taps {drafter.target_layers})",
          flush=True)
    verify_ms = verify_cost(target, prompt)
    for config in configs:
        run(target, config, prompt, 16, seed=2**31)  # warm-up: builds the graphs
    runs = []
    for r in range(args.rounds):
        round_runs = [run(target, c, prompt, args.tokens, seed=r) for c in rotated(configs, r)]
        runs += round_runs
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{x['config']} {x['tokens_per_second']:.1f}"
                                                         for x in round_runs), flush=True)
    print(report(runs, verify_ms, configs))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": runs, "verify_ms": verify_ms}, indent=1))


if __name__ == "__main__":
    main()
