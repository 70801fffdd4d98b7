"""Many requests at once: ggspec's Engine with N slots against llama-server -np N.

    python -m bench.concurrency                     # both models, concurrency 1 2 4 8, plain and n-gram
    python -m bench.concurrency --models gemma3-270m-q4_k_m --levels 4 --rounds 1
    python -m bench.concurrency --workloads system chat   # prefix-sharing workloads
    python -m bench.concurrency --spec-pairs --rounds 4   # ggspec alone: n-gram on against off, paired
    python -m bench.concurrency --configs ngram --levels 4 --llama-ngram ngram-simple ngram-map-k ngram-map-k4v ngram-mod ngram-cache
                                                          # against llama-server's fastest n-gram mode

Workloads: "fresh" (every prompt computed anew: both sides' prompt caches off),
"system" (a shared system prompt, then each request's own question) and "chat"
(two turns per conversation, the second the first's prompt and reply, then an
instruction to repeat it); on the last two both sides cache prompts (ggspec's
prefix cache, llama-server's cache_prompt with its --cache-ram), and the table
shows each side's share of prompt tokens served from its cache, and for chat
the second turn's generation speed.

At each concurrency N, N clients each send --requests requests one after the
other (a closed loop, so N are always in flight), greedy, EOS ignored, each asking
for its own number of tokens, spread over --n/2 to 3 --n/2 (mean --n; identical
lengths keep a batch without speculation in lockstep, every slot ending and
prefilling at once, which no traffic does, while speculation breaks the step
and gets charged for it), the same prompt token ids and lengths on both sides:
prompts from the document, code and prose suites, cut or filled (with the
suites' document) to 128-256 tokens. ggspec runs an
Engine(model, slots=N) in this process; llama.cpp runs llama-server (-np N,
continuous batching, N x the per-slot context, the same threads, its default
flash attention) on 127.0.0.1, streaming /completion. Each configuration runs
--rounds times, alternating engines. Reported per (model, config, N), medians
over rounds: aggregate generated tokens/s (all tokens over the wall time of the
level), p50 and p95 time to first token, p50 inter-token latency, acceptance.
Writes DIR/runs.json, DIR/table.md and DIR/concurrency.png.
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

import ggspec
from bench.compare_decode import model_paths
from bench.peer.peer import ensure_built, tool
from bench.spec_prompts import DOCUMENT, SUITES

SUITE_NAMES = ("document", "code", "prose")
CONFIGS = ("plain", "ngram")
WORKLOADS = ("fresh", "system", "chat")
CHAT_FOLLOW_UP = "\n\nRepeat your answer above word for word:\n"
LLAMA_NGRAM_MODES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
MIN_TOKENS, MAX_TOKENS = 128, 256


def prompt_ids(model: ggspec.Model) -> list[list[int]]:
    """Each suite prompt's ids, 128-256 of them: long ones cut, short ones led by the document."""
    chat = model.has_chat_template
    encode = model.encode_chat if chat else model.encode_prompt
    out = []
    for name in SUITE_NAMES:
        for p in SUITES[name].prompts:
            text = p.chat if chat else p.raw
            ids = encode(text)
            if len(ids) < MIN_TOKENS:
                ids = encode(DOCUMENT + "\n\n" + text)
            out.append(ids[:MAX_TOKENS])
    return out


def workload_jobs(model: ggspec.Model, workload: str, prompts: list[list[int]], n_jobs: int) -> list[list]:
    """Each job: its first prompt's ids, then the ids each later turn appends to the
    conversation so far (its prompt and reply)."""
    if workload == "fresh":
        return [[prompts[i % len(prompts)]] for i in range(n_jobs)]
    if workload == "system":
        system = model.encode_prompt(DOCUMENT)[:192]
        return [[system + prompts[i % len(prompts)][-48:]] for i in range(n_jobs)]
    follow_up = model.tokenizer.encode(CHAT_FOLLOW_UP, add_special=False, parse_special=True)
    return [[prompts[i % len(prompts)], follow_up] for i in range(n_jobs)]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def _level_stats(runs: list[dict], wall: float) -> dict:
    ttft = [r["ttft"] for r in runs]
    itl = [gap for r in runs for gap in r["gaps"]]
    drafted = sum(r.get("draft_n", 0) for r in runs)
    later = [r for r in runs if r["turn"] > 0]
    return {"tokens_per_second": sum(r["tokens"] for r in runs) / wall, "ttft_p50": _percentile(ttft, 0.5),
            "ttft_p95": _percentile(ttft, 0.95), "itl_p50": _percentile(itl, 0.5),
            "acceptance": sum(r.get("draft_n_accepted", 0) for r in runs) / drafted if drafted else None,
            "cache_hit_rate": sum(r["cached"] for r in runs) / max(1, sum(r["prompt"] for r in runs)),
            # a later turn's generation speed: its tokens after the first over their span
            "later_turn_tokens_per_second": (sum(len(r["gaps"]) for r in later) / sum(sum(r["gaps"]) for r in later)
                                             if later and any(r["gaps"] for r in later) else None),
            "requests": len(runs)}


def request_tokens(job: int, n_predict: int) -> int:
    """The tokens job `job` asks for: spread over n_predict/2 to 3 n_predict/2, mean n_predict."""
    return n_predict // 2 + (job * 37) % (n_predict + 1)


def _closed_loop(n_clients: int, jobs: list[list], n_predict: int, send) -> tuple[list[dict], float]:
    """n_clients threads, each running its share of the jobs one after the other, a
    job's turns in order (each after the conversation so far), every turn of a job
    asking for its request_tokens."""
    runs: list[dict] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        for job in range(i, len(jobs), n_clients):
            ids, *follow_ups = jobs[job]
            for turn in range(1 + len(follow_ups)):
                r = {**send(ids, request_tokens(job, n_predict)), "turn": turn, "prompt": len(ids)}
                with lock:
                    runs.append(r)
                if turn < len(follow_ups):
                    ids = ids + r["output"] + follow_ups[turn]

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return runs, time.perf_counter() - t0


def ggspec_level(model: ggspec.Model, config: str, n: int, work: list[list], n_predict: int) -> dict:
    with ggspec.Engine(model, slots=n) as engine:
        def send(ids: list[int], tokens: int) -> dict:
            stamps: list[float] = []
            t0 = time.perf_counter()
            result = engine.submit(ids, max_tokens=tokens, temperature=0, ignore_eos=True,
                                   spec="ngram" if config == "ngram" else False,
                                   on_token=lambda _t: stamps.append(time.perf_counter())).result
            return {"tokens": len(result.tokens), "ttft": stamps[0] - t0,
                    "gaps": [b - a for a, b in zip(stamps, stamps[1:])], "draft_n": result.stats["draft_n"],
                    "draft_n_accepted": result.stats["draft_n_accepted"], "output": result.tokens,
                    "cached": result.stats["reused_prompt_tokens"]}

        send(work[0][0][:16], n_predict)  # builds the first graphs
        runs, wall = _closed_loop(n, work, n_predict, send)
    return {**_level_stats(runs, wall), "outputs": [r["output"] for r in runs]}


class LlamaServer:
    def __init__(self, path: str, n: int, ctx_per_slot: int, threads: int, spec_type: str | None, flavor: str,
                 cache_prompt: bool = False):
        self.cache_prompt = cache_prompt
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [str(tool("llama-server", flavor)), "-m", path, "--host", "127.0.0.1", "--port", str(self.port),
               "-np", str(n), "-c", str(n * ctx_per_slot), "-t", str(threads), "-tb", str(threads), "-cb",
               "--no-webui", "-fit", "off", "--metrics"]
        if spec_type is not None:
            cmd += ["--spec-type", spec_type]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {self.proc.stderr.read()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError("llama-server did not become healthy within 120 s")

    def send(self, ids: list[int], n_predict: int) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = json.dumps({"prompt": ids, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                           "stream": True, "cache_prompt": self.cache_prompt, "return_tokens": True})
        t0 = time.perf_counter()
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        stamps, tokens, timings = [], [], {}
        for line in response:
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            new = event.get("tokens") or []
            stamps.extend([time.perf_counter()] * len(new))
            tokens.extend(new)
            timings = event.get("timings", timings)
        conn.close()
        return {"tokens": len(tokens), "ttft": stamps[0] - t0, "gaps": [b - a for a, b in zip(stamps, stamps[1:])],
                "draft_n": timings.get("draft_n", 0), "draft_n_accepted": timings.get("draft_n_accepted", 0),
                "output": tokens, "cached": timings.get("cache_n", 0)}

    def draft_counts(self) -> tuple[float, float]:
        """(draft tokens, accepted ones) so far, from /metrics: the stream's timings carry
        them only for some requests."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        counts = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            counts[name.split(":")[-1]] = value
        return (float(counts.get("spec_decode_num_draft_tokens_total", 0)),
                float(counts.get("spec_decode_num_accepted_tokens_total", 0)))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def add_closed_loop_arguments(ap: argparse.ArgumentParser) -> None:
    """What a closed-loop comparison with llama-server takes (here and bench.serve)."""
    ap.add_argument("--requests", type=int, default=2, help="requests each client sends")
    ap.add_argument("--n", type=int, default=64, help="tokens a request generates, on average (request_tokens)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512, help="positions per slot, both sides")
    ap.add_argument("--flavor", default="usual", help="the llama.cpp peer build")


def llama_level(path: str, spec_type: str | None, n: int, work: list[list], n_predict: int, ctx: int, threads: int,
                flavor: str, cache_prompt: bool) -> dict:
    server = LlamaServer(path, n, ctx, threads, spec_type, flavor, cache_prompt)
    try:
        server.send(work[0][0][:16], 4)
        drafted0, accepted0 = server.draft_counts()
        runs, wall = _closed_loop(n, work, n_predict, server.send)
        drafted, accepted = server.draft_counts()
    finally:
        server.close()
    stats = _level_stats(runs, wall)
    if drafted > drafted0:
        stats["acceptance"] = (accepted - accepted0) / (drafted - drafted0)
    return {**stats, "outputs": [r["output"] for r in runs]}


def markdown(meta: dict, summary: list[dict]) -> str:
    lines = [f"# Concurrency: ggspec Engine(slots=N) against llama-server -np N",
             "", f"{meta['host']}, {meta['threads']} threads, {meta['n_predict']} tokens a request on average, "
             f"{meta['requests']} requests a client, medians of {meta['rounds']} rounds. Same outputs: requests "
             "whose tokens match llama-server's (first round; greedy text can differ on ties and numerics).", "",
             "| model | workload | config | N | ggspec tok/s | llama-server tok/s | ratio | ggspec TTFT p50/p95 ms | "
             "llama TTFT p50/p95 ms | ggspec ITL p50 ms | llama ITL p50 ms | acceptance ggspec / llama | "
             "cache hits ggspec / llama | turn 2 tok/s ggspec / llama | same outputs |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        g, l_ = s["ggspec"], s["llama"]
        acc = " / ".join("–" if a is None else f"{a:.2f}" for a in (g["acceptance"], l_["acceptance"]))
        hits = " / ".join(f"{x['cache_hit_rate']:.2f}" for x in (g, l_))
        turn2 = " / ".join("–" if x["later_turn_tokens_per_second"] is None else
                           f"{x['later_turn_tokens_per_second']:.1f}" for x in (g, l_))
        config = s["config"] if s.get("llama_mode") is None else f"{s['config']} (llama: {s['llama_mode']})"
        lines.append(f"| {s['model']} | {s['workload']} | {config} | {s['n']} | {g['tokens_per_second']:.1f} | "
                     f"{l_['tokens_per_second']:.1f} | {g['tokens_per_second'] / l_['tokens_per_second']:.3f} | "
                     f"{g['ttft_p50'] * 1e3:.0f} / {g['ttft_p95'] * 1e3:.0f} | "
                     f"{l_['ttft_p50'] * 1e3:.0f} / {l_['ttft_p95'] * 1e3:.0f} | {g['itl_p50'] * 1e3:.1f} | "
                     f"{l_['itl_p50'] * 1e3:.1f} | {acc} | {hits} | {turn2} | {s['same_outputs']}/{s['requests']} |")
    return "\n".join(lines) + "\n"


def plot(summary: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    keys = sorted({(s["model"], s["workload"], s["config"]) for s in summary})
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.5), squeeze=False)
    for ax, (model, workload, config) in zip(axes[0], keys):
        rows = sorted((s for s in summary if (s["model"], s["workload"], s["config"]) == (model, workload, config)),
                      key=lambda s: s["n"])
        ns = [s["n"] for s in rows]
        for engine, label in (("ggspec", "ggspec Engine"), ("llama", "llama-server")):
            ax.plot(ns, [s[engine]["tokens_per_second"] for s in rows], marker="o", label=label)
        ax.set_title(f"{model}, {workload}, {config}", fontsize=9)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel("aggregate tokens/s")
        ax.set_xticks(ns)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _median_stats(levels: list[dict]) -> dict:
    out = {}
    for key in ("tokens_per_second", "ttft_p50", "ttft_p95", "itl_p50", "acceptance", "cache_hit_rate",
                "later_turn_tokens_per_second"):
        values = [lv[key] for lv in levels if lv[key] is not None]
        out[key] = statistics.median(values) if values else None
    return out


def spec_pairs(args, paths) -> str:
    """ggspec alone, speculation on (n-gram) against off at each level: the two run
    back to back in each round, in an order alternated each round, so the host's drift
    hits them alike; the ratio is the median of the per-round ratios."""
    lines = ["| model | workload | N | off tok/s | on tok/s | on / off (median of rounds) | rounds |",
             "|---|---|---|---|---|---|---|"]
    for name in args.models:
        path = str(paths[name])
        tokenizer = ggspec.Model(path, n_ctx=args.ctx, n_threads=args.threads, prefix_cache_mb=None)
        prompts = prompt_ids(tokenizer)
        for workload in args.workloads:
            for n in args.levels:
                work = workload_jobs(tokenizer, workload, prompts, n * args.requests)
                rates = {"plain": [], "ngram": []}
                for round_ in range(args.rounds):
                    for config in (("plain", "ngram") if round_ % 2 == 0 else ("ngram", "plain")):
                        model = ggspec.Model(path, n_ctx=args.ctx, n_threads=args.threads,
                                             prefix_cache_mb=None if workload == "fresh" else 1024)
                        rates[config].append(ggspec_level(model, config, n, work, args.n)["tokens_per_second"])
                    print(f"{name} {workload} N={n} round {round_}: off {rates['plain'][-1]:.1f}, "
                          f"on {rates['ngram'][-1]:.1f} tok/s", flush=True)
                ratio = statistics.median(a / b for a, b in zip(rates["ngram"], rates["plain"]))
                lines.append(f"| {name} | {workload} | {n} | {statistics.median(rates['plain']):.1f} | "
                             f"{statistics.median(rates['ngram']):.1f} | {ratio:.3f} | {args.rounds} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["gemma3-270m-q4_k_m", "smollm2-135m-q4_1"])
    ap.add_argument("--levels", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--workloads", nargs="+", default=["fresh"], choices=WORKLOADS)
    add_closed_loop_arguments(ap)
    ap.add_argument("--llama-ngram", nargs="+", default=["ngram-simple"], choices=LLAMA_NGRAM_MODES,
                    help="llama-server's --spec-type for the ngram config; given several, each runs and the "
                         "table compares ggspec with the fastest (and lists them all)")
    ap.add_argument("--out", type=Path, default=Path("bench-out/concurrency"))
    ap.add_argument("--spec-pairs", action="store_true",
                    help="ggspec only: speculation on against off, paired in each round (spec_pairs)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.spec_pairs:
        table = spec_pairs(args, model_paths())
        (args.out / "spec_pairs.md").write_text(table)
        print(table)
        return
    ensure_built(args.flavor)
    meta = {"host": platform.processor() or platform.machine(), "threads": args.threads, "n_predict": args.n,
            "requests": args.requests, "rounds": args.rounds, "flavor": args.flavor}
    paths = model_paths()
    runs, summary = [], []
    for name in args.models:
        path = str(paths[name])
        tokenizer = ggspec.Model(path, n_ctx=args.ctx, n_threads=args.threads, prefix_cache_mb=None)
        prompts = prompt_ids(tokenizer)
        for workload in args.workloads:
            cache = workload != "fresh"
            for config in args.configs:
                for n in args.levels:
                    # llama-server's sides: its plain decoding, or each of its n-gram modes
                    modes = args.llama_ngram if config == "ngram" else [None]
                    sides = ["ggspec", *modes]
                    levels = {side: [] for side in sides}
                    work = workload_jobs(tokenizer, workload, prompts, n * args.requests)
                    for round_ in range(args.rounds):
                        for engine in (sides if round_ % 2 == 0 else sides[::-1]):
                            if engine == "ggspec":  # a fresh model each level: its prefix cache starts empty
                                model = ggspec.Model(path, n_ctx=args.ctx, n_threads=args.threads,
                                                     prefix_cache_mb=1024 if cache else None)
                                lv = ggspec_level(model, config, n, work, args.n)
                            else:
                                lv = llama_level(path, engine, n, work, args.n, args.ctx, args.threads, args.flavor,
                                                 cache)
                            levels[engine].append(lv)
                            runs.append({"model": name, "workload": workload, "config": config, "n": n,
                                         "engine": engine or "llama", "round": round_,
                                         **{k: v for k, v in lv.items() if k != "outputs"}})
                            print(f"{name} {workload} {config} N={n} {engine or 'llama'}: "
                                  f"{lv['tokens_per_second']:.1f} tok/s", flush=True)
                    llama = {mode: _median_stats(levels[mode]) for mode in modes}
                    best = max(modes, key=lambda mode: llama[mode]["tokens_per_second"])
                    same = sum(a == b for a, b in zip(sorted(levels["ggspec"][0]["outputs"]),
                                                      sorted(levels[best][0]["outputs"])))
                    summary.append({"model": name, "workload": workload, "config": config, "n": n,
                                    "same_outputs": same, "requests": len(levels["ggspec"][0]["outputs"]),
                                    "ggspec": _median_stats(levels["ggspec"]), "llama": llama[best],
                                    "llama_mode": best,
                                    "llama_modes": {mode: llama[mode]["tokens_per_second"] for mode in modes}})
                    (args.out / "runs.json").write_text(json.dumps({"meta": meta, "runs": runs, "summary": summary},
                                                                   indent=1))
    (args.out / "table.md").write_text(markdown(meta, summary))
    plot(summary, args.out / "concurrency.png")
    print(markdown(meta, summary))


if __name__ == "__main__":
    main()
