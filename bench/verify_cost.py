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
rounds' ratios), the speculation lever: a draft must land more tokens per verify
than that ratio to pay. The argmax ids of the paths with ggml's bits (all but
vnni-block) are checked equal.

Each set of samples (one of every size) is tagged with how far apart the host
has put the first two CPUs this process may run on: a cache line's round trip
between threads pinned there (`_core.core_round_trip_ns`, after 5 ms idle),
then one untimed one-row step (the first forward after the probe waits on its
threads). On a VM the vCPUs move: beside a loaded target this 2-vCPU guest
reads about 105, 300 or 550-850 ns, switching every few seconds, and at the
farthest its verifies are slower (SmolLM2 `vnni-block`: 7.95 against 6.40 ms)
while its one-row steps are not (3.61 against 3.94). A second table gives the
cost in steps for each cluster of round trips (the sets' median k-row time
over their median one-row time), with the number of sets.
"""

from __future__ import annotations

import argparse
import os
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


def placement_gap() -> float:
    """The round trip in ns between the first two CPUs this process may use (0 with fewer), after
    5 ms idle: a target's threads poll for work for a while after a forward, and the probe's
    threads then share their CPUs (right after a forward it read 90-110 ns where 5 ms later it
    read 565)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return 0.0
    time.sleep(0.005)
    return max(0.0, _core.core_round_trip_ns(cpus[0], cpus[1]))


def measure_path(args, path: str, context: np.ndarray,
                 verifies: dict[int, np.ndarray]) -> tuple[list[tuple[float, dict[int, float]]], dict[int, np.ndarray]]:
    """One path at a time: two loaded targets would each keep a spinning threadpool.
    Returns each set's (round trip ns, {rows: ms}) and the last argmax ids."""
    target = ggspec.load(args.model, n_threads=args.threads, n_ctx=args.context + 128, row_kernels=path)
    target.spec_forward(context)
    ids = {}
    for k, tokens in verifies.items():
        time_verify(target, tokens)  # builds the k-row graph
    sets = []
    for _ in range(args.samples):
        gap = placement_gap()
        time_verify(target, verifies[1])  # untimed: the first forward after the probe waits on its threads
        times = {}
        for k, tokens in verifies.items():
            elapsed, ids[k] = time_verify(target, tokens)
            times[k] = elapsed * 1e3
        sets.append((gap, times))
    return sets, ids


def placements(gaps: list[float]) -> list[tuple[float, float]]:
    """The round trips' clusters, as (least, most): sorted, a cluster ends where
    the next value is more than 1.6 times the last (on this VM about 105, 300
    and 550-850 ns), or more than twice its least: round trips spread evenly
    from 82 to 1821 ns (a noisy neighbour) would otherwise chain into one."""
    clusters: list[list[float]] = []
    for gap in sorted(gaps):
        if clusters and gap <= 1.6 * clusters[-1][-1] and gap <= 2 * clusters[-1][0]:
            clusters[-1].append(gap)
        else:
            clusters.append([gap])
    return [(c[0], c[-1]) for c in clusters]


def placement_cost(sets: list[tuple[float, dict[int, float]]], k: int, span: tuple[float, float]) -> str:
    """k rows in one-row steps over the sets whose round trip falls in span:
    their median k-row time over their median one-row time, and how many."""
    chosen = [times for gap, times in sets if span[0] <= gap <= span[1]]
    if not chosen:
        return "- (0)"
    return f"{statistics.median(t[k] for t in chosen) / statistics.median(t[1] for t in chosen):.2f} ({len(chosen)})"


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
    sets: dict[str, list[tuple[float, dict[int, float]]]] = {path: [] for path in paths}
    ratios = {path: {k: [] for k in rows} for path in paths}  # each round's, in one-row steps
    ids: dict[str, dict[int, np.ndarray]] = {}
    for round_ in range(args.repeats):
        for path in paths[round_ % len(paths):] + paths[:round_ % len(paths)]:
            samples, ids[path] = measure_path(args, path, context, verifies)
            sets[path] += samples
            one = statistics.median(t[1] for _, t in samples)
            for k in rows:
                ratios[path][k].append(statistics.median(t[k] for _, t in samples) / one)
    ggml_bits = [path for path in paths if path != "vnni-block"]  # its block order has other bits
    for path in ggml_bits[1:]:
        for k in rows:
            if not np.array_equal(ids[path][k], ids[ggml_bits[0]][k]):
                raise SystemExit(f"argmax differs between row_kernels {ggml_bits[0]} and {path} at {k} rows")

    print(f"{args.model}, {args.threads} threads, {args.repeats} rounds of {args.samples} samples")
    print("| rows | " + " | ".join(f"{p} ms | {p} steps | rounds" for p in paths) + " |")
    print("|---|" + "---|---|---|" * len(paths))
    for k in rows:
        cells = [f"{statistics.median(t[k] for _, t in sets[p]):.1f} | {statistics.median(ratios[p][k]):.2f} | "
                 f"{min(ratios[p][k]):.2f}-{max(ratios[p][k]):.2f}" for p in paths]
        print(f"| {k} | " + " | ".join(cells) + " |")
    print("steps: the median over rounds of each round's median k-row time / median one-row time; rounds: the least "
          "and most of those")
    spans = placements([gap for p in paths for gap, _ in sets[p]])
    print("\n| placement (round trip) | " + " | ".join(f"{p} steps at {k} rows" for p in paths for k in rows[1:]) + " |")
    print("|---|" + "---|" * (len(paths) * (len(rows) - 1)))
    for span in spans:
        cells = [placement_cost(sets[p], k, span) for p in paths for k in rows[1:]]
        print(f"| {span[0]:.0f}-{span[1]:.0f} ns | " + " | ".join(cells) + " |")
    print("placement: a cache line's round trip between the first two CPUs just before each set of samples; "
          "steps over the sets in each cluster (and how many)")

if __name__ == "__main__":
    main()
