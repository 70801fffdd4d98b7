"""Speculative decoding, ggspec against llama.cpp's n-gram modes, in round-robin runs.

    python -m bench.compare_spec --rounds 3 --out bench/results/spec.json

Per model and prompt, every round runs once each: ggspec plain, ggspec n-gram
(governor on), ggspec with a garbage drafter (governor on) for the prompts where
speculation cannot pay, llama.cpp plain (llama-completion) and each llama.cpp
n-gram mode (llama-speculative-simple --spec-type MODE). Same GGUF, prompt
tokens (checked), thread count, context, greedy, 256 tokens, EOS ignored.
Ratios are per round against ggspec plain. It also checks that ggspec's phase
times (draft, verify, rollback, snapshot, commit) sum to its generation time.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import ggspec
from bench.compare_decode import model_paths
from bench.harness import run_rounds
from bench.peer.commands import COMPLETION_EVAL_TPS
from bench.peer.peer import peer_tokenize, tool
from bench.spec_prompts import CANNOT_PAY, PROMPTS
from bench.spec_run import prompt_ids, prompt_text

LLAMA_MODES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
SPEC_SIMPLE_TPS = r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s"
GGSPEC_TPS = "json:stats.gen_tokens_per_second"
PHASES = ("draft_ms", "verify_ms", "rollback_ms", "snapshot_ms", "commit_ms")


def ggspec_cmd(model: str, prompt: str, speculator: str, n: int, threads: int, ctx: int) -> list[str]:
    return [sys.executable, "-m", "bench.spec_run", "--model", model, "--prompt", prompt, "--speculator",
            speculator, "-n", str(n), "-t", str(threads), "-c", str(ctx)]


def llama_cmd(binary: str, model: str, text: str, n: int, threads: int, ctx: int, extra=()) -> list[str]:
    return [str(tool(binary)), "-m", model, "-p", text, "-n", str(n), "-t", str(threads), "-tb", str(threads),
            "-c", str(ctx), "-fa", "off", "--no-repack", "-fit", "off", "--temp", "0", "--seed", "0",
            "--ignore-eos", *extra]  # fmt: skip


def phase_check(stdout_tail: str) -> dict:
    stats = json.loads(stdout_tail.strip().splitlines()[-1])["stats"]
    phases_ms = sum(stats[p] for p in PHASES)
    return {p: stats[p] for p in PHASES} | {
        "gen_ms": 1000 * stats["gen_seconds"], "phase_sum_over_gen": phases_ms / (1000 * stats["gen_seconds"]),
        "draft_n": stats["draft_n"], "draft_n_accepted": stats["draft_n_accepted"],
        "verify_steps": stats["verify_steps"], "plain_steps": stats["plain_steps"],
        "governor_parked_steps": stats["governor_parked_steps"], "governor_probes": stats["governor_probes"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-n", type=int, default=256)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=2048)
    p.add_argument("--models", nargs="*", help="subset of model names")
    p.add_argument("--prompts", nargs="*", help="subset of prompt names")
    p.add_argument("--modes", nargs="*", default=list(LLAMA_MODES), help="llama.cpp n-gram modes")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up round (the files are cached)")
    p.add_argument("--out", default="bench/results/spec.json")
    args = p.parse_args()

    results = []
    for model_name, path in model_paths().items():
        if args.models and model_name not in args.models:
            continue
        model = ggspec.Model(path, n_ctx=args.ctx, n_threads=args.threads)
        for prompt in PROMPTS:
            if args.prompts and prompt.name not in args.prompts:
                continue
            text = prompt_text(model, prompt.name)
            ids = prompt_ids(model, prompt.name)
            if peer_tokenize(path, text) != ids:
                raise SystemExit(f"{model_name}/{prompt.name}: llama.cpp tokenizes the prompt differently")
            ours = {s: (ggspec_cmd(path, prompt.name, s, args.n, args.threads, args.ctx), GGSPEC_TPS)
                    for s in ["none", "ngram"] + (["garbage"] if prompt.kind == CANNOT_PAY else [])}
            theirs = {"llama.cpp plain": (llama_cmd("llama-completion", path, text, args.n, args.threads, args.ctx,
                                                    ("-no-cnv",)), COMPLETION_EVAL_TPS)}
            theirs |= {f"llama.cpp {m}": (llama_cmd("llama-speculative-simple", path, text, args.n, args.threads,
                                                    args.ctx, ("--spec-type", m)), SPEC_SIMPLE_TPS)
                       for m in args.modes}
            commands = {f"ggspec {k}": v for k, v in ours.items()} | theirs
            print(f"{model_name} / {prompt.name} ({prompt.kind}, {len(ids)} prompt tokens)", flush=True)
            r = run_rounds(commands, rounds=args.rounds, baseline="ggspec none", warmup=not args.no_warmup,
                           progress=lambda line: print("  " + line, flush=True))
            phases = phase_check(r["ggspec ngram"]["last_stdout_tail"])
            for side in r.values():
                side["cmd"] = shlex.join(side["cmd"])
                side.pop("last_stdout_tail")
            results.append({"model": model_name, "prompt": prompt.name, "kind": prompt.kind,
                            "prompt_tokens": len(ids), "runs": r, "ggspec_ngram_phases": phases})
            summary = ", ".join(f"{name} {side['median']:.1f}" + (f" (x{side['ratio_median']:.2f})"
                                                                  if "ratio_median" in side else "")
                                for name, side in r.items())
            print(f"  => {summary}\n  => ngram phases sum to {phases['phase_sum_over_gen']:.3f} of generation time",
                  flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
