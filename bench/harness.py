"""Paired A/B throughput runs: one warm-up of each, then A B A B ... for N pairs.

Alternating pairs spread machine drift (thermal, background load) evenly over both
sides, and the per-pair ratio B/A cancels most of it.

Each run's throughput comes from its own output via a metric spec:
  - a regex (multiline, searched in stdout + stderr): group "value" or group 1, e.g.
    bench.peer.commands.COMPLETION_EVAL_TPS;
  - "json:path.to.field" on stdout (integer parts index lists), e.g. "json:0.avg_ts";
  - none: 1 / wall seconds, so higher is better on every side.

Each run also records `other_cores`, the average number of cores other processes kept
busy meanwhile; --max-other-cores redoes pairs disturbed beyond that (shared machines).

    python -m bench.harness --a "CMD A" --b "CMD B" --metric REGEX --pairs 5 --out runs.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

Command = str | Sequence[str]  # a string runs through the shell
WALL_METRIC = "1/wall_s"
OUTPUT_TAIL_CHARS = 4000  # kept per run in the JSON, enough for llama.cpp's perf lines


def extract_metric(stdout: str, stderr: str, spec: str) -> float:
    if spec.startswith("json:"):
        value = _parse_json(stdout)
        for part in spec[len("json:") :].split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
        return float(value)
    match = re.search(spec, stdout + "\n" + stderr, re.MULTILINE)
    if match is None:
        raise ValueError(f"metric regex {spec!r} not found in output:\n{(stdout + stderr)[-2000:]}")
    return float(match.group("value") if "value" in match.re.groupindex else match.group(1))


def _parse_json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        # JSON-lines output, or JSON after log lines: take the last line that parses.
        for line in reversed(text.splitlines()):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError(f"no JSON found on stdout:\n{text[-2000:]}")


def _busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy (Linux /proc/stat), or None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except OSError:
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_command(cmd: Command, timeout: float | None) -> subprocess.CompletedProcess:
    # Own session, so a timeout kills the tool too and not just the `sh -c` around it.
    with subprocess.Popen(
        cmd,
        shell=isinstance(cmd, str),
        stdin=subprocess.DEVNULL,  # interactive tools must not wait for a terminal
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",  # a random model's text is not always UTF-8
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_once(cmd: Command, metric: str | None, timeout: float | None = None) -> dict:
    """One run: its metric value, wall time, and `other_cores`, the average number of
    cores kept busy by anything else meanwhile (a shared machine spoils the numbers)."""
    busy_start, child_start = _busy_cpu_s(), _children_cpu_s()
    start = time.perf_counter()
    proc = _run_command(cmd, timeout)
    wall_s = time.perf_counter() - start
    busy_end, child_end = _busy_cpu_s(), _children_cpu_s()
    other_cores = None
    if busy_start is not None and busy_end is not None:
        other_cores = max(0.0, busy_end - busy_start - (child_end - child_start)) / wall_s
    if proc.returncode != 0:
        raise RuntimeError(
            f"command failed (rc={proc.returncode}): {cmd}\n{(proc.stdout + proc.stderr)[-2000:]}"
        )
    value = extract_metric(proc.stdout, proc.stderr, metric) if metric else 1.0 / wall_s
    return {
        "value": value,
        "wall_s": wall_s,
        "other_cores": other_cores,
        "stdout_tail": proc.stdout[-OUTPUT_TAIL_CHARS:],
        "stderr_tail": proc.stderr[-OUTPUT_TAIL_CHARS:],
    }


def run_in_process(fn):
    """Call fn() and time it as run_once times a command: returns (fn's result, wall
    seconds, other_cores), other_cores being the cores busy outside this process."""
    busy_start, own_start = _busy_cpu_s(), _own_cpu_s()
    start = time.perf_counter()
    value = fn()
    wall_s = time.perf_counter() - start
    busy_end, own_end = _busy_cpu_s(), _own_cpu_s()
    other_cores = None
    if busy_start is not None and busy_end is not None:
        other_cores = max(0.0, busy_end - busy_start - (own_end - own_start)) / wall_s
    return value, wall_s, other_cores


def summarize(values: Sequence[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def synthetic_file(name: str, write: Callable[[Path], object]) -> Path:
    """~/.cache/ggspec/bench/<name>, written once by write(path): through a .partial file
    renamed when done, so an interrupted write is done again."""
    path = Path.home() / ".cache" / "ggspec" / "bench" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write(partial)
        partial.rename(path)
    return path


def rotated(items: Sequence, round_: int) -> list:
    """items in round `round_`'s order: each round starts one further along, so that
    drift and warm caches favour no configuration."""
    shift = round_ % len(items)
    return [*items[shift:], *items[:shift]]


def throughput_cells(runs: Sequence[dict], base_by_seed: dict) -> str:
    """Two Markdown cells for in-process runs paired by their "seed" (one a round):
    tokens/s median (min-max), and the median per-round ratio to the base's."""
    tps = [r["tokens_per_second"] for r in runs]
    ratio = statistics.median(r["tokens_per_second"] / base_by_seed[r["seed"]] for r in runs)
    return f"{statistics.median(tps):.1f} ({min(tps):.1f}-{max(tps):.1f}) | {ratio:.3f}"


def alternating(rounds: int, a, b):
    """(round, side) for paired runs inside one process: A B, B A, A B, ... so that
    drift and warm caches favour neither side."""
    for round_ in range(rounds):
        for side in ((a, b) if round_ % 2 == 0 else (b, a)):
            yield round_, side


def run_pairs(
    cmd_a: Command,
    cmd_b: Command,
    pairs: int = 5,
    metric_a: str | None = None,
    metric_b: str | None = None,
    warmup: bool = True,
    max_other_cores: float | None = None,
    retries: int = 3,
    out: str | Path | None = None,
    timeout: float | None = None,
    progress=None,
) -> dict:
    """Run A and B alternately; returns (and writes to `out`) every run and the summary.

    With `max_other_cores`, a pair during which other processes kept more cores busy
    than that is marked discarded and redone, up to `retries` times (the last try is
    kept regardless). `progress`, if given, gets a one-line string after each run.
    """
    specs = {"a": metric_a, "b": metric_b}
    sides = {
        "a": {"cmd": cmd_a, "metric": metric_a or WALL_METRIC},
        "b": {"cmd": cmd_b, "metric": metric_b or WALL_METRIC},
    }
    runs: list[dict] = []

    def run(side: str, pair: int | None) -> dict:
        record = run_once(sides[side]["cmd"], specs[side], timeout)
        record.update(side=side, pair=pair, seq=len(runs), discarded=False)
        runs.append(record)
        if progress:
            label = "warm-up" if pair is None else f"pair {pair + 1}/{pairs}"
            progress(
                f"{label} {side.upper()}: {record['value']:.3f} ({record['wall_s']:.1f} s wall, "
                f"other load {_fmt_cores(record['other_cores'])} cores)"
            )
        return record

    def disturbed(record: dict) -> bool:
        other = record["other_cores"]
        return max_other_cores is not None and other is not None and other > max_other_cores

    if warmup:
        run("a", None)
        run("b", None)
    ratios = []
    for pair in range(pairs):
        for _ in range(retries + 1):
            record_a, record_b = run("a", pair), run("b", pair)
            if not (disturbed(record_a) or disturbed(record_b)):
                break
            record_a["discarded"] = record_b["discarded"] = True
        record_a["discarded"] = record_b["discarded"] = False
        ratios.append(record_b["value"] / record_a["value"])

    kept = [r for r in runs if r["pair"] is not None and not r["discarded"]]
    for side, info in sides.items():
        side_runs = [r for r in kept if r["side"] == side]
        info.update(summarize([r["value"] for r in side_runs]))
        others = [r["other_cores"] for r in side_runs if r["other_cores"] is not None]
        info["other_cores_max"] = max(others, default=None)
    result = {
        "a": sides["a"],
        "b": sides["b"],
        "ratios_b_over_a": ratios,
        "ratio_median": statistics.median(ratios),
        "discarded_runs": sum(r["discarded"] for r in runs),
        "runs": runs,
    }
    if out is not None:
        Path(out).write_text(json.dumps(result, indent=2, default=str))
    return result


def _fmt_cores(cores: float | None) -> str:
    return "n/a" if cores is None else f"{cores:.2f}"


def format_report(result: dict) -> str:
    lines = []
    for side in ("a", "b"):
        info = result[side]
        cmd = info["cmd"] if isinstance(info["cmd"], str) else " ".join(info["cmd"])
        lines.append(
            f"{side.upper()}: median {info['median']:.3f}  [{info['min']:.3f} - {info['max']:.3f}]"
            f"  ({info['metric']}; other load <= {_fmt_cores(info['other_cores_max'])} cores)  {cmd}"
        )
    lines.append("B/A per pair: " + " ".join(f"{r:.3f}" for r in result["ratios_b_over_a"]))
    lines.append(f"B/A median: {result['ratio_median']:.3f}")
    if result["discarded_runs"]:
        lines.append(f"discarded (disturbed) runs: {result['discarded_runs']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Paired A/B throughput runs (A B A B ...).")
    parser.add_argument("--a", required=True, help="command A (shell string)")
    parser.add_argument("--b", required=True, help="command B (shell string)")
    parser.add_argument("--metric", help="metric spec for both sides (regex or json:path)")
    parser.add_argument("--metric-a", help="metric spec for A (overrides --metric)")
    parser.add_argument("--metric-b", help="metric spec for B (overrides --metric)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument(
        "--max-other-cores",
        type=float,
        help="redo a pair when other processes kept more cores than this busy during it",
    )
    parser.add_argument("--retries", type=int, default=3, help="redos per pair (default 3)")
    parser.add_argument("--timeout", type=float, help="seconds per run")
    parser.add_argument("--out", help="JSON file for all raw runs and the summary")
    args = parser.parse_args(argv)
    result = run_pairs(
        args.a,
        args.b,
        pairs=args.pairs,
        metric_a=args.metric_a or args.metric,
        metric_b=args.metric_b or args.metric,
        warmup=not args.no_warmup,
        max_other_cores=args.max_other_cores,
        retries=args.retries,
        out=args.out,
        timeout=args.timeout,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_report(result))


if __name__ == "__main__":
    main()
