"""`ggspec serve` through the official `openai` client, on a live server on
127.0.0.1: every seeded response equals `ggspec generate` of the same request
(tokens and text), and every bad field is a 4xx that names it."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import openai
import pytest

from ggspec.server.protocol import CompletionRequest
from ggspec.server.service import ServerConfig, Service
from tests.browser import Browser
from tests.server_process import ServerProcess
from tests.test_cli import ggspec

KEY = "test-key"
CTX = ["-c", "1024", "-t", "2"]
MESSAGE = "Write two sentences about the sea."


def output_dir(tmp_path: Path) -> Path:
    """Where a test keeps what it shows (GGSPEC_TEST_OUTPUT, else its tmp_path)."""
    path = Path(os.environ.get("GGSPEC_TEST_OUTPUT", tmp_path))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "serve.log"
    process = ServerProcess(["-m", smollm2_path, "--slots", "2", "--max-queue", "1", *CTX], log, api_key=KEY)
    yield process
    assert process.stop() == 0, log.read_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def generated(smollm2_path, *args) -> dict:
    proc = ggspec("generate", "-m", smollm2_path, *CTX, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def chat(client, content=MESSAGE, **options):
    return client.chat.completions.create(model="any", messages=[{"role": "user", "content": content}],
                                          extra_body={"return_tokens": True, **options.pop("extra_body", {})},
                                          **options)


def streamed(stream) -> tuple[str, list[dict]]:
    chunks = [c.to_dict() for c in stream]
    text = "".join(c["choices"][0].get("delta", {}).get("content") or c["choices"][0].get("text") or ""
                   for c in chunks if c["choices"])
    return text, chunks


def test_seeded_chat_equals_generate_streamed_or_not(client, smollm2_path):
    solo = generated(smollm2_path, "--chat", "-p", MESSAGE, "--seed", "7", "--temp", "0.8", "-n", "32")
    whole = chat(client, seed=7, temperature=0.8, max_tokens=32).to_dict()
    choice = whole["choices"][0]
    assert choice["message"]["content"] == solo["text"]
    assert choice["tokens"] == solo["tokens"]
    assert whole["usage"]["completion_tokens"] == len(solo["tokens"])
    assert whole["usage"]["prompt_tokens"] == len(solo["prompt_tokens"])
    assert choice["finish_reason"] == ("length" if len(solo["tokens"]) == 32 else "stop")
    t = whole["timings"]
    assert t["predicted_n"] == len(solo["tokens"]) and t["seed"] == 7
    assert t["prompt_n"] + t["cache_n"] == len(solo["prompt_tokens"])
    assert {"draft_n", "draft_n_accepted", "mean_acceptance_length", "spec_type"} <= t.keys()

    text, chunks = streamed(chat(client, seed=7, temperature=0.8, max_tokens=32, stream=True,
                                 stream_options={"include_usage": True}))
    assert text == solo["text"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["tokens"] == solo["tokens"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(solo["tokens"])
    assert "timings" in chunks[-1] and all("timings" not in c for c in chunks[:-1])


def test_greedy_completion_equals_generate(client, smollm2_path):
    prompt = "The three primary colors are"
    solo = generated(smollm2_path, "-p", prompt, "--temp", "0", "-n", "24")
    whole = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=24,
                                      extra_body={"return_tokens": True}).to_dict()
    assert whole["object"] == "text_completion"
    assert whole["choices"][0]["text"] == solo["text"]
    assert whole["choices"][0]["tokens"] == solo["tokens"]
    text, chunks = streamed(client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=24,
                                                      stream=True))
    assert text == solo["text"]
    assert "timings" in chunks[-1]
    # token ids as the prompt, as llama-server takes them
    ids = client.completions.create(model="m", prompt=solo["prompt_tokens"], temperature=0, max_tokens=24)
    assert ids.choices[0].text == solo["text"]


def test_stop_strings_match_across_tokens_and_are_not_emitted(client, smollm2_path):
    prompt = "Once upon a time"
    free = generated(smollm2_path, "-p", prompt, "--temp", "0", "-n", "40", "--ignore-eos")
    text = free["text"]
    stop = text[len(text) // 2:len(text) // 2 + 6]  # six characters from the middle: spans tokens
    expected = text[:text.find(stop)]
    solo = generated(smollm2_path, "-p", prompt, "--temp", "0", "-n", "40", "--ignore-eos", "--stop", stop)
    assert solo["text"] == expected and solo["stats"]["stop"] == "stop"
    options = dict(model="m", prompt=prompt, temperature=0, max_tokens=40, stop=[stop, "never-in-the-text"],
                   extra_body={"ignore_eos": True})
    whole = client.completions.create(**options)
    assert whole.choices[0].text == expected
    assert whole.choices[0].finish_reason == "stop"
    assert streamed(client.completions.create(**options, stream=True))[0] == expected


def test_concurrent_requests_each_equal_their_solo_run(client, smollm2_path):
    seeds = (3, 11, 29)
    solos = {s: generated(smollm2_path, "--chat", "-p", MESSAGE, "--seed", str(s), "-n", "24") for s in seeds}
    results = {}

    def run(seed):
        results[seed] = chat(client, seed=seed, max_tokens=24, stream=seed == 11)

    threads = [threading.Thread(target=run, args=(s,)) for s in seeds]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    for seed in seeds:
        r = results[seed]
        text = streamed(r)[0] if seed == 11 else r.choices[0].message.content
        assert text == solos[seed]["text"], seed


def test_speculation_per_request_and_a_second_turn_from_the_cache(client):
    plain = chat(client, temperature=0, max_tokens=16, extra_body={"speculative": {"type": "none"}}).to_dict()
    assert plain["timings"]["spec_type"] == "none" and plain["timings"]["draft_n"] == 0
    flat = chat(client, temperature=0, max_tokens=16, extra_body={"speculative.type": "ngram",
                                                                  "speculative.n_max": 4}).to_dict()
    assert flat["timings"]["spec_type"] == "ngram"
    assert flat["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    turn1 = [{"role": "user", "content": MESSAGE},
             {"role": "assistant", "content": plain["choices"][0]["message"]["content"]},
             {"role": "user", "content": "Repeat that exactly."}]
    second = client.chat.completions.create(model="m", messages=turn1, temperature=0, max_tokens=16).to_dict()
    assert second["timings"]["cache_n"] > 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == second["timings"]["cache_n"]


def test_logprobs_from_the_trunk_rows_in_both_forms(client):
    whole = chat(client, temperature=0, max_tokens=12, logprobs=True, top_logprobs=2).to_dict()
    content = whole["choices"][0]["logprobs"]["content"]
    assert len(content) == whole["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in content) == whole["choices"][0]["message"]["content"]
    for e in content:
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 2
        assert e["top_logprobs"][0]["token"] == e["token"]  # greedy: the row's best
        assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]
        assert bytes(e["bytes"]).decode() == e["token"]
    chunks = streamed(chat(client, temperature=0, max_tokens=12, logprobs=True, top_logprobs=2, stream=True))[1]
    entries = [(c["choices"][0]["delta"].get("content") or "", (c["choices"][0]["logprobs"] or {}).get("content", []))
               for c in chunks if c["choices"]]
    assert [e for _, es in entries for e in es] == content
    assert all("".join(e["token"] for e in es) == text for text, es in entries)  # each chunk, its own tokens'
    assert sum(len(es) > 0 for _, es in entries) > 1
    options = dict(model="m", prompt="The sky is", temperature=0, max_tokens=8, logprobs=3)
    legacy = client.completions.create(**options).to_dict()["choices"][0]
    lp = legacy["logprobs"]
    assert "".join(lp["tokens"]) == legacy["text"] and len(lp["token_logprobs"]) == len(lp["tokens"])
    assert lp["text_offset"][0] == 0 and all(len(top) == 3 for top in lp["top_logprobs"])
    pieces = [c["choices"][0]["logprobs"] for c in streamed(client.completions.create(**options, stream=True))[1]]
    assert [t for p in pieces if p for t in p["token_logprobs"]] == lp["token_logprobs"]
    assert [o for p in pieces if p for o in p["text_offset"]] == lp["text_offset"]


@pytest.mark.parametrize("body, field, words", [
    ({"foo": 1}, "foo", "unknown field"),
    ({"temperature": -1}, "temperature", "greater than or equal"),
    ({"top_p": 2}, "top_p", "less than or equal"),
    ({"seed": -3}, "seed", "greater than or equal"),
    ({"max_tokens": 0}, "max_tokens", "greater than or equal"),
    ({"max_tokens": "12"}, "max_tokens", "integer"),
    ({"n": 2}, "n", "only n=1"),
    ({"stop": [""]}, "stop", "empty"),
    ({"top_logprobs": 2}, "top_logprobs", "needs logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "less than or equal"),
    ({"frequency_penalty": 0.5}, "frequency_penalty", "not supported"),
    ({"speculative": {"type": "medusa"}}, "speculative.type", "unknown speculation type"),
    ({"speculative": {"n_max": 0}}, "speculative.n_max", "greater than or equal"),
    ({"speculative.p_min": 3}, "speculative.p_min", "less than or equal"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs", "set by ggspec"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content", "only text parts"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "robot"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "must be a string"),
    ({"stop": 5}, "stop", "a string or a list of strings"),
    ({"stream": "yes"}, "stream", "valid boolean"),
    ({"reasoning_effort": "high"}, "reasoning_effort", "unknown field"),
    ({"messages": []}, "messages", "at least 1"),
    ({"messages": [{"role": "user", "content": "word " * 1100}]}, "messages", "context holds 1024"),
])
def test_a_bad_field_is_a_400_that_names_it(client, body, field, words):
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/chat/completions", body=request, cast_to=dict)
    error = e.value.body
    assert e.value.status_code == 400
    assert field in error["message"] and words in error["message"], error


@pytest.mark.parametrize("prompt, words", [(5, "must be a string"), ([1, -2], "token id -2 is negative"),
                                            (["a", "b"], "a list of one string"), ([], "non-empty list")])
def test_a_bad_prompt_is_a_400_that_names_it(client, prompt, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/completions", body={"prompt": prompt, "max_tokens": 2}, cast_to=dict)
    assert e.value.body["param"] == "prompt" and words in e.value.body["message"], e.value.body


def test_nulls_and_openai_service_fields_are_accepted(client):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": None,
            "n": None, "logprobs": None, "presence_penalty": None, "store": False, "metadata": {"a": "b"},
            "service_tier": "auto", "user": "u", "seed": -1, "parallel_tool_calls": True}
    reply = client.post("/chat/completions", body=body, cast_to=dict)
    assert reply["usage"]["completion_tokens"] <= 2 and reply["choices"][0]["logprobs"] is None


def test_endpoints_and_the_api_key(server, client):
    assert server.get("/health", key=None) == (200, b'{"status":"ok"}')
    for path in ("/v1/models", "/slots", "/metrics"):
        status, body = server.get(path, key=None)
        assert status == 401 and b"API key" in body, path
        assert server.get(path, key="wrong")[0] == 401
    keyless = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        chat(keyless, max_tokens=2)
    models = client.models.list().to_dict()
    assert models["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    status, body = server.get("/slots")
    assert status == 200 and [s["id"] for s in json.loads(body)] == [0, 1]


def metric(server, name: str) -> float:
    text = server.get("/metrics")[1].decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def finished(server, reason: str) -> float:
    """Requests that ended for this reason so far."""
    return metric(server, f'ggspec:request_success_total{{finished_reason="{reason}"}}')


def test_metrics_count_what_the_responses_report(server, client):
    names = ("ggspec:generation_tokens_total", "ggspec:spec_decode_num_draft_tokens_total",
             "ggspec:spec_decode_num_accepted_tokens_total", "ggspec:prompt_tokens_total")
    before = {n: metric(server, n) for n in names}
    repeat = "Repeat this list: apple, pear, plum, fig, apple, pear, plum, fig, apple, pear."
    responses = [chat(client, repeat, temperature=0, max_tokens=24, extra_body={"speculative": {"type": t}})
                 for t in ("ngram", "none", "ngram")]
    timings = [r.to_dict()["timings"] for r in responses]
    usage = [r.usage for r in responses]
    assert metric(server, names[0]) - before[names[0]] == sum(u.completion_tokens for u in usage)
    assert metric(server, names[1]) - before[names[1]] == sum(t["draft_n"] for t in timings)
    assert metric(server, names[2]) - before[names[2]] == sum(t["draft_n_accepted"] for t in timings)
    assert metric(server, names[3]) - before[names[3]] == sum(u.prompt_tokens for u in usage)
    assert sum(t["draft_n"] for t in timings) > 0
    assert metric(server, "ggspec:time_to_first_token_seconds_count") >= 3


def test_a_non_streaming_client_that_leaves_frees_its_slot(server):
    cancelled = finished(server, "cancelled")
    impatient = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=1.5)
    with pytest.raises(openai.APITimeoutError):
        chat(impatient, "Count to a thousand.", temperature=0, max_tokens=900,
             extra_body={"ignore_eos": True, "speculative": {"type": "none"}})
    # it ends either way: cancelled (the server saw the client leave), or at its 900 tokens (8 s or more)
    ran_out = finished(server, "length")
    deadline = time.monotonic() + 120
    while finished(server, "cancelled") == cancelled and finished(server, "length") == ran_out:
        assert time.monotonic() < deadline, "the request never ended"
        time.sleep(0.05)
    assert finished(server, "cancelled") == cancelled + 1, "a client that left kept its slot to the end"
    assert metric(server, "ggspec:num_requests_running") + metric(server, "ggspec:num_requests_waiting") == 0


def test_a_full_queue_is_a_503_and_a_client_that_leaves_frees_its_slot(server, client):
    cancelled = finished(server, "cancelled")
    long = dict(temperature=0, max_tokens=900, extra_body={"ignore_eos": True})
    streams = [chat(client, f"Count to a thousand, {i}.", stream=True, **long) for i in range(3)]
    deadline = time.monotonic() + 60
    while metric(server, "ggspec:num_requests_running") < 2 or metric(server, "ggspec:num_requests_waiting") < 1:
        assert time.monotonic() < deadline, "the three requests did not fill two slots and the queue"
        time.sleep(0.05)
    with pytest.raises(openai.APIStatusError) as e:
        chat(client, max_tokens=4)
    assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "1"
    assert "queue is full" in e.value.body["message"]
    busy = [s for s in json.loads(server.get("/slots")[1]) if s["is_processing"]]
    assert len(busy) == 2 and all(s["spec_type"] == "ngram" and "Count to a thousand" in s["prompt"] for s in busy)
    for stream in streams:
        next(iter(stream))
        stream.close()
    deadline = time.monotonic() + 30
    while finished(server, "cancelled") < cancelled + 3:
        assert time.monotonic() < deadline, "closed streams were not cancelled"
        time.sleep(0.05)
    assert metric(server, "ggspec:num_requests_running") + metric(server, "ggspec:num_requests_waiting") == 0
    assert chat(client, temperature=0, max_tokens=4).choices[0].finish_reason == "length"


def test_the_chat_page_streams_the_reply_the_api_gives(server, client, tmp_path):
    api = chat(client, seed=7, temperature=0.8, max_tokens=32).choices[0].message.content
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(server.url + "/")
        browser.evaluate(f"""(() => {{
            const set = (id, value) => {{ const e = document.getElementById(id); e.value = value;
                                         e.dispatchEvent(new Event("change")); }};
            set("api-key", {json.dumps(KEY)}); set("seed", "7"); set("temperature", "0.8"); set("max-tokens", "32");
            document.getElementById("prompt").value = {json.dumps(MESSAGE)};
            document.getElementById("composer").requestSubmit();
        }})()""")
        browser.wait_for("document.querySelector('#messages li.assistant')?.dataset.done === '1'", timeout=60)
        reply = browser.evaluate("document.querySelector('#messages li.assistant .content').textContent")
        stats = browser.evaluate("document.querySelector('#messages li.assistant .stats')?.textContent")
        model = browser.evaluate("document.getElementById('model').textContent")
        shot = output_dir(tmp_path) / "chat-page.png"
        browser.screenshot(shot)
    finally:
        browser.close()
    print(f"chat page screenshot: {shot}")
    assert reply == api
    assert stats and "tok/s" in stats and "spec ngram" in stats, stats
    assert model == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert shot.stat().st_size > 10_000


def test_a_missing_model_is_one_line_before_listening():
    proc = ggspec("serve", "-m", "/nonexistent/model.gguf", "--port", "0", timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "ggspec: error: model file not found: /nonexistent/model.gguf"


def test_a_model_without_a_chat_template_chats_in_chatml(tiny_model, tmp_path):
    path = tiny_model("llama", "q8_0")
    process = ServerProcess(["-m", path, "-c", "256", "-t", "2"], tmp_path / "serve.log")
    try:
        client = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0, timeout=60)
        reply = chat(client, "a b c", temperature=0, max_tokens=24)
        model = client.models.list().to_dict()["data"][0]
    finally:
        assert process.stop() == 0
    rendered = "<|im_start|>user\na b c<|im_end|>\n<|im_start|>assistant\n"
    solo = generated(path, "-p", rendered, "--temp", "0", "-n", "24", "-c", "256", "--stop", "<|im_end|>")
    assert reply.choices[0].message.content == solo["text"]
    assert reply.to_dict()["choices"][0]["tokens"] == solo["tokens"]
    assert model["meta"]["chat_template"] == "ChatML (the model has none)"
    assert "no chat template: chat requests use ChatML" in process.log.read_text()


def test_shutdown_finishes_what_ends_in_its_grace_and_cancels_the_rest(smollm2_path, tmp_path):
    process = ServerProcess(["-m", smollm2_path, "--slots", "2", *CTX], tmp_path / "serve.log")
    client = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0, timeout=60)
    ends = {}

    def run(name, max_tokens):
        stream = client.completions.create(model="m", prompt=f"List the numbers {name}:", max_tokens=max_tokens,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True, "speculative": {"type": "none"}})
        chunks = []
        try:
            for chunk in stream:
                chunks.append(chunk)
                if len(chunks) == 2:
                    started.release()
        except openai.APIError:  # the connection closes mid-stream
            pass
        ends[name] = (chunks[-1].choices[0].finish_reason if chunks[-1].choices else "usage", len(chunks))

    started = threading.Semaphore(0)
    threads = [threading.Thread(target=run, args=("short", 24)), threading.Thread(target=run, args=("long", 1000))]
    [t.start() for t in threads]
    assert started.acquire(timeout=60) and started.acquire(timeout=60)
    t0 = time.monotonic()
    process.proc.send_signal(2)  # SIGINT: the server's grace is 5 s
    [t.join(60) for t in threads]
    assert process.proc.wait(30) == 0, process.log.read_text()  # a second SIGINT would force it
    process.stop()
    assert time.monotonic() - t0 < 40  # the 5 s grace, then the long one cut and the model freed
    log = process.log.read_text()
    assert "server stopped" in log and "Traceback" not in log, log
    assert ends["short"][0] == "length"           # it finished in the grace
    assert ends["long"][0] is None and ends["long"][1] < 1000  # cut: no finish reason, far from its budget


def test_a_request_that_fails_in_the_engine_leaves_no_trace(tiny_model):
    service = Service(ServerConfig(model_path=tiny_model("llama", "q8_0"), n_ctx=256, n_threads=2, max_queue=1))
    service.load()
    try:
        def broken(*_args, **_options):
            raise RuntimeError("forward failed")

        service.model.target.spec_forward = broken
        for _ in range(3):  # more than a slot and the queue hold
            _, stream = service.submit(CompletionRequest(prompt="a b c", max_tokens=4))
            with pytest.raises(RuntimeError, match="forward failed"):
                stream.result
        assert service.running() == service.waiting() == 0 and service.in_flight == {}
    finally:
        service.close()


def test_a_draft_head_drafts_after_a_reused_prefix(tiny_model, tmp_path):
    process = ServerProcess(["-m", tiny_model("qwen35"), "-c", "256", "-t", "2", "--spec-governor", "off",
                             "--spec-pmin", "0"], tmp_path / "serve.log")
    try:
        client = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0, timeout=60)
        prompt = [5 + (i * 7) % 300 for i in range(40)]
        first = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=4).to_dict()
        second = client.completions.create(model="m", prompt=prompt + [11, 12, 13], temperature=0,
                                           max_tokens=4).to_dict()
    finally:
        assert process.stop() == 0
    for timings in (first["timings"], second["timings"]):
        assert timings["spec_type"] == "draft-head" and timings["spec_decline_reason"] is None
        assert timings["draft_n"] > 0
    assert second["timings"]["cache_n"] > 0


def test_a_declined_speculator_says_why_in_timings_and_the_log(tiny_model, tmp_path):
    process = ServerProcess(["-m", tiny_model("llama"), "-c", "256", "-t", "2", "--spec-type", "draft-head"],
                            tmp_path / "serve.log")
    try:
        client = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0, timeout=60)
        out = client.completions.create(model="m", prompt="a b c", temperature=0, max_tokens=4).to_dict()
    finally:
        assert process.stop() == 0
    reason = out["timings"]["spec_decline_reason"]
    assert out["timings"]["spec_type"] == "none" and reason.startswith("draft-head: no draft head")
    assert f"speculation declined: {reason}" in process.log.read_text()


def test_a_draft_model_attaches_at_load_and_serves_plain_output(tiny_model, tmp_path):
    import ggspec

    path, draft = tiny_model("llama", "q8_0"), tiny_model("llama", "f32")
    process = ServerProcess(["-m", path, "-c", "256", "-t", "2", "--draft-model", draft, "--spec-governor", "off"],
                            tmp_path / "serve.log")
    try:
        assert "attached (draft)" in process.log.read_text()  # before /health said ok
        client = openai.OpenAI(base_url=process.url + "/v1", api_key="none", max_retries=0, timeout=60)
        prompt = [5 + (i * 7) % 300 for i in range(20)]
        reply = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=24,
                                          extra_body={"return_tokens": True}).to_dict()
    finally:
        assert process.stop() == 0
    assert reply["timings"]["spec_type"] == "draft" and reply["timings"]["draft_n"] > 0
    with ggspec.Engine(ggspec.Model(path, n_ctx=256, n_threads=2)) as engine:
        plain = engine.submit(prompt, max_tokens=24, temperature=0, spec=False).result
    assert reply["choices"][0]["tokens"] == plain.tokens


def test_a_draft_model_of_another_vocabulary_stops_the_server_at_load(tiny_model):
    other = tiny_model("llama", "f32", metadata=(("tokenizer.ggml.bos_token_id", 3),))
    proc = ggspec("serve", "-m", tiny_model("llama", "q8_0"), "--port", "0", "--draft-model", other, timeout=60)
    assert proc.returncode == 1
    assert "vocabulary is not the target's (its BOS token is id 3" in proc.stderr
