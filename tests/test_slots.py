"""Many sequences in one forward: every row of a batched forward has the bits its
sequence alone would give, and every request an Engine with several slots
serves gets the tokens it gets alone, whatever the other slots do."""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggspec
from ggspec.native.target import BatchItem
from ggspec.speculators.options import SpecOptions
from tests.fixtures.tiny_dflash import write_tiny_dflash

N_SEQS = 4
N_CTX = 256
CHUNK = 32  # prefill chunk: with gemma3's window of 8 its ring is 64 slots, which rewinds wrap


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint32).tobytes()


# --- the target: forward_batch against each sequence alone -------------------

@pytest.fixture(scope="module", params=[("llama", "q8_0", "auto"), ("gemma3", "q4_k", "auto"),
                                        ("gemma3", "f16", "off"), ("qwen35", "q8_0", "auto"),
                                        ("qwen35moe", "q4_0", "auto"), ("llama", "q5_1", "vnni-block")],
                ids=lambda p: "-".join(p))
def targets(request, tiny_model):
    arch, dtype, kernels = request.param
    if kernels not in ("auto", "off", *ggspec._core.row_kernel_paths()):
        pytest.skip(f"this CPU does not run the {kernels} kernels")
    path = tiny_model(arch, dtype)
    batched = ggspec.load(path, n_ctx=N_CTX, prefill_chunk=CHUNK, row_kernels=kernels)
    batched.set_sequences(N_SEQS)
    alone = [ggspec.load(path, n_ctx=N_CTX, prefill_chunk=CHUNK, row_kernels=kernels) for _ in range(N_SEQS)]
    return batched, alone


item = st.tuples(st.integers(1, 12), st.sampled_from(["last", "all", "none"]), st.integers(0, 10**6))
step = st.tuples(st.dictionaries(st.integers(0, N_SEQS - 1), item, min_size=1),
                 st.none() | st.tuples(st.integers(0, N_SEQS - 1), st.integers(0, 20)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_batched_rows_have_each_sequences_solo_bits(targets, steps):
    batched, alone = targets
    for seq in range(N_SEQS):
        batched.reset_sequence(seq)
        alone[seq].reset()
    for items, rewind in steps:
        batch, want = [], []
        for seq, (n, head, salt) in sorted(items.items()):
            if alone[seq].cache_seq_len + n > N_CTX:
                alone[seq].reset()
                batched.reset_sequence(seq)
            tokens = np.random.default_rng(salt).integers(3, batched.n_vocab, size=n).tolist()
            out = alone[seq].spec_forward(tokens, all_logits=head == "all", hidden_layers=("final",))
            if head != "none":
                want.append(out.logits)
            want_hidden = out.hidden
            batch.append((BatchItem(seq, tokens, head), want_hidden))
        got = batched.forward_batch([b for b, _ in batch], hidden_layers=("final",))
        expected = np.concatenate(want) if want else np.zeros((0, batched.n_vocab), np.float32)
        assert _bits(got.logits) == _bits(expected), f"LM-head rows of {[b for b, _ in batch]}"
        assert _bits(got.hidden) == _bits(np.concatenate([h for _, h in batch])), "hidden rows"
        # a forward settles every recurrent sequence's verify: only the batch's may roll back into theirs
        if rewind is not None and (not batched.recurrent or rewind[0] in items):
            seq, back = rewind
            length = max(0, alone[seq].cache_seq_len - back)
            try:
                alone[seq].rewind(length)
            except ValueError:  # the ring, or a recurrent state, no longer holds that far back: both refuse
                with pytest.raises(ValueError):
                    batched.rewind(length, seq)
                continue
            batched.rewind(length, seq)
        for seq in range(N_SEQS):
            assert batched.sequence_length(seq) == alone[seq].cache_seq_len


def test_top_k_rows_of_a_batch_match_their_full_logits(targets):
    batched, _ = targets
    for seq in range(N_SEQS):
        batched.reset_sequence(seq)
    items = [BatchItem(seq, [5 + seq] * (seq + 1), "all") for seq in range(N_SEQS)]
    full = batched.forward_batch(items).logits
    for seq in range(N_SEQS):
        batched.rewind(0, seq)
    top = batched.forward_batch(items, top_k=3)
    assert np.array_equal(top.ids[:, 0], full.argmax(axis=1))
    assert _bits(top.logits) == _bits(np.take_along_axis(full, top.ids.astype(np.int64), axis=1))


def test_bad_batches_are_refused_by_name(tiny_model):
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=64, prefill_chunk=16, max_verify_rows=8)
    target.set_sequences(2)
    cases = [
        ([], "at least one sequence"),
        ([BatchItem(2, [5])], "sequence 2 is not one of this target's 2"),
        ([BatchItem(-1, [5])], "sequence -1"),
        ([BatchItem(0, [5]), BatchItem(0, [6])], "sequence 0 appears twice"),
        ([BatchItem(1, [])], "sequence 1 has no tokens"),
        ([BatchItem(0, [5] * 17)], "one forward appends at most 16"),
        ([BatchItem(0, [5], "every")], "must be last, all or none"),
        ([BatchItem(1, [target.n_vocab])], "outside the vocabulary"),
    ]
    for items, message in cases:
        with pytest.raises(ValueError, match=message):
            target.forward_batch(items)
    for _ in range(4):
        target.forward_batch([BatchItem(1, [5] * 16, "none")])
    with pytest.raises(ggspec.ContextOverflowError, match="sequence 1 would hold 65"):
        target.forward_batch([BatchItem(0, [5]), BatchItem(1, [5])])
    assert target.sequence_length(0) == 0 and target.sequence_length(1) == 64  # a refused batch changes nothing
    with pytest.raises(ValueError, match="at least one sequence"):
        target.set_sequences(0)


def test_a_deep_recurrent_trunk_batches_many_sequences(tiny_model):
    """Each sequence adds its own recurrent chain to every recurrent layer of the graph."""
    path = tiny_model("qwen35", "q8_0", n_layer=40)
    batched = ggspec.load(path, n_ctx=64, prefill_chunk=16)
    batched.set_sequences(8)
    alone = ggspec.load(path, n_ctx=64, prefill_chunk=16)
    items = [BatchItem(seq, [5 + seq, 9, 11 + seq][:1 + seq % 3], "all") for seq in range(8)]
    got = batched.forward_batch(items).logits
    want = []
    for item in items:
        alone.reset()
        want.append(alone.spec_forward(item.tokens, all_logits=True).logits)
    assert _bits(got) == _bits(np.concatenate(want))


def test_memory_grows_by_one_sequence_per_slot(tiny_model):
    for arch in ("gemma3", "qwen35"):
        target = ggspec.load(tiny_model(arch, "q8_0"), n_ctx=64)
        one = target.memory
        target.set_sequences(3)
        three = target.memory
        assert three["kv_bytes"] == 3 * one["kv_bytes"] == 3 * three["kv_bytes_per_sequence"]
        assert three["recurrent_state_bytes"] == 3 * one["recurrent_state_bytes"]
        assert (three["verify_row_state_bytes"] > 0) == (arch == "qwen35") == (one["recurrent_state_bytes"] > 0)


def test_drafters_keep_a_region_per_sequence(tiny_model, tmp_path):
    target = ggspec.load(tiny_model("qwen35", "q8_0"), n_ctx=64)
    target.set_sequences(2)
    drafter = target.attach_drafter(write_tiny_dflash(tmp_path / "drafter.gguf", target_layers=(1, 3)))
    head = target.draft_head
    hidden = np.zeros((1, target.n_embd), np.float32)
    with pytest.raises(ValueError, match="draft head sequence 2 is not one of the target's 2"):
        head.for_sequence(2).draft_step(5, hidden[0], 0, 3)
    with pytest.raises(ValueError, match="drafter sequence 2 is not one of the target's 2"):
        drafter.for_sequence(2).draft(5, 0, 4, 3)
    one = head.for_sequence(1).draft_step(5, hidden[0], 0, 3)  # sequence 1 starts empty, whatever 0 holds
    head.draft_catch_up([7, 8, 9], np.ones((3, target.n_embd), np.float32), 0)
    again = head.for_sequence(1).draft_step(5, hidden[0], 0, 3)
    assert all(_bits(a) == _bits(b) for a, b in zip(one, again))
    with pytest.raises(ValueError, match="rows start at 2, but the head holds 1 positions"):
        head.for_sequence(1).draft_step(5, hidden[0], 2, 3)
    target.reset_sequence(1)  # the drafters' regions of it too
    with pytest.raises(ValueError, match="rows start at 1, but the head holds 0 positions"):
        head.for_sequence(1).draft_step(5, hidden[0], 1, 3)


# --- the engine: each slot's request against the same request alone ----------

# Governor off where stats are compared: its timing would decide when drafting parks.
NGRAM = SpecOptions(spec_type="ngram", governor=False)
HEAD = SpecOptions(spec_type="draft-head", governor=False)  # qwen35's NextN head; an EAGLE-3 head on the others
SPECS = [False, "auto", NGRAM, HEAD, "block", "draft"]  # the module's drafter and draft model, set per engine
request = st.fixed_dictionaries({
    "prompt": st.lists(st.integers(3, 60), min_size=1, max_size=70),
    "max_tokens": st.integers(1, 20),
    "sampling": st.sampled_from([dict(temperature=0), dict(temperature=0.8, seed=5), dict(temperature=0.7, seed=9,
                                                                                           top_k=0)]),
    "spec": st.sampled_from(SPECS),
    "arrival": st.integers(0, 12),  # joins after the first request has emitted this many tokens
})


@pytest.fixture(scope="module", params=["llama", "gemma3", "qwen35"])
def engines(request, tiny_model, tmp_path_factory):
    path = tiny_model(request.param, "q8_0")
    layers = {"llama": (0, 1), "gemma3": (1, 3), "qwen35": (1, 3)}[request.param]
    drafter = str(write_tiny_dflash(tmp_path_factory.mktemp("slots") / "drafter.gguf", target_layers=layers))
    draft_model = tiny_model(request.param, "f32")  # the same weights at another type
    # no reuse: a reused prefix changes what a block drafter drafts (never the output),
    # and these tests compare draft counts too (test_prefix_cache.py runs it on)
    model = ggspec.Model(path, n_ctx=128, prefill_chunk=CHUNK, n_threads=2, prefix_cache_mb=None)
    alone = ggspec.Model(path, n_ctx=128, prefill_chunk=CHUNK, n_threads=2, prefix_cache_mb=None)
    if request.param != "qwen35":
        from tests.fixtures.tiny_eagle3 import write_tiny_eagle3_for

        eagle3 = write_tiny_eagle3_for(model.target, tmp_path_factory.mktemp("slots") / "eagle3.gguf")
        model.target.attach_draft_head(eagle3)
        alone.target.attach_draft_head(eagle3)
    with ggspec.Engine(model, slots=N_SEQS) as engine, ggspec.Engine(alone) as solo:
        yield engine, solo, (drafter, draft_model), layers


def _block(drafter: str) -> SpecOptions:
    return SpecOptions(draft_model=drafter, governor=False)


def _spec(spec, drafters: tuple[str, str]):
    if spec in ("block", "draft"):
        return SpecOptions(draft_model=drafters[spec == "draft"], governor=False)
    return spec


SPEC_STATS = ("spec_type", "draft_n", "draft_n_accepted", "verify_steps", "plain_steps")


def _tokens(prompt: list[int], repeat: int = 3) -> list[int]:
    return (prompt * repeat)[:max(1, len(prompt) * repeat // 2)]  # repeats give n-gram drafts something to find


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request, min_size=1, max_size=6))
def test_each_slot_gets_its_solo_tokens(engines, requests):
    engine, solo, drafters, _ = engines
    options = [dict(max_tokens=r["max_tokens"], ignore_eos=True, spec=_spec(r["spec"], drafters), **r["sampling"])
               for r in requests]
    prompts = [_tokens(r["prompt"]) for r in requests]
    alone = [solo.submit(p, **o).result for p, o in zip(prompts, options)]

    streams: dict[int, object] = {}
    lock = threading.Lock()
    later = sorted(range(1, len(requests)), key=lambda i: requests[i]["arrival"])
    emitted = [0]

    def arrive(_token: int) -> None:  # on the engine's thread: joins between steps
        emitted[0] += 1
        with lock:
            while later and requests[later[0]]["arrival"] <= emitted[0]:
                i = later.pop(0)
                streams[i] = engine.submit(prompts[i], **options[i])

    with lock:
        streams[0] = engine.submit(prompts[0], on_token=arrive, **options[0])
    first = streams[0].result
    with lock:  # the first request ended before some arrival: they come now
        for i in later:
            streams[i] = engine.submit(prompts[i], **options[i])
        later.clear()
    got = [first] + [streams[i].result for i in range(1, len(requests))]
    assert [g.tokens for g in got] == [a.tokens for a in alone]
    assert 1 <= first.stats["max_batch_slots"] <= N_SEQS
    for r, g, a in zip(requests, got, alone):  # each slot's drafter state is its own: the same drafts
        if r["spec"] in (NGRAM, HEAD, "block", "draft"):
            assert [g.stats[k] for k in SPEC_STATS] == [a.stats[k] for k in SPEC_STATS], r


def test_one_block_drafter_serves_every_slot(engines, tmp_path):
    engine, _, (drafter, _), layers = engines
    other = str(write_tiny_dflash(tmp_path / "other.gguf", seed=2, target_layers=layers))
    late = []

    def join(_token: int) -> None:  # on the engine's thread, while the first slot drafts
        if not late:
            late.append(engine.submit([9, 10, 11], max_tokens=2, temperature=0, spec=_block(other)))

    first = engine.submit([5, 6, 7] * 4, max_tokens=12, temperature=0, ignore_eos=True, spec=_block(drafter),
                          on_token=join).result
    assert first.stats["spec_type"] == "block"
    stats = late[0].result.stats
    assert stats["spec_type"] == "none"
    assert "one drafter serves every slot" in stats["decline_reason"]
    alone = engine.submit([9, 10, 11], max_tokens=2, temperature=0, spec=_block(other)).result.stats
    assert alone["spec_type"] == "block"  # no slot drafts with the old one: the new one attaches


def test_a_cancelled_slot_frees_at_once_and_the_others_keep_their_tokens(engines):
    engine, solo, _, _ = engines
    prompts = [[5, 6, 7, 8] * 3, [9, 10, 11], [12, 13] * 5, [14], [15, 16, 17]]
    want = [solo.submit(p, max_tokens=16, temperature=0, ignore_eos=True).result.tokens for p in prompts]
    cancelled = threading.Event()

    def cancel_after_two(token: int, seen=[]) -> None:  # noqa: B006 - per-test counter
        seen.append(token)
        if len(seen) == 2:
            streams[0].cancel()
            cancelled.set()

    streams = [engine.submit(prompts[0], max_tokens=16, temperature=0, ignore_eos=True, on_token=cancel_after_two)]
    streams += [engine.submit(p, max_tokens=16, temperature=0, ignore_eos=True) for p in prompts[1:]]
    results = [s.result for s in streams]
    assert cancelled.is_set() and results[0].stats["stop"] == "cancelled"
    assert results[0].tokens == want[0][:len(results[0].tokens)] and len(results[0].tokens) < 16
    assert [r.tokens for r in results[1:]] == want[1:]  # the fifth waited for a slot and got the cancelled one's


def test_engine_refuses_bad_slots_and_one_sequence_plans(tiny_model):
    model = ggspec.Model(tiny_model("llama", "q8_0"), n_ctx=64)
    for slots in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="slots must be a positive integer"):
            ggspec.Engine(model, slots=slots)
    from ggspec.engine.planner import plan_speculation
    from ggspec.speculators.options import SpecOptions

    plan = plan_speculation(model.target, SpecOptions())
    with ggspec.Engine(model, slots=2) as engine:
        with pytest.raises(ValueError, match="SpeculationPlan holds one sequence"):
            engine.submit([5, 6], spec=plan)
