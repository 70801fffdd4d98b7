"""The prefix cache: a request served from cached blocks gives, bit for bit, what a
fresh solo run of the same token ids gives, on every architecture (a sliding-window
ring's rows and a recurrent trunk's checkpoints included), however the schedule
interleaves requests that share prefixes, and under a budget that evicts."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggspec
from ggspec.engine.prefix_cache import BLOCK_TOKENS, PrefixCache
from ggspec.speculators.options import SpecOptions
from tests.fixtures.tiny_dflash import write_tiny_dflash

N_CTX = 256
CHUNK = 24  # gemma3's window of 8 with this chunk: a ring of 64 slots, which long prompts wrap


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint32).tobytes()


@pytest.fixture(scope="module", params=[("llama", "q8_0"), ("gemma3", "q8_0"), ("qwen35", "q8_0")],
                ids=lambda p: "-".join(p))
def arch_path(request, tiny_model):
    return request.param[0], tiny_model(*request.param)


# --- the target: rows after an adopted prefix ----------------------------------

# gemma4: per-kind KV widths, and shared-KV layers with no cache of their own to copy
@pytest.mark.parametrize("arch", ["llama", "gemma3", "gemma4", "qwen35"])
def test_rows_after_an_adopted_prefix_have_a_fresh_prefills_bits(tiny_model, arch):
    path = tiny_model(arch, "q8_0")
    source, fresh = (ggspec.load(path, n_ctx=N_CTX, prefill_chunk=CHUNK) for _ in range(2))
    source.set_sequences(2)
    cache = PrefixCache(source, 64 << 20)
    ids = np.random.default_rng(1).integers(3, source.n_vocab, size=150).tolist()
    writer = cache.begin(0, ids)
    for start in range(0, 150, 10):  # a prefill in odd chunks, committed as the runtime does
        chunk = ids[start:start + 10]
        source.spec_forward(chunk, seq=0)
        writer.commit(chunk, start, checkpoint=True)
    writer.close()

    follow = ids[:150] + [5, 6, 7, 8]
    reader = cache.begin(1, follow)  # another sequence: rebuilt from the copies
    assert reader.source == "cache" and reader.reused == 150  # the tail block ends the adopted prefix
    assert source.sequence_length(1) == 150
    ours = source.spec_forward(follow[150:], all_logits=True, hidden_layers=("final",), seq=1)
    theirs = fresh.spec_forward(follow, all_logits=True, hidden_layers=("final",))
    assert _bits(ours.logits) == _bits(theirs.logits[150:])
    assert _bits(ours.hidden) == _bits(theirs.hidden[150:])


def test_a_recurrent_trunk_resumes_only_at_a_checkpoint(tiny_model):
    target = ggspec.load(tiny_model("qwen35", "q8_0"), n_ctx=N_CTX, prefill_chunk=CHUNK)
    target.set_sequences(2)
    cache = PrefixCache(target, 64 << 20)
    ids = list(range(3, 3 + 3 * BLOCK_TOKENS))
    writer = cache.begin(0, ids)
    target.spec_forward(ids, seq=0)
    writer.commit(ids, 0)  # a decode-like commit: no checkpoint at its end
    writer.abandon()
    assert cache.stats["blocks"] == 3
    assert cache.begin(1, ids + [9]).reused == 0  # blocks without a state cannot end a recurrent prefix


def test_the_budget_evicts_the_least_recently_used_leaves_first(tiny_model):
    target = ggspec.load(tiny_model("llama", "f16"), n_ctx=N_CTX)
    per_block = BLOCK_TOKENS * target.kv_position_bytes
    cache = PrefixCache(target, 5 * per_block)
    prompts = [[k] * (2 * BLOCK_TOKENS) + [1] for k in (3, 4, 5)]  # two full blocks each
    for ids in prompts:
        writer = cache.begin(0, ids)
        target.spec_forward(ids[:-1])
        writer.commit(ids[:-1], 0)
        writer.close()
    stats = cache.stats
    assert stats["bytes"] <= 5 * per_block and stats["blocks_evicted"] == 1
    assert cache.begin(0, prompts[0]).reused == BLOCK_TOKENS  # the oldest chain lost its leaf, not its root
    assert cache.begin(0, prompts[2]).reused == 2 * BLOCK_TOKENS


def test_a_block_the_ring_has_overwritten_is_not_stored(tiny_model):
    target = ggspec.load(tiny_model("gemma3", "f32"), n_ctx=N_CTX, prefill_chunk=CHUNK, max_verify_rows=2)
    cache = PrefixCache(target, 64 << 20)
    ids = list(range(3, 103))
    writer = cache.begin(0, ids)
    target.spec_forward(ids)  # one call, past its ring of 64 slots, before anything is copied
    writer.commit(ids, 0)
    assert cache.stats["blocks"] == 0  # refused by name in the core, so the chain stops
    writer.close()


# --- engines: random schedules with shared prefixes ----------------------------

@pytest.fixture(scope="module")
def engines(arch_path, tmp_path_factory):
    arch, path = arch_path
    layers = {"llama": (0, 1), "gemma3": (1, 3), "qwen35": (1, 3)}[arch]
    drafter = str(write_tiny_dflash(tmp_path_factory.mktemp("prefix") / "drafter.gguf", target_layers=layers))
    options = dict(n_ctx=N_CTX, prefill_chunk=CHUNK, n_threads=2)
    # a budget of a few requests' blocks: eviction is part of the schedule
    model = ggspec.Model(path, prefix_cache_mb=48 * N_CTX * model_kv_mb(path, options), **options)
    fresh = ggspec.Model(path, prefix_cache_mb=None, **options)
    with ggspec.Engine(model, slots=3) as batched, ggspec.Engine(model) as single, ggspec.Engine(fresh) as solo:
        yield {"batched": batched, "single": single}, solo, model, drafter


def model_kv_mb(path: str, options: dict) -> float:
    """A model's KV per position, in MiB."""
    return ggspec.load(path, n_ctx=options["n_ctx"]).kv_position_bytes / (1 << 20) / N_CTX


SYSTEM = [list(np.random.default_rng(k).integers(3, 60, size=n)) for k, n in ((0, 40), (1, 23), (2, 5))]

request = st.fixed_dictionaries({
    "system": st.integers(0, len(SYSTEM) - 1),
    "suffix": st.lists(st.integers(3, 60), min_size=1, max_size=12),
    "continues": st.booleans(),  # a next turn: an earlier request's prompt and reply, then the suffix
    "max_tokens": st.integers(1, 20),
    "spec": st.sampled_from([False, "ngram", "block"]),
    "seed": st.integers(0, 3),
})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request, min_size=2, max_size=7), engine_name=st.sampled_from(["batched", "single"]))
def test_requests_served_from_the_cache_give_their_fresh_solo_tokens(engines, requests, engine_name):
    by_name, solo, model, drafter = engines
    engine = by_name[engine_name]
    finished: list[tuple[list[int], dict, object]] = []
    running: list[tuple[list[int], dict, object]] = []
    for i, r in enumerate(requests):
        if r["continues"] or i % 2:  # a next turn waits for the reply; the others overlap on the slots
            finished += running
            running = []
        earlier = [p + s.result.tokens for p, _, s in finished]
        base = earlier[-1] if r["continues"] and earlier else SYSTEM[r["system"]]
        prompt = [int(t) for t in base + r["suffix"]][-(N_CTX // 2):]
        spec = SpecOptions(draft_model=drafter, governor=False) if r["spec"] == "block" else r["spec"]
        options = dict(max_tokens=r["max_tokens"], ignore_eos=True, temperature=0.7, seed=r["seed"])
        running.append((prompt, options, engine.submit(prompt, spec=spec, **options)))
    for prompt, options, stream in finished + running:
        ours = stream.result
        assert 0 <= ours.stats["reused_prompt_tokens"] < len(prompt)
        assert ours.tokens == solo.submit(prompt, spec=False, **options).result.tokens


def test_chat_turns_and_a_shared_system_prompt_hit_the_cache(arch_path):
    options = dict(n_ctx=N_CTX, prefill_chunk=CHUNK, n_threads=2)
    model, fresh = ggspec.Model(arch_path[1], **options), ggspec.Model(arch_path[1], prefix_cache_mb=None, **options)
    with ggspec.Engine(model, slots=3) as batched, ggspec.Engine(model) as single, ggspec.Engine(fresh) as solo:
        _chat_turns_and_a_shared_system_prompt(model, {"batched": batched, "single": single}, solo)


def _chat_turns_and_a_shared_system_prompt(model, by_name, solo):
    system = [int(t) for t in np.random.default_rng(7).integers(3, 60, size=3 * BLOCK_TOKENS + 5)]
    first = by_name["batched"].submit(system + [9, 10], max_tokens=12, ignore_eos=True, temperature=0).result
    turn = first.prompt_tokens + first.tokens + [11, 12]
    second = by_name["single"].submit(turn, max_tokens=8, ignore_eos=True, temperature=0).result
    other = by_name["batched"].submit(system + [13], max_tokens=4, ignore_eos=True, temperature=0).result
    # the next turn resumes where the first one ended (its tail), the other at the system prompt's last block
    assert second.stats["reused_prompt_tokens"] == len(first.prompt_tokens) + len(first.tokens) - 1
    assert other.stats["reused_prompt_tokens"] >= (len(system) // BLOCK_TOKENS) * BLOCK_TOKENS - \
        (BLOCK_TOKENS if model.target.recurrent else 0)
    for r in (second, other):
        assert r.stats["prefix_source"] in ("cache", "resident")  # a slot may still hold the first request
        assert r.tokens == solo.submit(r.prompt_tokens, max_tokens=len(r.tokens), ignore_eos=True,
                                       temperature=0).result.tokens
    stats = model.prefix_cache.stats
    assert stats["cache_hits"] + stats["resident_hits"] == 2 and stats["blocks_evicted"] == 0


def test_bad_copies_are_refused_by_name(tiny_model):
    target = ggspec.load(tiny_model("qwen35", "q8_0"), n_ctx=N_CTX)
    target.spec_forward([3, 4, 5])
    with pytest.raises(ValueError, match="outside the sequence's 3"):
        target.read_prefix(0, 2, [4])
    with pytest.raises(ValueError, match="the recurrent state is the one after the sequence's last position"):
        target.read_prefix(0, 0, [2], state=True)
    (kv,), state = target.read_prefix(0, 0, [3], state=True)
    with pytest.raises(ValueError, match="whole positions"):
        target.append_prefix(0, [kv[:-1]])
    with pytest.raises(ValueError, match="recurrent state copy holds"):
        target.append_prefix(0, [kv], state[:-1])
    with pytest.raises(ValueError, match="overflows the context"):
        target.append_prefix(0, [np.zeros(N_CTX * target.kv_position_bytes, np.uint8)])
    with pytest.raises(ValueError, match="prefix_cache_mb"):
        ggspec.Model(tiny_model("qwen35", "q8_0"), prefix_cache_mb=-1)
    target.reset()
    target.append_prefix(0, [kv])  # no state: the sequence cannot run until one brings it to its length
    with pytest.raises(ValueError, match="recurrent state is at position 0"):
        target.spec_forward([6])
