"""A target split over ggml RPC workers (`ggspec rpc-server`, loopback, started and
stopped here): the same bits as the local run, spec on == off, rollback on the
worker, and failures that name the worker."""

from __future__ import annotations

import gc
import json
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import numpy as np
import pytest

import ggspec
from ggspec.native import rpc
from ggspec.native.target import load
from ggspec.speculators.options import SpecOptions
from tests.rpc_workers import RpcWorker, free_port

pytestmark = pytest.mark.skipif(not rpc.available, reason="built with GGML_RPC=off")

PROMPT = [5, 9, 17, 33, 5, 9, 17, 40, 61, 7, 5, 9, 17, 33, 5, 9]
NGRAM = SpecOptions(spec_type="ngram", governor=False)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """The first runs a client's weight products on ggspec's kernels; the second on
    ggml's own ops, as any ggml worker (it answers the kernel query as one does)."""
    log = tmp_path_factory.mktemp("rpc")
    started = [RpcWorker(log / "worker0.log"), RpcWorker(log / "worker1.log", extra=("--no-kernels",))]
    yield started
    gc.collect()  # targets that outlived a failed test free their buffers while the workers run
    for w in started:
        assert w.stop() < 10, w.log.read_text()  # SIGTERM ends it while ggml's loop blocks
        assert w.proc.returncode == 0


def steps(target, tokens=PROMPT):
    """Logits of a prefill, a 5-row verify rolled back to 2 rows, and three one-row steps."""
    out = [target.spec_forward(tokens).logits]
    out.append(target.spec_forward([3, 4, 5, 6, 7], all_logits=True).logits)
    target.rewind(target.cache_seq_len - 3)
    out += [target.spec_forward([t]).logits for t in (11, 12, 13)]
    return out


@pytest.mark.parametrize("arch, shares, mmap", [("llama", None, True), ("gemma3", [2, 2, 2], False),
                                               ("qwen35", [3, 2, 3], True)])
def test_a_split_forward_has_the_local_bits(tiny_model, workers, arch, shares, mmap):
    """mmap=False: the local layers copied into private memory, the workers' not."""
    path = tiny_model(arch, "q8_0", n_layer=6 if arch != "qwen35" else 8)
    alone = load(path, n_ctx=128, n_threads=2)
    local, local_kernels = steps(alone), alone.row_kernels
    split = load(path, n_ctx=128, n_threads=2, rpc=[w.endpoint for w in workers], tensor_split=shares, mmap=mmap)
    used = [w.endpoint for w, share in zip(workers, shares or [1, 1]) if share]
    assert all(e in split.placement for e in used), split.placement
    assert split.row_kernels == local_kernels  # the local layers' and the LM head's path
    before = rpc.wire_counters()
    remote = steps(split)
    moved = rpc.wire_counters() - before
    for a, b in zip(local, remote):
        assert np.array_equal(a, b)
    assert moved.round_trips > 0 and moved.bytes_sent > 0
    del split


@pytest.mark.parametrize("dtype, row_kernels", [("q4_k", "auto"), ("f16", "auto"), ("q5_1", "auto"),
                                                ("q4_k", "avx2")])
def test_a_kernel_worker_runs_the_products_with_the_local_bits(tiny_model, workers, dtype, row_kernels):
    """Verify rows of every width from 2 to 9 on a ggspec worker's kernels (on the
    client's path); the kernel query tells a ggspec worker from a plain one."""
    path = tiny_model("llama", dtype, n_layer=4)
    alone = load(path, n_ctx=128, n_threads=2, row_kernels=row_kernels)
    split = load(path, n_ctx=128, n_threads=2, rpc=[w.endpoint for w in workers], tensor_split=[1, 1, 0],
                 row_kernels=row_kernels)
    assert f"{workers[0].endpoint}, ggspec kernels)" in split.placement, split.placement
    assert f"{workers[1].endpoint})" in split.placement, split.placement
    for target in (alone, split):
        target.spec_forward(PROMPT)
    for rows in range(2, 10):
        tokens = [(7 * rows + i) % 50 + 3 for i in range(rows)]
        want = alone.spec_forward(tokens, all_logits=True).logits
        got = split.spec_forward(tokens, all_logits=True).logits
        assert np.array_equal(want, got), rows
        for target in (alone, split):
            target.rewind(target.cache_seq_len - rows + 1)
    del split


def test_a_kernel_worker_runs_the_block_order(tiny_model, workers):
    """On vnni-block a ggspec worker takes the client's block order too (a plain
    worker would compute its layers in ggml's: the split's rows would agree with
    its own one-row steps, not with the local run's)."""
    if "vnni-block" not in ggspec._core.row_kernel_paths():
        pytest.skip("this CPU does not run the vnni kernels")
    path = tiny_model("llama", "q5_1", n_layer=4)
    alone = load(path, n_ctx=128, n_threads=2, row_kernels="vnni-block")
    split = load(path, n_ctx=128, n_threads=2, rpc=[workers[0].endpoint], tensor_split=[1, 1],
                 row_kernels="vnni-block")
    assert split.row_kernels == "vnni-block"
    assert f"{workers[0].endpoint}, ggspec kernels)" in split.placement, split.placement
    for a, b in zip(steps(alone), steps(split)):
        assert np.array_equal(a, b)
    del split


def test_a_rollback_keeps_the_recurrent_state_on_the_worker(tiny_model, workers):
    path = tiny_model("qwen35", "q8_0", n_layer=8)
    split = load(path, n_ctx=128, n_threads=2, rpc=workers[0].endpoint, tensor_split=[3, 5])
    split.spec_forward(PROMPT)
    split.spec_forward([3, 4, 5, 6, 7], all_logits=True)
    before = rpc.wire_counters()
    split.rewind(split.cache_seq_len - 3)  # commits the kept row's state: copies on the worker
    moved = rpc.wire_counters() - before
    assert split.state_transfer_bytes == 0
    assert moved.bytes_received < split.sequence_state_bytes // 8, moved
    del split


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen35"])
def test_speculation_over_a_split_is_plain_local_decoding(tiny_model, workers, arch):
    """Greedy and seeded, plain, n-gram and a local draft model: every output is the local plain one."""
    path = tiny_model(arch, "q8_0", n_layer=6 if arch != "qwen35" else 8)
    shares = [3, 2, 3] if arch == "qwen35" else [1, 1, 1]
    specs = {"plain": False, "ngram": NGRAM,
             "draft": SpecOptions(draft_model=tiny_model(arch, "f32", n_layer=4), governor=False)}
    outputs = {}
    for name, options in (("local", {}), ("split", dict(rpc=[w.endpoint for w in workers], tensor_split=shares))):
        model = ggspec.Model(path, n_ctx=128, n_threads=2, **options)
        with ggspec.Engine(model) as engine:
            for sampling in (dict(temperature=0), dict(temperature=0.8, top_p=0.95, seed=11)):
                for spec_name, spec in specs.items():
                    r = engine.submit(PROMPT, max_tokens=24, ignore_eos=True, spec=spec, **sampling).result
                    outputs[name, sampling["temperature"], spec_name] = r.tokens
                    assert spec_name != "draft" or r.stats["draft_n"] > 0  # n-gram drafts only on repeats
        del model, engine
        gc.collect()  # a worker serves one client at a time: this one lets go of it now
    assert len(set(map(tuple, (v for k, v in outputs.items() if k[1] == 0)))) == 1, outputs
    assert len(set(map(tuple, (v for k, v in outputs.items() if k[1] != 0)))) == 1, outputs


def test_a_worker_that_is_not_running_is_named(tiny_model):
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(ValueError, match=f"RPC worker {endpoint} is not running"):
        load(tiny_model("llama"), n_ctx=64, rpc=endpoint)
    with pytest.raises(ValueError, match="not host:port"):
        load(tiny_model("llama"), n_ctx=64, rpc="127.0.0.1")


def test_bad_split_options_are_refused(tiny_model, workers):
    with pytest.raises(ValueError, match="tensor_split has 2 shares; 3 expected"):
        load(tiny_model("llama"), n_ctx=64, rpc=[w.endpoint for w in workers], tensor_split=[1, 1])
    with pytest.raises(ValueError, match="listed twice"):
        load(tiny_model("llama"), n_ctx=64, rpc=[workers[0].endpoint] * 2)


@pytest.mark.parametrize("failure", ["killed", "silent"])
def test_a_lost_worker_ends_the_client_with_one_line_naming_it(tiny_model, tmp_path, failure):
    """Killed (SIGKILL: the connection drops), or silent (SIGSTOP: a partition, as the
    client sees it, given up on after rpc_timeout_s): one line and exit status 1, never
    SIGABRT's core dump or a wait without end."""
    worker = RpcWorker(tmp_path / "worker.log")
    path = tiny_model("llama", "q8_0", n_layer=6)
    script = textwrap.dedent(f"""
        import time, ggspec
        model = ggspec.Model({path!r}, n_ctx=512, n_threads=1, rpc={worker.endpoint!r}, rpc_timeout_s=1.5,
                             prefix_cache_mb=None)
        with ggspec.Engine(model) as engine:
            deadline = time.monotonic() + 60
            print("generating", flush=True)
            while time.monotonic() < deadline:
                engine.submit([5, 9, 17], max_tokens=400, ignore_eos=True).result
        """)
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert client.stdout.readline().strip() == "generating"
        time.sleep(0.3)
        if failure == "killed":
            worker.stop(signal.SIGKILL)
        else:
            worker.proc.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        _, err = client.communicate(timeout=30)
        waited = time.monotonic() - start
    finally:
        client.kill()
        worker.proc.send_signal(signal.SIGCONT)
        worker.stop()
    assert client.returncode == 1 and waited < 10, (waited, err)
    last = err.strip().splitlines()[-1]
    what = "did not answer within 1.5 s (--rpc-timeout)" if failure == "silent" else "closed the connection"
    assert last == f"ggspec: the RPC worker at {worker.endpoint} {what}; generation stopped" or (
        failure == "killed" and last.startswith(f"ggspec: the RPC worker at {worker.endpoint} failed")), err


def test_the_cli_splits_and_serves(tiny_model, workers):
    path = tiny_model("llama", "q8_0", n_layer=6)
    args = ["-m", path, "-p", "hello", "-n", "8", "--temp", "0", "-c", "128", "-t", "1", "--json", "--spec-type", "ngram"]
    local = subprocess.run([sys.executable, "-m", "ggspec", "generate", *args], capture_output=True, text=True,
                           timeout=120)
    split = subprocess.run([sys.executable, "-m", "ggspec", "generate", *args, "--rpc", workers[0].endpoint,
                            "--tensor-split", "1,1"], capture_output=True, text=True, timeout=120)
    assert local.returncode == 0 and split.returncode == 0, local.stderr + split.stderr
    assert json.loads(split.stdout)["tokens"] == json.loads(local.stdout)["tokens"]
    bad = subprocess.run([sys.executable, "-m", "ggspec", "generate", *args, "--tensor-split", "1,1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "--tensor-split needs --rpc" in bad.stderr



def test_a_local_block_drafter_reads_taps_from_the_workers(tiny_model, workers, tmp_path):
    """DFlash stays local; its target layers' rows come back from both workers every step,
    the first worker's two concatenated there. The drafts (which read them) are the local
    run's, as well as the output."""
    from tests.fixtures.tiny_dflash import write_tiny_dflash

    path = tiny_model("qwen3", "q8_0", n_layer=6)
    drafter = str(write_tiny_dflash(tmp_path / "drafter.gguf", target_layers=(1, 2, 4)))
    spec = SpecOptions(draft_model=drafter, governor=False)
    outputs, drafts = [], []
    for options in ({}, dict(rpc=[w.endpoint for w in workers], tensor_split=[1, 1, 1])):
        model = ggspec.Model(path, n_ctx=128, n_threads=2, **options)
        with ggspec.Engine(model) as engine:
            drafted = engine.submit(PROMPT, max_tokens=24, ignore_eos=True, spec=spec, temperature=0).result
            plain = engine.submit(PROMPT, max_tokens=24, ignore_eos=True, spec=False, temperature=0).result
        assert drafted.tokens == plain.tokens and drafted.stats["draft_n"] > 0
        outputs.append(drafted.tokens)
        drafts.append((drafted.stats["draft_n"], drafted.stats["draft_n_accepted"]))
        del model, engine
        gc.collect()  # a worker serves one client at a time: this one lets go of it now
    assert outputs[0] == outputs[1] and drafts[0] == drafts[1]
    assert drafted.stats["rpc_round_trips"] > 0 and drafted.stats["rpc_bytes"] > 0


def test_serve_splits_too(tiny_model, workers, tmp_path):
    from tests.server_process import ServerProcess

    path = tiny_model("llama", "q8_0", n_layer=6)
    server = ServerProcess(["-m", path, "-c", "128", "-t", "1", "--rpc", workers[0].endpoint, "--tensor-split", "1,1"],
                           tmp_path / "serve.log")
    try:
        request = urllib.request.Request(server.url + "/v1/completions", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"prompt": "hello", "max_tokens": 8, "temperature": 0}).encode())
        with urllib.request.urlopen(request, timeout=60) as response:
            timings = json.loads(response.read())["timings"]
    finally:
        assert server.stop() == 0
    assert timings["rpc_round_trips"] > 0 and timings["rpc_bytes"] > 0
