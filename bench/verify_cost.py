"""What a k-row verify costs against a one-row step, on each multi-row kernel path.

    python -m bench.verify_cost --model M.gguf [-t 2] [--context 300] [--repeats 5] [--paths vnni,avx2,off]
                                [--rows 1 2 4 8 16 32 64]

Each path loads the model, decodes the same context, then times a one-row step and
one k-row verify per k (LM head on every row, argmax in the graph, then a rewind).
Rounds rotate the order of the paths so that drift favours none. Prints a Markdown
table of medians: ms per verify and its cost in one-row steps (the speculation
lever: a draft must land more tokens per verify than that ratio to pay), per path.
The argmax ids of the paths with ggml's bits (all but vnni-block) are checked equal.
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
                 verifies: dict[int, np.ndarray]) -> dict[int, tuple[float, np.ndarray]]:
    """One path at a time: two loaded targets would each keep a spinning threadpool."""
    target = ggspec.load(args.model, n_threads=args.threads, n_ctx=args.context + 128, row_kernels=path)
    target.spec_forward(context)
    out = {}
    for k, tokens in verifies.items():
        time_verify(target, tokens)  # builds the k-row graph
        out[k] = time_verify(target, tokens)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--context", type=int, default=300, help="positions decoded before the verifies")
    p.add_argument("--repeats", type=int, default=5, help="rounds, each path once per round")
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
    times = {path: {k: [] for k in rows} for path in paths}
    ids: dict[str, dict[int, np.ndarray]] = {}
    for round_ in range(args.repeats):
        for path in paths[round_ % len(paths):] + paths[:round_ % len(paths)]:
            results = measure_path(args, path, context, verifies)
            for k in rows:
                times[path][k].append(results[k][0] * 1e3)
            ids[path] = {k: results[k][1] for k in rows}
    ggml_bits = [path for path in paths if path != "vnni-block"]  # its block order has other bits
    for path in ggml_bits[1:]:
        for k in rows:
            if not np.array_equal(ids[path][k], ids[ggml_bits[0]][k]):
                raise SystemExit(f"argmax differs between row_kernels {ggml_bits[0]} and {path} at {k} rows")

    print(f"{args.model}, {args.threads} threads, median of {args.repeats}")
    print("| rows | " + " | ".join(f"{p} ms | {p} steps" for p in paths) + " |")
    print("|---|" + "---|---|" * len(paths))
    for k in rows:
        cells = []
        for path in paths:
            ms, one = statistics.median(times[path][k]), statistics.median(times[path][1])
            cells.append(f"{ms:.1f} | {ms / one:.2f}")
        print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
