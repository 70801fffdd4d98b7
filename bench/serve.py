"""`ggspec serve --slots N` against `llama-server -np N`, over HTTP, on the same requests.

    python -m bench.serve                                   # SmolLM2, concurrency 1 4 8, plain and n-gram
    python -m bench.serve --models gemma3-270m-q4_k_m --levels 4 --configs plain --rounds 3
    python -m bench.serve --turns 2 --levels 1 4        # a second turn that repeats the first's reply

Both servers run on 127.0.0.1 with the same GGUF, threads and per-slot context
(llama-server's -c is N times it: its context is shared by its slots), their
prompt caches at their defaults. At each concurrency N, N clients each send
--requests streaming requests one after the other (a closed loop): OpenAI chat
completions (one user message from the document, code and prose suites, led by
the suites' document when short) on a model with a chat template, text
completions of the raw prompt otherwise; greedy, EOS ignored, each asking for
its request_tokens (bench.concurrency: --n/2 to 3 --n/2). "plain" starts each
server with speculation off, "ngram" with its n-gram drafting (ggspec's
`--spec-type ngram`, llama-server's --llama-ngram mode). The servers alternate,
a fresh process for each level and round. Reported per (model, config, N),
medians over rounds: aggregate generated tokens/s (usage.completion_tokens over
the level's wall time) and p95 time to first token (to the first streamed text),
with the ratio ggspec / llama-server. With --turns 2 each job is a conversation:
the second turn sends the first's prompt and reply, then asks for the reply again
word for word (bench.concurrency's chat workload); the table adds the second
turns' generation speed (their predicted tokens over their predicted_ms, from the
timings) and its ratio of n-gram to plain, per server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
from pathlib import Path

from bench.compare_decode import model_paths
from bench.concurrency import (CHAT_FOLLOW_UP, MAX_TOKENS, MIN_TOKENS, SUITE_NAMES, LlamaServer, _percentile,
                               add_closed_loop_arguments, request_tokens)
from bench.peer.peer import ensure_built
from bench.spec_prompts import DOCUMENT, SUITES
from tests.server_process import ServerProcess

def prompts(tokenizer, chat: bool) -> list[str]:
    """The suite prompts as text of MIN_TOKENS-MAX_TOKENS tokens: a short one led by as
    much of the document as fills it to MIN_TOKENS, a long one cut."""
    out = []
    for name in SUITE_NAMES:
        for p in SUITES[name].prompts:
            text = p.chat if chat else p.raw
            ids = tokenizer.encode(text, add_special=False)
            if len(ids) < MIN_TOKENS:
                lead = tokenizer.encode(DOCUMENT, add_special=False)[:MIN_TOKENS - len(ids)]
                text = tokenizer.decode(lead) + "\n\n" + text
            elif len(ids) > MAX_TOKENS:
                text = tokenizer.decode(ids[:MAX_TOKENS])
            out.append(text)
    return out


def ggspec_server(path: str, n: int, ctx: int, threads: int, config: str, log: Path) -> ServerProcess:
    spec = ["--spec-type", "ngram"] if config == "ngram" else ["--no-spec"]
    return ServerProcess(["-m", path, "--slots", str(n), "-c", str(ctx), "-t", str(threads), *spec], log)


def send(port: int, chat: bool, prompt: str | list[dict], max_tokens: int) -> dict:
    """One streamed request (prompt: messages for a chat): its generated tokens and text,
    time to first text, and the server's timings."""
    body = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update({"messages": prompt} if chat else {"prompt": prompt})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:500]!r}")
    first, tokens, texts, timings = None, 0, [], {}
    for line in response:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        for choice in event.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
            if text:
                first = time.perf_counter() - t0 if first is None else first
                texts.append(text)
        tokens = event["usage"]["completion_tokens"] if event.get("usage") else tokens
        timings = event.get("timings", timings)
    conn.close()
    return {"tokens": tokens, "ttft": first if first is not None else float("nan"), "text": "".join(texts),
            "predicted_n": timings.get("predicted_n", 0), "predicted_ms": timings.get("predicted_ms", 0.0)}


def level(port: int, chat: bool, n: int, texts: list[str], requests: int, n_predict: int, turns: int) -> dict:
    runs: list[dict] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def first_turn(text: str):
        return [{"role": "user", "content": text}] if chat else text

    def next_turn(prompt, reply: str):
        if chat:
            return [*prompt, {"role": "assistant", "content": reply},
                    {"role": "user", "content": CHAT_FOLLOW_UP.strip()}]
        return prompt + reply + CHAT_FOLLOW_UP

    def client(i: int) -> None:
        try:
            for job in range(i, n * requests, n):
                prompt = first_turn(texts[job % len(texts)])
                for turn in range(turns):
                    r = send(port, chat, prompt, request_tokens(job, n_predict))
                    with lock:
                        runs.append({**r, "turn": turn})
                    prompt = next_turn(prompt, r["text"])
        except BaseException as e:  # noqa: BLE001 - raised below, on the main thread
            errors.append(e)

    send(port, chat, first_turn(texts[0][:200]), 4)  # warm: the first graphs
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    later = [r for r in runs if r["turn"] > 0]
    return {"tokens_per_second": sum(r["tokens"] for r in runs) / wall,
            "ttft_p95": _percentile([r["ttft"] for r in runs], 0.95), "requests": len(runs),
            "turn2_tokens_per_second": (1000 * sum(r["predicted_n"] for r in later) /
                                        sum(r["predicted_ms"] for r in later) if later else float("nan"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m-q4_1"])
    ap.add_argument("--levels", nargs="+", type=int, default=[1, 4, 8])
    ap.add_argument("--configs", nargs="+", default=["plain", "ngram"], choices=["plain", "ngram"])
    add_closed_loop_arguments(ap)
    ap.add_argument("--llama-ngram", default="ngram-simple", help="llama-server's --spec-type for ngram")
    ap.add_argument("--turns", type=int, default=1, choices=[1, 2], help="turns per conversation")
    ap.add_argument("--out", type=Path, default=Path("bench-out/serve"))
    args = ap.parse_args()
    ensure_built(args.flavor)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = model_paths()
    import ggspec
    rows = []
    for name in args.models:
        model = ggspec.Model(paths[name], n_ctx=64, prefix_cache_mb=None)
        chat = model.has_chat_template
        texts = prompts(model.tokenizer, chat)
        del model
        for config in args.configs:
            for n in args.levels:
                results: dict[str, list[dict]] = {"ggspec": [], "llama": []}
                for round_ in range(args.rounds):
                    for side in (("ggspec", "llama") if round_ % 2 == 0 else ("llama", "ggspec")):
                        if side == "ggspec":
                            server = ggspec_server(paths[name], n, args.ctx, args.threads, config,
                                                   args.out / "ggspec-serve.log")
                            stop = server.stop
                        else:
                            server = LlamaServer(paths[name], n, args.ctx, args.threads,
                                                 args.llama_ngram if config == "ngram" else None, args.flavor)
                            stop = server.close
                        try:
                            r = level(server.port, chat, n, texts, args.requests, args.n, args.turns)
                        finally:
                            stop()
                        results[side].append(r)
                        print(f"{name} {config} N={n} round {round_} {side}: {r['tokens_per_second']:.1f} tok/s, "
                              f"TTFT p95 {1000 * r['ttft_p95']:.0f} ms", flush=True)
                med = {side: {k: statistics.median(r[k] for r in rs)
                              for k in ("tokens_per_second", "ttft_p95", "turn2_tokens_per_second")}
                       for side, rs in results.items()}
                ratios = [g["tokens_per_second"] / l["tokens_per_second"]
                          for g, l in zip(results["ggspec"], results["llama"])]
                rows.append({"model": name, "config": config, "n": n, **{f"{s}_{k}": v for s, m in med.items()
                                                                         for k, v in m.items()},
                             "ratio": statistics.median(ratios), "ratios": ratios})
    (args.out / "runs.json").write_text(json.dumps(rows, indent=1))
    print(f"\n| model | config | N | ggspec serve tok/s | llama-server tok/s | ratio (median of rounds) | "
          f"TTFT p95 ms ggspec / llama |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['config']} | {r['n']} | {r['ggspec_tokens_per_second']:.1f} | "
              f"{r['llama_tokens_per_second']:.1f} | {r['ratio']:.3f} | "
              f"{1000 * r['ggspec_ttft_p95']:.0f} / {1000 * r['llama_ttft_p95']:.0f} |")
    if args.turns == 2:
        print("\n| model | N | second turn tok/s, plain → ngram: ggspec serve | llama-server |\n|---|---|---|---|")
        for plain in (r for r in rows if r["config"] == "plain"):
            ngram = next((r for r in rows if r["config"] == "ngram" and r["model"] == plain["model"]
                          and r["n"] == plain["n"]), None)
            if ngram is not None:
                print(f"| {plain['model']} | {plain['n']} | " + " | ".join(
                    f"{plain[f'{s}_turn2_tokens_per_second']:.1f} → {ngram[f'{s}_turn2_tokens_per_second']:.1f} "
                    f"({ngram[f'{s}_turn2_tokens_per_second'] / plain[f'{s}_turn2_tokens_per_second']:.2f}x)"
                    for s in ("ggspec", "llama")) + " |")


if __name__ == "__main__":
    main()
