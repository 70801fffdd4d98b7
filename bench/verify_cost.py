"""What a k-row verify costs, with ggspec's multi-row LM-head kernel and without it.

    python -m bench.verify_cost --model M.gguf [-t 2] [--context 300] [--repeats 5]

Each side decodes the same context, then times one k-row verify forward per k (LM
head on every row, argmax in the graph, then a rewind); rounds alternate which side
goes first. Prints a Markdown table of medians: ms per verify and
per row, and the kernel's speedup. The two sides' argmax ids are checked equal.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ggspec
from bench.harness import alternating

ROWS = (1, 2, 3, 4, 8, 16, 32, 64)


def time_verify(target: ggspec.Target, tokens: np.ndarray) -> tuple[float, np.ndarray]:
    length = target.cache_seq_len
    t0 = time.perf_counter()
    ids = target.spec_forward(tokens, all_logits=True, top_k=1).ids
    elapsed = time.perf_counter() - t0
    target.rewind(length)
    return elapsed, ids


def measure_side(args, kernel: bool, context: np.ndarray,
                 verifies: dict[int, np.ndarray]) -> dict[int, tuple[float, np.ndarray]]:
    """One side at a time: two loaded targets would each keep a spinning threadpool."""
    target = ggspec.load(args.model, n_threads=args.threads, n_ctx=args.context + 128, row_kernels=kernel)
    if kernel and not target.lm_head_row_kernel:
        print("note: the multi-row kernel is not usable here (CPU or LM-head type); both sides run ggml_mul_mat")
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
    p.add_argument("--repeats", type=int, default=5, help="rounds, alternating which side runs first")
    args = p.parse_args()

    n_vocab = ggspec.load(args.model, n_ctx=16).n_vocab
    rng = np.random.default_rng(0)
    context = rng.integers(0, n_vocab, args.context, dtype=np.int32)
    verifies = {k: rng.integers(0, n_vocab, k, dtype=np.int32) for k in ROWS}
    times: dict[bool, dict[int, list[float]]] = {False: {k: [] for k in ROWS}, True: {k: [] for k in ROWS}}
    ids: dict[bool, dict[int, np.ndarray]] = {}
    for _, kernel in alternating(args.repeats, False, True):
        results = measure_side(args, kernel, context, verifies)
        for k in ROWS:
            times[kernel][k].append(results[k][0] * 1e3)
        ids[kernel] = {k: results[k][1] for k in ROWS}
        for k in ROWS:
            if len(ids) == 2 and not np.array_equal(ids[False][k], ids[True][k]):
                raise SystemExit(f"argmax differs between the kernel and ggml_mul_mat at {k} rows")

    print("| rows | ggml ms | ms/row | kernel ms | ms/row | speedup |\n|---|---|---|---|---|---|")
    for k in ROWS:
        a, b = statistics.median(times[False][k]), statistics.median(times[True][k])
        print(f"| {k} | {a:.1f} | {a / k:.1f} | {b:.1f} | {b / k:.1f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
