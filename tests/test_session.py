"""Sessions reuse the conversation's KV across turns (through the model's prefix
cache); a turn's output equals a fresh run of the whole conversation."""

import pytest

import ggspec
from ggspec.speculators.base import Speculator

CHATML = ("{% for m in messages %}{{ '<' + m['role'] + '> ' + m['content'] + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<assistant> ' }}{% endif %}")
GREEDY = dict(temperature=0)


@pytest.fixture(scope="module")
def chat_path(tiny_model):
    return tiny_model("llama", "q8_0", metadata=(("tokenizer.chat_template", CHATML),))


@pytest.fixture(scope="module")
def chat_model(chat_path):
    return ggspec.Model(chat_path, n_ctx=512, n_threads=2)


@pytest.fixture(scope="module")
def reference_model(chat_path):
    """A second copy for fresh runs: it reuses nothing."""
    return ggspec.Model(chat_path, n_ctx=512, n_threads=2, prefix_cache_mb=None)


@pytest.mark.parametrize("spec", [False, "ngram"])
def test_each_turn_equals_a_fresh_run_of_the_whole_conversation(chat_model, reference_model, spec):
    session = ggspec.Session(chat_model, spec=spec, **GREEDY)
    turns = ["a b c d", "e f a b", "c d e f g"]
    for i, prompt in enumerate(turns):
        r = session.generate(prompt, max_tokens=24, ignore_eos=True)
        if i:
            assert r.stats["reused_prompt_tokens"] > 0  # the earlier turns' KV was kept
        fresh = ggspec.generate(reference_model, session.messages[:-1], chat=True, max_tokens=24,
                                ignore_eos=True, spec=False, **GREEDY)
        assert r.tokens == fresh.tokens and r.text == fresh.text
        assert session.messages[-1] == {"role": "assistant", "content": r.text}


def test_a_turn_reuses_its_prefix_whatever_ran_on_the_model_since(chat_path):
    model = ggspec.Model(chat_path, n_ctx=512, n_threads=2)
    session = ggspec.Session(model, **GREEDY)
    session.generate("a b", max_tokens=8, ignore_eos=True)
    second = session.generate("c d", max_tokens=8, ignore_eos=True)
    assert second.stats["reused_prompt_tokens"] > 0 and second.stats["prefix_source"] == "resident"
    other = ggspec.Session(model, **GREEDY)
    other.generate("x y", max_tokens=8, ignore_eos=True)  # its turn overwrites the sequence
    ggspec.generate(model, "x y", max_tokens=4)  # so does a one-shot generation
    third = session.generate("e f", max_tokens=8, ignore_eos=True)
    assert third.stats["reused_prompt_tokens"] >= 16 and third.stats["prefix_source"] == "cache"
    cache = model.prefix_cache.stats
    assert cache["cache_hits"] >= 1 and cache["resident_hits"] >= 1 and 0 < cache["bytes"] <= cache["budget_bytes"]


def test_without_blocks_a_sequence_reuses_only_its_own_last_request(chat_path):
    model = ggspec.Model(chat_path, n_ctx=512, n_threads=2, prefix_cache_mb=0)
    session = ggspec.Session(model, **GREEDY)
    session.generate("a b", max_tokens=8, ignore_eos=True)
    assert session.generate("c d", max_tokens=8, ignore_eos=True).stats["prefix_source"] == "resident"
    other = ggspec.Session(model, **GREEDY).generate("x y", max_tokens=8, ignore_eos=True)
    third = session.generate("e f", max_tokens=8, ignore_eos=True)
    # what the sequence holds now is the other conversation: only the template's start is shared
    shared = next(i for i, (a, b) in enumerate(zip(other.prompt_tokens, third.prompt_tokens)) if a != b)
    assert third.stats["reused_prompt_tokens"] == shared < 16 and model.prefix_cache.stats["blocks"] == 0


def test_raw_sessions_append_to_one_text(chat_model, reference_model):
    session = ggspec.Session(chat_model, chat=False, **GREEDY)
    first = session.generate("a b c", max_tokens=6, ignore_eos=True)
    second = session.generate(" d e", max_tokens=6, ignore_eos=True)
    assert session.text == "a b c" + first.text + " d e" + second.text
    fresh = ggspec.generate(reference_model, "a b c" + first.text + " d e", max_tokens=6, ignore_eos=True,
                            **GREEDY)
    assert second.stats["reused_prompt_tokens"] > 0 and second.tokens == fresh.tokens


def test_a_sliding_window_cache_that_cannot_rewind_is_rebuilt_from_the_prefix_cache(tiny_model):
    # window 8: the ring cannot rewind far behind its newest position, so the turn's
    # prefix comes from the cache's copies (the ring's rows among them) instead
    path = tiny_model("gemma3", "f32", metadata=(("tokenizer.chat_template", CHATML),))
    options = dict(n_ctx=1024, n_threads=2, max_verify_rows=2, prefill_chunk=8)
    model, reference = ggspec.Model(path, **options), ggspec.Model(path, **options, prefix_cache_mb=None)
    session = ggspec.Session(model, **GREEDY)
    first = session.generate("a b c d e f", max_tokens=300, ignore_eos=True)
    r = session.generate("g h", max_tokens=8, ignore_eos=True)
    held = first.prompt_tokens + first.tokens  # the re-rendered reply may tokenize otherwise
    common = next((i for i, (a, b) in enumerate(zip(held, r.prompt_tokens)) if a != b), len(held))
    assert common < len(held) - 64  # further back than the ring can rewind
    assert r.stats["prefix_source"] == "cache" and r.stats["reused_prompt_tokens"] == common // 16 * 16 > 0
    fresh = ggspec.generate(reference, session.messages[:-1], chat=True, max_tokens=8, ignore_eos=True, **GREEDY)
    assert r.tokens == fresh.tokens


class _ChainedHead(Speculator):
    """Stands for a per-position draft head: it cannot draft over a prefix it never saw."""

    name = "chained-head"

    def __init__(self):
        super().__init__(max_draft_tokens=4)

    def propose(self, ctx, out):
        return 0


def test_speculators_that_cannot_arm_after_reuse_say_why(chat_path):
    session = ggspec.Session(ggspec.Model(chat_path, n_ctx=512, n_threads=2), **GREEDY)  # nothing cached yet
    session._plan.speculator = _ChainedHead()
    first = session.generate("a b", max_tokens=4)
    assert first.stats["spec_type"] == "chained-head" and first.stats["decline_reason"] is None
    second = session.generate("c d", max_tokens=4)
    assert second.stats["spec_type"] == "none"
    assert "cannot arm after a reused prefix" in second.stats["decline_reason"]


def test_governor_counts_are_per_turn(chat_model):
    session = ggspec.Session(chat_model, **GREEDY)
    governor = session._plan.governor
    session.generate("a b", max_tokens=8, ignore_eos=True)
    governor.parked_steps += 5  # as if the first turn had parked and probed
    governor.probes += 2
    before = (governor.parked_steps, governor.probes)
    second = session.generate("c d", max_tokens=8, ignore_eos=True)
    assert (second.stats["governor_parked_steps"], second.stats["governor_probes"]) == \
        (governor.parked_steps - before[0], governor.probes - before[1])
    assert before[0] >= 5 and second.stats["governor_parked_steps"] < governor.parked_steps


@pytest.mark.parametrize("dtype,spec", [("q4_k", "ngram"), ("q8_0", False)])
def test_a_reused_prefix_gives_what_a_fresh_run_of_the_same_ids_gives(tiny_model, dtype, spec):
    # The prefix's KV rows came from earlier turns' prefill chunks, one-row steps and
    # verify rows (the multi-row kernels included); a fresh prefill of the same ids
    # writes them anew. The same ids, not re-rendered text, which may tokenize otherwise.
    path = tiny_model("llama", dtype, metadata=(("tokenizer.chat_template", CHATML),))
    session_model = ggspec.Model(path, n_ctx=512, n_threads=2, prefill_chunk=16)
    fresh_model = ggspec.Model(path, n_ctx=512, n_threads=2, prefill_chunk=16, prefix_cache_mb=None)
    sampling = dict(temperature=0.8, seed=3)
    session = ggspec.Session(session_model, spec=spec, **sampling)
    fresh_engine = ggspec.Engine(fresh_model)
    try:
        for i, prompt in enumerate(["a b c d e f g", "e f a b", "c d e f g a"]):
            turn = session.stream(prompt, max_tokens=24, ignore_eos=True)
            ours = turn.result
            assert (ours.stats["reused_prompt_tokens"] > 16) == (i > 0)  # more than a prefill chunk kept
            fresh = fresh_engine.submit(turn.prompt_ids, max_tokens=24, ignore_eos=True, spec=False, **sampling)
            assert ours.tokens == fresh.result.tokens
    finally:
        fresh_engine.close()
