"""Prompt processing (prefill) against llama-bench on the same GGUF and threads.

    python -m bench.prefill --model M.gguf [-p 512,2048] [-t 2] [--reps 5] [--pairs 3]
                            [--row-kernels auto] [--flavors wheel,usual] [--fa default,0]

For each prompt length, ggspec prefills a random prompt (`row_kernels` as given)
and llama-bench runs `-p P -n 0`, in paired alternating runs (bench.harness); each
run reports the mean tokens/s of its repetitions on both sides (llama-bench's own
statistic, `avg_ts`). llama.cpp runs in each flavour asked for (`wheel`: the
like-for-like build, `usual`: OpenMP, llamafile and repacking as its users build
it) and with flash attention at its default and at `-fa 0`. Prints a Markdown
table of medians and the ratio ggspec / llama.cpp per pair's median.

    python -m bench.prefill ggspec-side --model M.gguf -p 512 --reps 5   # one ggspec run, JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from bench.harness import run_pairs
from bench.peer.peer import ensure_built, tool


def ggspec_side(model: str, n_prompt: int, threads: int, reps: int, row_kernels: str) -> dict:
    import ggspec

    target = ggspec.load(model, n_threads=threads, n_ctx=n_prompt + 16, row_kernels=row_kernels)
    tokens = np.random.default_rng(0).integers(0, target.n_vocab, n_prompt, dtype=np.int32)
    target.spec_forward(tokens)  # builds the chunk graphs, as llama-bench's warm-up run does
    speeds = []
    for _ in range(reps):
        target.reset()
        t0 = time.perf_counter()
        target.spec_forward(tokens)
        speeds.append(n_prompt / (time.perf_counter() - t0))
    return {"avg_ts": statistics.fmean(speeds), "row_kernels": target.row_kernels}


def llama_bench_cmd(model: str, n_prompt: int, threads: int, reps: int, flavor: str, fa: str) -> list[str]:
    cmd = [str(tool("llama-bench", flavor)), "-m", model, "-t", str(threads), "-p", str(n_prompt), "-n", "0",
           "-r", str(reps), "-o", "json"]
    return cmd if fa == "default" else [*cmd, "-fa", fa]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "ggspec-side":
        p = argparse.ArgumentParser()
        p.add_argument("side")
        p.add_argument("--model", required=True)
        p.add_argument("-p", type=int, required=True)
        p.add_argument("-t", type=int, default=2)
        p.add_argument("--reps", type=int, default=5)
        p.add_argument("--row-kernels", default="auto")
        a = p.parse_args()
        print(json.dumps(ggspec_side(a.model, a.p, a.t, a.reps, a.row_kernels)))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("-p", default="512,2048", help="prompt lengths")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5, help="repetitions per run, as llama-bench's -r")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--row-kernels", default="auto")
    p.add_argument("--flavors", default="wheel,usual")
    p.add_argument("--fa", default="default,0", help="llama.cpp flash attention: default and/or 0, 1")
    args = p.parse_args()
    flavors = args.flavors.split(",")
    for flavor in flavors:
        ensure_built(flavor)
    print(f"{args.model}, {args.threads} threads, row_kernels {args.row_kernels}, medians of {args.pairs} pairs")
    print("| prompt | llama.cpp | fa | ggspec tok/s | llama.cpp tok/s | ggspec / llama.cpp |\n|---|---|---|---|---|---|")
    for n_prompt in (int(n) for n in args.p.split(",")):
        ours = [sys.executable, "-m", "bench.prefill", "ggspec-side", "--model", args.model, "-p", str(n_prompt),
                "-t", str(args.threads), "--reps", str(args.reps), "--row-kernels", args.row_kernels]
        for flavor in flavors:
            for fa in args.fa.split(","):
                theirs = llama_bench_cmd(args.model, n_prompt, args.threads, args.reps, flavor, fa)
                r = run_pairs(ours, theirs, pairs=args.pairs, metric_a="json:avg_ts", metric_b="json:0.avg_ts")
                print(f"| {n_prompt} | {flavor} | {fa} | {r['a']['median']:.1f} | {r['b']['median']:.1f} | "
                      f"{1 / r['ratio_median']:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
