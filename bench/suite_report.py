"""The Markdown table and PNG plots of a `bench.suite` run, from its runs.json.

    python -m bench.suite_report bench/results/suite/runs.json [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from bench.spec_prompts import SUITES
from ggspec.engine.stats import PHASES

BASELINE = ("ggspec", "plain")


def _key(run: dict) -> tuple:
    return run["model"], run["suite"], run["prompt"], run["engine"], run["config"]


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(meta: dict, runs: list[dict]) -> list[dict]:
    """One row per model, prompt and configuration: medians over rounds, min-max of
    tokens/s, and the per-round ratios to ggspec plain and to the engine's own plain."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        groups[_key(run)].append(run)

    def ratio_to(key: tuple, rows: list[dict], engine: str, config: str) -> float | None:
        base = {r["round"]: r["tokens_per_second"] for r in groups.get(key[:3] + (engine, config), [])}
        return _median([r["tokens_per_second"] / base[r["round"]] for r in rows if base.get(r["round"])])

    summary = []
    for key, rows in groups.items():
        model, suite, prompt, engine, config = key
        tps = [r["tokens_per_second"] for r in rows]
        verify = [r for r in rows if r["verify_steps"]]
        weight_gb = meta["models"][model]["weight_bytes"] / 1e9
        summary.append({
            "model": model, "suite": suite, "prompt": prompt, "engine": engine, "config": config,
            "kind": rows[0]["kind"], "tps": statistics.median(tps), "tps_min": min(tps), "tps_max": max(tps),
            "x_ggspec_plain": ratio_to(key, rows, *BASELINE),
            "x_own_plain": ratio_to(key, rows, engine, "plain"),
            "mean_acceptance_length": _median([1 + r["draft_n_accepted"] / r["verify_steps"] for r in verify]),
            "acceptance_rate": _median([r["draft_n_accepted"] / r["draft_n"] for r in rows if r["draft_n"]]),
            "tokens_per_call": _median([r["call_tokens"] / r["target_calls"] for r in rows]),
            "ms_per_call": _median([r["ms_per_call"] for r in rows]),
            "weight_gbs": weight_gb * statistics.median(tps),
            "phases_ms": {p: _median([r["phases_ms"][p] for r in rows]) for p in PHASES}
            if "phases_ms" in rows[0] else None,
            "other_cores_max": max((r["other_cores"] or 0.0) for r in rows),
        })
    return summary


def _configs(summary: list[dict]) -> list[tuple[str, str]]:
    seen = dict.fromkeys((r["engine"], r["config"]) for r in summary)
    order = {"ggspec": 0, "llama.cpp": 1}
    return sorted(seen, key=lambda c: (order.get(c[0], 2), c[1] != "plain", list(seen).index(c)))


def _fmt(v, spec=".2f", none="–") -> str:
    return none if v is None else format(v, spec)


def markdown(meta: dict, runs: list[dict], summary: list[dict]) -> str:
    configs = _configs(summary)
    bw = meta["copy_bandwidth_gbs"]
    lines = [
        "# Speculative decoding: ggspec and llama.cpp side by side", "",
        f"{meta['threads']} threads, {meta['n']} greedy tokens per generation (EOS ignored), context {meta['ctx']}, "
        f"{meta['rounds']} rounds per prompt, configurations rotated each round; {meta['machine']}; "
        f"run took {meta['seconds'] / 60:.1f} min{'' if meta.get('complete', True) else ' (interrupted)'}. "
        "Same GGUF, same prompt tokens, same threads on both engines.", "",
        f"Memory bandwidth (large-array copy, read + write, {meta['threads']} threads): **{bw:.1f} GB/s**. "
        "Plain decode reads every weight once per token, so weight bytes × tokens/s is the bandwidth it "
        "achieves; speculation verifies several tokens per weight read and can go past it.", "",
        "| model | weight MB | plain decode, ggspec | plain decode, llama.cpp |", "|---|---|---|---|",
    ]
    for model, info in meta["models"].items():
        cells = []
        for engine in ("ggspec", "llama.cpp"):
            gbs = _median([r["weight_gbs"] for r in summary
                           if r["model"] == model and (r["engine"], r["config"]) == (engine, "plain")])
            cells.append("–" if gbs is None else f"{gbs:.1f} GB/s ({100 * gbs / bw:.0f}% of copy)")
        lines.append(f"| {model} | {info['weight_bytes'] / 1e6:.0f} | {cells[0]} | {cells[1]} |")

    lines += ["", "## Per suite: median tokens/s over the suite's prompts (median ratio to ggspec plain)", "",
              "| model | suite | " + " | ".join(f"{e} {c}" for e, c in configs) + " |",
              "|---|---|" + "---|" * len(configs)]
    for model in meta["models"]:
        for suite in SUITES.values():
            rows = [r for r in summary if r["model"] == model and r["suite"] == suite.name]
            if not rows:
                continue
            cells = []
            for config in configs:
                sel = [r for r in rows if (r["engine"], r["config"]) == config]
                tps, ratio = _median([r["tps"] for r in sel]), _median([r["x_ggspec_plain"] for r in sel])
                cells.append("–" if tps is None else f"{tps:.1f} ({ratio:.2f}x)")
            lines.append(f"| {model} | {suite.title} | " + " | ".join(cells) + " |")

    lines += ["", "## Per prompt", "",
              "tok/s: median (min–max) over rounds. ×: median per-round ratio, to ggspec plain and to the same "
              "engine's plain. Acceptance length: 1 + accepted / verify calls. tok/call: tokens per target "
              "forward (plain steps included). GB/s: weight bytes × tok/s. Phase times (ms per generation) are "
              "ggspec's; llama.cpp does not report them.", "",
              "| model | suite | prompt | configuration | tok/s | × ggspec plain | × own plain | accept. length | "
              "accept. rate | tok/call | ms/step | GB/s | " + " | ".join(PHASES) + " |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(PHASES)]
    for r in summary:
        phases = [_fmt(r["phases_ms"][p], ".0f") if r["phases_ms"] else "–" for p in PHASES]
        lines.append(
            f"| {r['model']} | {r['suite']} | {r['prompt']} | {r['engine']} {r['config']} | "
            f"{r['tps']:.1f} ({r['tps_min']:.1f}–{r['tps_max']:.1f}) | {_fmt(r['x_ggspec_plain'])} | "
            f"{_fmt(r['x_own_plain'])} | {_fmt(r['mean_acceptance_length'])} | "
            f"{_fmt(None if r['acceptance_rate'] is None else 100 * r['acceptance_rate'], '.0f')}"
            f"{'%' if r['acceptance_rate'] is not None else ''} | {r['tokens_per_call']:.2f} | "
            f"{r['ms_per_call']:.1f} | {r['weight_gbs']:.1f} | " + " | ".join(phases) + " |")
    sums = [r["phase_sum_over_gen"] for r in runs if "phase_sum_over_gen" in r]
    if sums:
        lines += ["", f"ggspec's phase times (draft + verify + rollback + snapshot + commit) sum to "
                      f"{min(sums):.3f}–{max(sums):.3f} of its generation time over every run."]
    redone = sum(r.get("redone", 0) for r in runs)
    if redone:
        lines += ["", f"{redone} runs were redone because other processes kept more than "
                      f"{meta.get('max_other_cores')} cores busy meanwhile."]
    disturbed = [r for r in summary if r["other_cores_max"] > 0.25]
    if disturbed:
        lines += ["", f"Warning: {len(disturbed)} rows include a run during which other processes kept more "
                      "than 0.25 cores busy."]
    return "\n".join(lines) + "\n"


def _colors(configs: list[tuple[str, str]]) -> dict:
    import matplotlib

    blues, oranges = matplotlib.colormaps["Blues"], matplotlib.colormaps["Oranges"]
    ours = [c for c in configs if c[0] == "ggspec"]
    theirs = [c for c in configs if c[0] != "ggspec"]
    colors = {c: blues(0.4 + 0.5 * i / max(1, len(ours) - 1)) for i, c in enumerate(ours)}
    colors |= {c: oranges(0.3 + 0.6 * i / max(1, len(theirs) - 1)) for i, c in enumerate(theirs)}
    return colors


def plot_tokens_per_second(meta: dict, summary: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    configs = _configs(summary)
    colors = _colors(configs)
    models = list(meta["models"])
    suites = [s for s in SUITES.values() if any(r["suite"] == s.name for r in summary)]
    widths = [max(1, len({r["prompt"] for r in summary if r["suite"] == s.name})) for s in suites]
    fig, axes = plt.subplots(len(models), len(suites), figsize=(max(11, 3.2 * sum(widths) + 2), 4.2 * len(models) + 1),
                             squeeze=False, gridspec_kw={"width_ratios": widths})
    bar = 0.8 / len(configs)
    for i, model in enumerate(models):
        for j, suite in enumerate(suites):
            ax = axes[i][j]
            prompts = list(dict.fromkeys(r["prompt"] for r in summary if r["suite"] == suite.name))
            for k, config in enumerate(configs):
                rows = {r["prompt"]: r for r in summary if r["model"] == model and r["suite"] == suite.name
                        and (r["engine"], r["config"]) == config}
                xs = [p + (k - (len(configs) - 1) / 2) * bar for p in range(len(prompts))]
                med = [rows[p]["tps"] if p in rows else 0 for p in prompts]
                err = [[m - rows[p]["tps_min"] if p in rows else 0 for m, p in zip(med, prompts)],
                       [rows[p]["tps_max"] - m if p in rows else 0 for m, p in zip(med, prompts)]]
                ax.bar(xs, med, bar, yerr=err, capsize=2, color=colors[config], label=f"{config[0]} {config[1]}",
                       error_kw={"elinewidth": 0.8})
            ax.set_xticks(range(len(prompts)), prompts, rotation=15, fontsize=8)
            ax.set_title(f"{model}\n{suite.title}", fontsize=9)
            ax.set_xlabel("prompt")
            if j == 0:
                ax.set_ylabel("generation speed (tokens/s)")
            ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle(f"Generation speed, median of {meta['rounds']} rounds, bars min–max "
                 f"({meta['threads']} threads, {meta['n']} greedy tokens)")
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(configs)), title="engine and configuration")
    fig.tight_layout(rect=(0, 0.1 + 0.04 * ((len(configs) - 1) // 4), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_acceptance(meta: dict, runs: list[dict], summary: list[dict], path: Path) -> None:
    """Left: ggspec's acceptance at each draft position (llama.cpp does not report it
    per position). Right: acceptance rate of every drafting configuration, both engines."""
    import matplotlib.ticker
    import matplotlib.pyplot as plt

    models = list(meta["models"])
    suites = [s for s in SUITES.values() if any(r["suite"] == s.name for r in summary)]
    drafting = [c for c in _configs(summary) if c[1] != "plain"]
    colors = _colors(_configs(summary))
    fig, axes = plt.subplots(len(models), 2, figsize=(15, 4.5 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        ax = axes[i][0]
        for suite in suites:
            per_prompt: dict[str, tuple[list[int], list[int]]] = {}
            for r in runs:
                if (r["model"], r["suite"], r["engine"], r["config"]) != (model, suite.name, "ggspec", "ngram"):
                    continue
                drafted, accepted = per_prompt.setdefault(r["prompt"], ([], []))
                for counts, new in ((drafted, r["draft_n_per_position"]),
                                    (accepted, r["draft_n_accepted_per_position"])):
                    counts.extend([0] * (len(new) - len(counts)))
                    for pos, v in enumerate(new):
                        counts[pos] += v
            if not per_prompt:
                continue
            n_pos = max(len(d) for d, _ in per_prompt.values())
            xs, mid, lo, hi = [], [], [], []
            for pos in range(n_pos):
                counted = [(d[pos], a[pos]) for d, a in per_prompt.values() if pos < len(d) and d[pos] >= 3]
                if not counted:
                    continue
                rates = [a / d for d, a in counted]
                rate = 100 * sum(a for _, a in counted) / sum(d for d, _ in counted)
                xs.append(pos + 1)
                mid.append(rate)
                lo.append(max(0.0, rate - 100 * min(rates)))  # the pooled rate lies between them,
                hi.append(max(0.0, 100 * max(rates) - rate))  # up to rounding
            ax.errorbar(xs, mid, yerr=[lo, hi], marker="o", markersize=3, capsize=2, elinewidth=0.7,
                        label=f"ggspec ngram: {suite.title}")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%d"))
        ax.set_xlabel("draft position (1 = first drafted token)")
        ax.set_ylabel("accepted at this position (%)")
        ax.set_ylim(0, 105)
        ax.set_title(f"{model}: ggspec n-gram acceptance by draft position\n(pooled over prompts; bars: min–max "
                     "over prompts, positions drafted 3+ times)", fontsize=9)
        ax.legend(fontsize=7, title="engine, configuration: suite", title_fontsize=7)
        ax.grid(alpha=0.3)

        ax = axes[i][1]
        bar = 0.8 / max(1, len(drafting))
        for k, config in enumerate(drafting):
            vals, lo, hi = [], [], []
            for suite in suites:
                rates = [100 * r["acceptance_rate"] for r in summary if r["model"] == model
                         and r["suite"] == suite.name and (r["engine"], r["config"]) == config
                         and r["acceptance_rate"] is not None]
                m = statistics.median(rates) if rates else 0
                vals.append(m)
                lo.append(m - min(rates) if rates else 0)
                hi.append(max(rates) - m if rates else 0)
            xs = [s + (k - (len(drafting) - 1) / 2) * bar for s in range(len(suites))]
            ax.bar(xs, vals, bar, yerr=[lo, hi], capsize=2, color=colors[config], label=f"{config[0]} {config[1]}",
                   error_kw={"elinewidth": 0.8})
        ax.set_xticks(range(len(suites)), [s.title for s in suites], rotation=10, fontsize=8)
        ax.set_xlabel("suite")
        ax.set_ylabel("drafted tokens accepted (%)")
        ax.set_ylim(0, 105)
        ax.set_title(f"{model}: acceptance rate by configuration\n(median over the suite's prompts; bars: "
                     "min–max over prompts)", fontsize=9)
        ax.legend(fontsize=7, ncol=2, title="engine and configuration", title_fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(meta: dict, runs: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    summary = summarize(meta, runs)
    written = [out / "table.md", out / "tokens_per_second.png", out / "acceptance.png"]
    written[0].write_text(markdown(meta, runs, summary))
    plot_tokens_per_second(meta, summary, written[1])
    plot_acceptance(meta, runs, summary, written[2])
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return written + [out / "summary.json"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", help="runs.json written by bench.suite")
    p.add_argument("--out-dir", help="default: the directory of runs.json")
    args = p.parse_args()
    data = json.loads(Path(args.runs).read_text())
    out = Path(args.out_dir or Path(args.runs).parent)
    out.mkdir(parents=True, exist_ok=True)
    for path in write_report(data["meta"], data["runs"], out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
