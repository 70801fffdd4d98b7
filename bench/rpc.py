"""A target split over two ggml RPC workers on this host, with a network delay.

    python -m bench.rpc [--model M.gguf] [--latency-ms 0,1,5] [--pairs 3] [--tokens 128]
                        [-t 1] [--draft-model D.gguf] [--peer] [--block] [--verify-cost]

Two `ggspec rpc-server -t T` workers, each behind a latency proxy
(bench/latency_proxy.py: every byte waits half the round trip, each way). The
trunk's layers go half to each worker (`--tensor-split 1,1,0`); the client keeps
the embedding and the LM head, and drafters. llama.cpp's `-ngl 99 -ts 1,1`
splits its layers the same way and puts its LM head on the last worker.

Per round trip time, each configuration runs once per pair, in a fresh process,
in an order rotated each pair:
  local          ggspec without workers (no delay applies)
  split          ggspec --rpc, plain
  split+ngram    ggspec --rpc --spec-type ngram
  split+draft    ggspec --rpc --spec-draft-model D (a smaller model of the same vocabulary)
  llama          llama-completion --rpc -ngl 99 -ts 1,1, against llama.cpp's own workers (--peer:
                 the `rpc` peer flavor, built on first use; its protocol is not ggspec's)
  llama+MODE     llama-speculative-simple --rpc ... --spec-type MODE, for each of --llama-modes
                 (default ngram-simple; bench.suite's LLAMA_MODES are all of them)
on the document suite's doc-repeat prompt, greedy. Reported: medians of
generated tokens/s, their ratio to ggspec's split plain, and ggspec's round trips
per generated token (its stats: rpc_round_trips_per_token).

--verify-cost prints what a k-row verify (the LM head on every row) costs against
a one-row step, after a 200-token context, with no delay: local, on two ggspec
workers (their kernels), and on two `--no-kernels` workers (ggml's ops, as on
llama.cpp's workers); medians of --pairs rounds, the order rotated each round.

--block adds a block drafter: bench.dflash_bench's random DFlash2 (tapping target
layers 1, 4 and 6) on its synthetic qwen35 (8 layers, f16), in this process,
local and split, plain and at synthetic acceptance 0.8 (its drafts are random:
bench/synthetic_acceptance.py keeps each with that probability); reported with
the network bytes and round trips per step, the drafter's taps among them.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import ggspec
from bench.latency_proxy import LatencyProxy
from bench.peer.commands import completion_cmd, speculative_cmd
from bench.peer.generation_stats import completion_stats, run_for_stats, speculative_stats
from bench.peer.peer import ensure_built, tool
from bench.spec_run import prompt_ids, prompt_text
from tests.rpc_workers import RpcWorker

PROMPT = "doc-repeat"


def ggspec_run(model: str, prompt_file: Path, tokens: int, threads: int, flags: list[str]) -> dict:
    cmd = [sys.executable, "-m", "ggspec", "generate", "-m", model, "-f", str(prompt_file), "-n", str(tokens),
           "--ignore-eos", "--temp", "0", "-t", str(threads), "-c", "2048", "--json", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"ggspec exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout)
    s = out["stats"]
    return {"tokens_per_second": s["gen_tokens_per_second"], "round_trips_per_token": s["rpc_round_trips_per_token"],
            "tokens": out["tokens"]}


def configs(args, endpoints: list[str], llama_endpoints: list[str], text: str) -> dict:
    split = ["--rpc", ",".join(endpoints), "--tensor-split", "1,1,0"]
    runs = {
        "local": lambda: ggspec_run(args.model, args.prompt_file, args.tokens, args.threads, ["--no-spec"]),
        "split": lambda: ggspec_run(args.model, args.prompt_file, args.tokens, args.threads, [*split, "--no-spec"]),
        "split+ngram": lambda: ggspec_run(args.model, args.prompt_file, args.tokens, args.threads,
                                          [*split, "--spec-type", "ngram"]),
    }
    if args.draft_model:
        runs["split+draft"] = lambda: ggspec_run(args.model, args.prompt_file, args.tokens, args.threads,
                                                 [*split, "--spec-draft-model", args.draft_model])
    if llama_endpoints:
        rpc = ("--rpc", ",".join(llama_endpoints), "-ngl", "99", "-ts", "1,1")
        runs["llama"] = lambda: run_for_stats(
            completion_cmd(args.model, text, args.tokens, args.threads, 2048, flavor="rpc", extra=rpc),
            parse=completion_stats, timeout=900)
        for mode in args.llama_modes.split(","):
            runs[f"llama+{mode}"] = lambda mode=mode: run_for_stats(
                speculative_cmd(args.model, text, mode, args.tokens, args.threads, 2048, flavor="rpc", extra=rpc),
                parse=speculative_stats, timeout=900)
    return runs


def measure(args, latency_ms: float, text: str, log_dir: Path) -> dict[str, list[dict]]:
    with ExitStack() as stack:
        workers = [RpcWorker(log_dir / f"ggspec-worker{i}.log", args.threads, ("--cache", str(log_dir / "cache")))
                   for i in range(2)]
        stack.callback(lambda: [w.stop() for w in workers])
        delay = latency_ms / 2000.0
        endpoints = [stack.enter_context(LatencyProxy(w.port, delay)).endpoint for w in workers]
        llama_endpoints = []
        if args.peer:
            llama = [RpcWorker(log_dir / f"llama-worker{i}.log", args.threads,
                               program=[str(tool("ggml-rpc-server", "rpc"))]) for i in range(2)]
            stack.callback(lambda: [w.stop() for w in llama])
            llama_endpoints = [stack.enter_context(LatencyProxy(w.port, delay)).endpoint for w in llama]
        if args.block:
            block_runs(args, endpoints)
        runs = configs(args, endpoints, llama_endpoints, text)
        names = list(runs)
        results: dict[str, list[dict]] = {name: [] for name in names}
        for pair in range(args.pairs):
            for name in names[pair % len(names):] + names[:pair % len(names)]:
                results[name].append(runs[name]())
                print(f"  {latency_ms} ms rtt, pair {pair}: {name} "
                      f"{results[name][-1]['tokens_per_second']:.1f} tok/s", file=sys.stderr, flush=True)
        return results


def block_runs(args, endpoints: list[str]) -> None:
    from bench.dflash_bench import run, synthetic_drafter
    from bench.qwen35_rollback import synthetic_model
    from ggspec.native import rpc

    prompt = list(range(100, 164))
    print("\n| block drafter (synthetic qwen35, DFlash2) | tok/s (median) | round trips / step | kB / step |")
    print("|---|---|---|---|")
    for place, options in (("local", {}), ("split", dict(rpc=endpoints, tensor_split=[1, 1, 0]))):
        target = ggspec.load(synthetic_model(), n_ctx=1024, n_threads=args.threads, **options)
        target.attach_drafter(synthetic_drafter())
        for config in ("plain", "rate-0.8"):
            rows = []
            for seed in range(args.pairs):
                before = rpc.wire_counters()
                r = run(target, config, prompt, args.tokens, seed)
                moved = rpc.wire_counters() - before
                rows.append((r["tokens_per_second"], moved.round_trips / r["steps"],
                             (moved.bytes_sent + moved.bytes_received) / r["steps"] / 1000))
            print(f"| {place} {config} | {statistics.median(x[0] for x in rows):.1f} "
                  f"| {statistics.median(x[1] for x in rows):.2f} | {statistics.median(x[2] for x in rows):.1f} |")
        del target


VERIFY_ROWS = (1, 2, 4, 8)


def verify_cost(args, log_dir: Path) -> None:
    import numpy as np

    with ExitStack() as stack:
        workers = {flags: [RpcWorker(log_dir / f"verify{i}{flags}.log", args.threads, flags) for i in range(2)]
                   for flags in ((), ("--no-kernels",))}
        stack.callback(lambda: [w.stop() for ws in workers.values() for w in ws])
        places = {"local": {}, "split, ggspec workers": workers[()], "split, --no-kernels workers":
                  workers[("--no-kernels",)]}
        rng = np.random.default_rng(0)
        times: dict[str, dict[int, list[float]]] = {place: {k: [] for k in VERIFY_ROWS} for place in places}
        for round_ in range(args.pairs):
            names = list(places)
            for place in names[round_ % len(names):] + names[:round_ % len(names)]:
                split = dict(rpc=[w.endpoint for w in places[place]], tensor_split=[1, 1, 0]) if places[place] else {}
                target = ggspec.load(args.model, n_threads=args.threads, n_ctx=512, **split)
                target.spec_forward(rng.integers(0, target.n_vocab, 200, dtype=np.int32))
                for k in VERIFY_ROWS:
                    tokens = rng.integers(0, target.n_vocab, k, dtype=np.int32)
                    length, runs = target.cache_seq_len, []
                    for _ in range(4):  # the first builds the graph
                        start = time.perf_counter()
                        target.spec_forward(tokens, all_logits=True, top_k=1)
                        runs.append(time.perf_counter() - start)
                        target.rewind(length)
                    times[place][k].append(1000 * statistics.median(runs[1:]))
                del target
                gc.collect()  # a worker serves one client at a time
    print("\n| k-row verify, no delay | " + " | ".join(f"k={k}" for k in VERIFY_ROWS) + " |")
    print("|---|" + "---|" * len(VERIFY_ROWS))
    for place, by_k in times.items():
        one = statistics.median(by_k[1])
        print(f"| {place} | " + " | ".join(f"{statistics.median(by_k[k]):.1f} ms ({statistics.median(by_k[k]) / one:.2f})"
                                           for k in VERIFY_ROWS) + " |")


def report(latency_ms: float, results: dict[str, list[dict]]) -> None:
    median = {name: statistics.median(r["tokens_per_second"] for r in runs) for name, runs in results.items()}
    print(f"\n### round trip {latency_ms:g} ms\n")
    print("| configuration | tok/s (median) | vs ggspec split | round trips / token |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        trips = statistics.median(r["round_trips_per_token"] for r in runs) if "round_trips_per_token" in runs[0] \
            else float("nan")
        print(f"| {name} | {median[name]:.1f} | {median[name] / median['split']:.2f}x | {trips:.2f} |")
    if "llama" in median:
        best = max((name for name in median if name.startswith("llama+")), key=median.get)
        print(f"\nggspec split / llama.cpp split: {median['split'] / median['llama']:.2f}x; "
              f"ggspec split+ngram / llama.cpp's best n-gram mode ({best}): "
              f"{median['split+ngram'] / median[best]:.2f}x")
    same = {tuple(r["tokens"]) for name, runs in results.items() if "tokens" in runs[0] and "ngram" not in name
            for r in runs}
    print(f"ggspec's plain outputs identical across local and split: {len(same) == 1}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="GGUF (default: the embedded Gemma 3 270M)")
    p.add_argument("--draft-model", help="a smaller GGUF of the same vocabulary: adds split+draft")
    p.add_argument("--latency-ms", default="0,1,5", help="round trip times to add, comma-separated (\"\": none)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=1, help="threads of the client and of each worker")
    p.add_argument("--peer", action="store_true", help="also llama.cpp over its own RPC workers")
    p.add_argument("--block", action="store_true", help="also a block drafter on a synthetic qwen35")
    p.add_argument("--verify-cost", action="store_true", help="also k-row verify costs on the workers, no delay")
    p.add_argument("--llama-modes", default="ngram-simple", help="llama.cpp's n-gram modes to run (--peer)")
    args = p.parse_args()
    model = ggspec.Model(args.model, n_ctx=2048, prefix_cache_mb=None)
    args.model = model.path
    text = prompt_text(model, PROMPT)
    ids = prompt_ids(model, PROMPT)
    if args.peer:
        ensure_built("rpc")
    with tempfile.TemporaryDirectory() as tmp:
        args.prompt_file = Path(tmp) / "prompt.txt"
        args.prompt_file.write_text(text)
        print(f"model {Path(args.model).name}, prompt {PROMPT} ({len(ids)} tokens), {args.tokens} tokens, "
              f"{args.threads} thread(s) per process, pairs {args.pairs}")
        if args.verify_cost:
            verify_cost(args, Path(tmp))
        for latency_ms in (float(x) for x in args.latency_ms.split(",") if x):
            report(latency_ms, measure(args, latency_ms, text, Path(tmp)))


if __name__ == "__main__":
    main()
