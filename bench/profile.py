"""Where a k-row forward spends its time, per op and per weight type, beside llama.cpp.

    python -m bench.profile --model M.gguf [--rows 8] [--context 300] [-t 2] [--seconds 6]
                            [--row-kernels auto] [--flavor usual] [--top 18]

Samples both sides with Linux `perf`: ggspec runs k-row forwards after --context
positions, rewinding after each, and is sampled only once that setup is done: a
verify up to 64 rows (the LM head on every row, argmax in the graph), a prefill
beyond (in 64-row chunks, the LM head on the last row); llama.cpp runs
`llama-bench -p ROWS -n 0` on the same GGUF and threads, at depth 0 (llama-bench
refills its depth before every repetition, which would swamp the samples), so
its attention is cheaper than ggspec's at --context. Each symbol's share of the
samples times the side's ms per forward gives ms per forward. ggml's symbols
name the op (`ggml_compute_forward_*`) and the weight type
(`ggml_vec_dot_q4_K_q8_K`, ...); ggspec's kernels are named only when `_core`
is built unstripped:

    pip install --no-build-isolation --no-deps . -C cmake.define.CMAKE_STRIP=/bin/true
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.peer.peer import ensure_built, tool

SAMPLE_HZ = 1999


PERF_MARGIN_S = 2.0  # perf, recording a pid that exits first, ends with SIGTERM

VERIFY_ROWS = 64  # up to this many rows a forward is a verify, beyond a prefill


def ggspec_loop(model: str, rows: int, context: int, threads: int, seconds: float, row_kernels: str) -> None:
    """The sampled workload: prints "ready" once set up, then {"ms": ms per forward}."""
    import numpy as np

    import ggspec

    target = ggspec.load(model, n_threads=threads, n_ctx=context + rows + 64, row_kernels=row_kernels)
    outputs = {"all_logits": True, "top_k": 1} if rows <= VERIFY_ROWS else {}
    rng = np.random.default_rng(0)
    if context:
        target.spec_forward(rng.integers(3, target.n_vocab, size=context).tolist())
    tokens = rng.integers(3, target.n_vocab, size=rows).tolist()
    target.spec_forward(tokens, **outputs)  # builds the graphs
    target.rewind(context)
    print("ready", flush=True)
    times = []
    end = time.perf_counter() + seconds + PERF_MARGIN_S  # outlives the recording, which then ends cleanly
    while time.perf_counter() < end or len(times) < 3:
        t0 = time.perf_counter()
        target.spec_forward(tokens, **outputs)
        times.append(time.perf_counter() - t0)
        target.rewind(context)
    print(json.dumps({"ms": 1000 * float(np.median(times)), "row_kernels": target.row_kernels}), flush=True)


def perf_record(data: Path, target: list[str]) -> list[str]:
    return ["perf", "record", "-q", "-F", str(SAMPLE_HZ), "-o", str(data), *target]


def record_ggspec(args, data: Path) -> dict:
    loop = subprocess.Popen([sys.executable, "-m", "bench.profile", "ggspec-loop", "--model", args.model,
                             "--rows", str(args.rows), "--context", str(args.context), "--threads",
                             str(args.threads), "--seconds", str(args.seconds), "--row-kernels", args.row_kernels],
                            stdout=subprocess.PIPE, text=True)
    if loop.stdout.readline().strip() != "ready":
        sys.exit("the ggspec side failed before its forwards")
    subprocess.run(perf_record(data, ["-p", str(loop.pid), "--", "sleep", str(args.seconds)]), check=True,
                   capture_output=True)
    out, _ = loop.communicate(timeout=args.seconds + 120)
    return json.loads(out.strip().splitlines()[-1])


def shares(data: Path) -> dict[str, float]:
    """Percent of samples per symbol (symbols of other processes' DSOs merged by name)."""
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,symbol", "--stdio",
                             "-q"], check=True, capture_output=True, text=True).stdout
    out: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.+?)[\s-]*$", line)
        if m:
            dso, symbol = m.group(2), m.group(3)
            if symbol.startswith("0x"):
                symbol = f"({dso})"
            out[symbol if len(symbol) <= 90 else symbol[:87] + "..."] += float(m.group(1))
    return out


def llama_ms(bench_json: str, rows: int) -> float:
    runs = json.loads(bench_json)
    return 1000.0 * rows / runs[0]["avg_ts"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "ggspec-loop":
        p = argparse.ArgumentParser()
        p.add_argument("side")
        for flag in ("--model", "--row-kernels"):
            p.add_argument(flag, required=True)
        for flag in ("--rows", "--context", "--threads"):
            p.add_argument(flag, type=int, required=True)
        p.add_argument("--seconds", type=float, required=True)
        a = p.parse_args()
        ggspec_loop(a.model, a.rows, a.context, a.threads, a.seconds, a.row_kernels)
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--context", type=int, default=300)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=6.0, help="ggspec's sampled run")
    p.add_argument("--row-kernels", default="auto")
    p.add_argument("--flavor", default="usual", help="llama.cpp build: usual or wheel")
    p.add_argument("--top", type=int, default=18)
    args = p.parse_args()
    if not shutil.which("perf"):
        sys.exit("bench.profile needs Linux perf (perf record / perf report)")
    ensure_built(args.flavor)
    with tempfile.TemporaryDirectory() as tmp:
        ours = record_ggspec(args, Path(tmp, "ours"))
        reps = max(3, int(args.seconds * 1000 / max(ours["ms"], 1.0)))
        bench = [str(tool("llama-bench", args.flavor)), "-m", args.model, "-t", str(args.threads), "-p",
                 str(args.rows), "-n", "0", "-r", str(reps), "-o", "json"]
        peer_out = subprocess.run(perf_record(Path(tmp, "peer"), ["--", *bench]), check=True, capture_output=True,
                                  text=True).stdout
        peer_ms = llama_ms(peer_out, args.rows)
        ours_share, peer_share = shares(Path(tmp, "ours")), shares(Path(tmp, "peer"))
    print(f"{args.model}, {args.rows} rows, {args.threads} threads: ggspec (row_kernels {ours['row_kernels']}, "
          f"after {args.context} positions) {ours['ms']:.1f} ms, llama.cpp ({args.flavor}, depth 0) "
          f"{peer_ms:.1f} ms per forward")
    for name, share, ms in (("ggspec", ours_share, ours["ms"]), ("llama.cpp", peer_share, peer_ms)):
        print(f"\n| {name} symbol | % samples | ms per forward |\n|---|---|---|")
        for symbol, pct in sorted(share.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"| `{symbol}` | {pct:.1f} | {pct / 100 * ms:.2f} |")


if __name__ == "__main__":
    main()
