"""`ggspec serve` under load, bounded in count and time: 32 concurrent clients
with mixed prompts, output lengths, sampling and spec types, a quarter of them
cancelled mid-stream. Nothing is lost, every completed response equals the same
request alone, and the server stays healthy with counters that add up."""

from __future__ import annotations

import random
import statistics
import threading
import time

import openai
import pytest

from tests.server_process import ServerProcess
from tests.test_server import CTX, metric

CLIENTS = 32
PROMPTS = ["Write a haiku about rain.", "List five fruits, one per line.", "Explain what a compiler does.",
           "Repeat after me: red, green, blue, red, green, blue.", "What is the capital of Italy?",
           "Tell me a very short story about a fox."]
SPEC_TYPES = ("auto", "ngram", "none", "draft-head")  # SmolLM2 has no head: that one declines


def job(i: int) -> dict:
    rng = random.Random(i)
    return {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
            "max_tokens": rng.randint(8, 40),
            "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 2**32 - 1),
            "stream": rng.random() < 0.5 or i % 4 == 0,
            "extra_body": {"speculative": {"type": SPEC_TYPES[i % len(SPEC_TYPES)]}, "return_tokens": True},
            "cancel_after": 3 if i % 4 == 0 else None}


def run(client, spec: dict) -> dict:
    spec = dict(spec)
    cancel_after = spec.pop("cancel_after")
    t0 = time.monotonic()
    if not spec["stream"]:
        r = client.chat.completions.create(model="m", **spec).to_dict()
        return {"text": r["choices"][0]["message"]["content"], "tokens": r["choices"][0]["tokens"],
                "seconds": time.monotonic() - t0, "finish": r["choices"][0]["finish_reason"]}
    stream = client.chat.completions.create(model="m", **spec)
    text, tokens, finish = [], None, None
    for n, chunk in enumerate(stream):
        c = chunk.to_dict()
        if cancel_after is not None and n == cancel_after:
            stream.close()
            return {"cancelled": True, "seconds": time.monotonic() - t0}
        if c["choices"]:
            text.append(c["choices"][0]["delta"].get("content") or "")
            finish = c["choices"][0]["finish_reason"] or finish
            tokens = c["choices"][0].get("tokens", tokens)
    return {"text": "".join(text), "tokens": tokens, "seconds": time.monotonic() - t0, "finish": finish}


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    process = ServerProcess(["-m", smollm2_path, "--slots", "4", *CTX], tmp_path_factory.mktemp("load") / "serve.log")
    yield process
    assert process.stop() == 0, process.log.read_text()


def test_32_clients_a_quarter_cancelled_each_completed_one_equals_its_solo_run(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)
    jobs = [job(i) for i in range(CLIENTS)]
    results: dict[int, dict] = {}
    errors: dict[int, BaseException] = {}

    def client_thread(i):
        try:
            results[i] = run(client, jobs[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[i] = e

    served_before = metric(server, "ggspec:request_success_total")
    threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(CLIENTS)]
    t0 = time.monotonic()
    [t.start() for t in threads]
    [t.join(max(1.0, 600 - (time.monotonic() - t0))) for t in threads]
    wall = time.monotonic() - t0
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, errors
    completed = {i: r for i, r in results.items() if not r.get("cancelled")}
    latencies = sorted(r["seconds"] for r in completed.values())
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    print(f"load: {len(results)} requests served ({len(results) - len(completed)} cancelled), {len(errors)} errors, "
          f"{wall:.1f} s wall, latency median {statistics.median(latencies):.2f} s, p95 {p95:.2f} s")
    assert len(results) == CLIENTS and len(completed) >= CLIENTS * 3 // 4 - 1

    # every request ended in the engine, the cancelled ones included; then no slot is left busy
    deadline = time.monotonic() + 30
    while metric(server, "ggspec:request_success_total") - served_before < CLIENTS:
        assert time.monotonic() < deadline, "a request never ended"
        time.sleep(0.05)
    assert metric(server, "ggspec:num_requests_running") + metric(server, "ggspec:num_requests_waiting") == 0

    # the same requests alone, one at a time: the same tokens and text; the counters add up
    tokens_before = metric(server, "ggspec:generation_tokens_total")
    drafts_before = metric(server, "ggspec:spec_decode_num_draft_tokens_total")
    solo_drafts = 0
    for i, r in sorted(completed.items()):
        spec = {k: v for k, v in jobs[i].items() if k != "cancel_after"}
        solo = client.chat.completions.create(model="m", **{**spec, "stream": False}).to_dict()
        assert solo["choices"][0]["tokens"] == r["tokens"], i
        assert solo["choices"][0]["message"]["content"] == r["text"], i
        assert solo["choices"][0]["finish_reason"] == r["finish"], i
        solo_drafts += solo["timings"]["draft_n"]
        if jobs[i]["extra_body"]["speculative"]["type"] == "draft-head":
            assert "draft-head" in solo["timings"]["spec_decline_reason"]
    assert metric(server, "ggspec:generation_tokens_total") - tokens_before == sum(
        len(r["tokens"]) for r in completed.values())
    assert metric(server, "ggspec:spec_decode_num_draft_tokens_total") - drafts_before == solo_drafts
    assert server.get("/health") == (200, b'{"status":"ok"}')
