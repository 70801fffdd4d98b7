"""Rollback and catch-up folding on a synthetic qwen35, at synthetic acceptance.

    python -m bench.qwen35_rollback [--rounds 5] [--tokens 128] [--rate 0.5] [--window 3] [-t 2]
                                    [--row-kernels auto]
                                    [--configs snapshots,unfolded] [--out runs.json]

A random qwen35 of about 300 MB (f16; 6 GatedDeltaNet + 2 attention layers and an
MTP block) is written once under ~/.cache/ggspec/bench. Its MTP head drafts `window`
tokens per step and the verify keeps each with probability `rate`
(bench/synthetic_acceptance.py), so every configuration sees the same drafts and
the same accept/reject pattern in a round. Configurations, in an order rotated
each round:

  snapshots        the default: per-row state snapshots, the kept one copied on the device
  reforward        GGSPEC_Q35_VERIFY_SNAPSHOTS=0: snapshot, restore, re-forward the kept rows
  snapshots-host   GGSPEC_Q35_VERIFY_DEFER_STATE=0: the same snapshots, copied through the host
  unfolded         the default path with the catch-up unfolded (GGSPEC_MTP_FOLD_CATCHUP=0 in the CLI)
  plain            no speculation (for scale)

Prints per configuration: median tokens/s (min-max), the median per-round ratio to
the default, and per step (medians over runs): draft, verify, rollback, snapshot ms,
re-forwards, recurrent-state bytes through the host, draft-head graph calls per
verify; then the acceptance checks. --out writes every run as JSON. The governor is
off: this measures the paths, not whether speculation pays at this acceptance.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

import ggspec
from bench.decode import timed_generation
from bench.harness import rotated, synthetic_file, throughput_cells
from bench.synthetic_acceptance import SyntheticAcceptance
from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.sampling import Sampler, SamplerConfig
from ggspec.speculators.draft_head import DraftHeadSpeculator

CONFIGS = ("snapshots", "reforward", "snapshots-host", "unfolded", "plain")
SHAPE = dict(n_vocab=32000, n_embd=1024, n_layer=8, n_nextn=1, n_ff=3072, n_head=8, n_head_kv=2, head_dim=128,
             n_rot=32, rope_sections=(6, 5, 5, 0), ssm_state=128, ssm_groups=4, ssm_v_heads=8, context_length=4096)


def synthetic_model() -> Path:
    from tests.fixtures.tiny_qwen35 import write_tiny_qwen35

    return synthetic_file("qwen35-synthetic-f16.gguf", lambda path: write_tiny_qwen35(path, dtype="f16", **SHAPE))


def run(target: ggspec.Target, config: str, prompt: list[int], n: int, window: int, rate: float, seed: int) -> dict:
    target.reset()
    target.set_recurrent_rollback("snapshots" if config in ("unfolded", "plain") else config)
    sampler = Sampler(SamplerConfig(temperature=0), target.n_vocab)
    if config == "plain":
        execution = SpeculativeExecution(target, sampler)
    else:
        speculator = DraftHeadSpeculator(target.draft_head, window, min_draft_prob=0.0,
                                         fold_catch_up=config != "unfolded")
        execution = SyntheticAcceptance(target, sampler, speculator, rate=rate, seed=seed)
    head_calls = target.draft_head.graph_calls
    tokens, _, seconds = timed_generation(execution, prompt, n)
    stats = execution.stats.as_dict()
    n_steps = max(1, stats["verify_steps"] + stats["plain_steps"])
    return {
        "config": config, "seed": seed, "tokens": tokens,
        "tokens_per_second": (len(tokens) - 1) / seconds,
        "steps": n_steps, "verify_steps": stats["verify_steps"],
        "acceptance_rate": stats["acceptance_rate"],
        **{f"{phase}_ms_per_step": stats[f"{phase}_ms"] / n_steps
           for phase in ("draft", "verify", "rollback", "snapshot", "commit")},
        "reforwards_per_step": stats["reforwards"] / n_steps,
        "state_bytes_per_step": stats["state_transfer_bytes"] / n_steps,
        "head_calls_per_verify": ((target.draft_head.graph_calls - head_calls) / stats["verify_steps"]
                                  if stats["verify_steps"] else 0.0),
    }


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(runs: list[dict], configs: tuple[str, ...]) -> str:
    by_config = {c: [r for r in runs if r["config"] == c] for c in configs}
    base = {r["seed"]: r["tokens_per_second"] for r in by_config["snapshots"]}
    lines = ["| configuration | tok/s median (min-max) | ratio to default | draft ms | verify ms | rollback ms "
             "| snapshot ms | re-forwards | state bytes | head calls / verify |", "|---" * 10 + "|"]
    for config, rs in by_config.items():
        lines.append(f"| {config} | {throughput_cells(rs, base)} "
                     f"| {median(rs, 'draft_ms_per_step'):.2f} | {median(rs, 'verify_ms_per_step'):.2f} "
                     f"| {median(rs, 'rollback_ms_per_step'):.3f} "
                     f"| {median(rs, 'snapshot_ms_per_step'):.3f} | {median(rs, 'reforwards_per_step'):.2f} "
                     f"| {median(rs, 'state_bytes_per_step'):.0f} | {median(rs, 'head_calls_per_verify'):.2f} |")
    default = by_config["snapshots"]
    paired = lambda rs: statistics.median(base[r["seed"]] / r["tokens_per_second"] for r in rs)  # noqa: E731
    rollback_share = median(default, "rollback_ms_per_step") / median(default, "verify_ms_per_step")
    lines += ["", f"- default rollback / verify ms: {100 * rollback_share:.2f}% (criterion <= 5%)"]
    if "reforward" in by_config:
        lines.append(f"- default vs re-forward tokens/s, median paired ratio: {paired(by_config['reforward']):.3f} "
                     "(criterion >= 1.10)")
    if "unfolded" in by_config:
        unfolded = by_config["unfolded"]
        calls = [median(rs, "head_calls_per_verify") for rs in (default, unfolded)]
        lines.append(f"- head graph calls per verify, folded vs unfolded: {calls[0]:.2f} vs {calls[1]:.2f}; "
                     f"folded / unfolded tokens/s median paired ratio: {paired(unfolded):.3f} (criterion >= 0.98)")
    lines.append(f"- acceptance rate (synthetic, {default[0]['steps']} steps a run): "
                 f"{median(default, 'acceptance_rate'):.3f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rate", type=float, default=0.5)
    p.add_argument("--window", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--row-kernels", default="auto", help="off: ggml's products, as before the F16 kernels")
    p.add_argument("--configs", default=",".join(CONFIGS), help="a comma-separated subset; snapshots is always run")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    configs = tuple(c for c in CONFIGS if c == "snapshots" or c in args.configs.split(","))

    target = ggspec.load(synthetic_model(), n_ctx=1024, n_threads=args.threads, row_kernels=args.row_kernels)
    prompt = np.random.default_rng(0).integers(3, target.n_vocab, size=64).tolist()
    print(f"{target}: {target._core.weight_bytes / 2**20:.0f} MiB of weights", flush=True)
    for config in configs:  # warm-up: builds every graph shape once
        run(target, config, prompt, 16, args.window, args.rate, seed=-1 % 2**32)
    runs = []
    for r in range(args.rounds):
        round_runs = [run(target, c, prompt, args.tokens, args.window, args.rate, seed=r) for c in rotated(configs, r)]
        spec_tokens = {tuple(x["tokens"]) for x in round_runs if x["config"] != "plain"}
        if len(spec_tokens) != 1:
            raise SystemExit(f"round {r}: the speculative configurations emitted different tokens")
        runs += round_runs
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{x['config']} {x['tokens_per_second']:.1f}"
                                                         for x in round_runs), flush=True)
    print(report(runs, configs))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
