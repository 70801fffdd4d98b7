"""What a k-row verify costs against a one-row step, on each multi-row kernel path.

    python -m bench.verify_cost --model M.gguf [-t 2] [--context 300] [--repeats 5] [--samples 9]
                                [--paths vnni,avx2,off] [--rows 1 2 4 8 16 32 64]

Each path loads the model, decodes the same context, then times one-row steps
and k-row verifies (LM head on every row, argmax in the graph, then a rewind),
--samples of each, interleaved: one of every size, then the next round of them.
That pairs each verify with one-row steps taken moments before and after it, so
that the host's drift (±15% between runs here) falls on both sides of the
ratio. A round loads each path once; rounds rotate the order of the paths so
that drift favours none. Prints a Markdown table: ms per verify (median of every
sample) and its cost in one-row steps (the median over rounds of each round's
median k-row time over its median one-row time, then the least and most of the
rounds' ratios: the host's slow phases slow the compute-bound verify more than
the step), the speculation lever: a draft must land more tokens per verify than
that ratio to pay. The argmax ids of the paths with ggml's bits (all but
vnni-block) are checked equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ggspec
from ggspec import _core

ROWS = (1, 2, 4, 8, 16, 32, 64)


def time_verify(target: ggspec.Target, tokens: np.ndarray) -> tuple[float, np.ndarray]:
    length = target.cache_seq_len
    t0 = time.perf_counter()
    ids = target.spec_forward(tokens, all_logits=True, top_k=1).ids
    elapsed = time.perf_counter() - t0
    target.rewind(length)
    return elapsed, ids


def measure_path(args, path: str, context: np.ndarray,
                 verifies: dict[int, np.ndarray]) -> tuple[dict[int, list[float]], dict[int, np.ndarray]]:
    """One path at a time: two loaded targets would each keep a spinning threadpool."""
    target = ggspec.load(args.model, n_threads=args.threads, n_ctx=args.context + 128, row_kernels=path)
    target.spec_forward(context)
    times: dict[int, list[float]] = {k: [] for k in verifies}
    ids = {}
    for k, tokens in verifies.items():
        time_verify(target, tokens)  # builds the k-row graph
    for _ in range(args.samples):
        for k, tokens in verifies.items():
            elapsed, ids[k] = time_verify(target, tokens)
            times[k].append(elapsed * 1e3)
    return times, ids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--context", type=int, default=300, help="positions decoded before the verifies")
    p.add_argument("--repeats", type=int, default=5, help="rounds, each path loaded once per round")
    p.add_argument("--samples", type=int, default=9, help="timings of each size per round, interleaved")
    p.add_argument("--paths", default=",".join([*_core.row_kernel_paths(), "off"]),
                   help="comma-separated row_kernels values (default: every path this CPU runs, and off)")
    p.add_argument("--rows", type=int, nargs="+", default=list(ROWS), help="verify sizes (1 is always timed)")
    args = p.parse_args()
    paths = args.paths.split(",")
    rows = sorted({1, *args.rows})

    n_vocab = ggspec.load(args.model, n_ctx=16).n_vocab
    rng = np.random.default_rng(0)
    context = rng.integers(0, n_vocab, args.context, dtype=np.int32)
    verifies = {k: rng.integers(0, n_vocab, k, dtype=np.int32) for k in rows}
    times = {path: {k: [] for k in rows} for path in paths}  # every sample, ms
    ratios = {path: {k: [] for k in rows} for path in paths}  # each round's, in one-row steps
    ids: dict[str, dict[int, np.ndarray]] = {}
    for round_ in range(args.repeats):
        for path in paths[round_ % len(paths):] + paths[:round_ % len(paths)]:
            samples, ids[path] = measure_path(args, path, context, verifies)
            one = statistics.median(samples[1])
            for k in rows:
                times[path][k] += samples[k]
                ratios[path][k].append(statistics.median(samples[k]) / one)
    ggml_bits = [path for path in paths if path != "vnni-block"]  # its block order has other bits
    for path in ggml_bits[1:]:
        for k in rows:
            if not np.array_equal(ids[path][k], ids[ggml_bits[0]][k]):
                raise SystemExit(f"argmax differs between row_kernels {ggml_bits[0]} and {path} at {k} rows")

    print(f"{args.model}, {args.threads} threads, {args.repeats} rounds of {args.samples} samples")
    print("| rows | " + " | ".join(f"{p} ms | {p} steps | rounds" for p in paths) + " |")
    print("|---|" + "---|---|---|" * len(paths))
    for k in rows:
        cells = [f"{statistics.median(times[p][k]):.1f} | {statistics.median(ratios[p][k]):.2f} | "
                 f"{min(ratios[p][k]):.2f}-{max(ratios[p][k]):.2f}" for p in paths]
        print(f"| {k} | " + " | ".join(cells) + " |")
    print("steps: the median over rounds of each round's median k-row time / median one-row time; "
          "rounds: the least and most of those")


if __name__ == "__main__":
    main()
