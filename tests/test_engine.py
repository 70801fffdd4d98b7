"""ggspec.Engine: one worker thread owns the target; callers on any thread submit,
stream, cancel. Outputs are the solo run's, however the callers interleave."""

import gc
import threading

import numpy as np
import pytest

import ggspec
from ggspec.engine.governor import GovernorMemory, SpeculationCostGovernor
from ggspec.engine.planner import SpeculationPlan, plan_speculation
from ggspec.speculators.base import Speculator
from ggspec.speculators.options import SpecOptions

GREEDY = dict(temperature=0)
REQUESTS = [  # (prompt, options): greedy and seeded, speculation on and off
    ("a b c a b c a b", dict(max_tokens=24, **GREEDY)),
    ("x y z x y", dict(max_tokens=24, temperature=0.8, seed=7)),
    ("one two one two one", dict(max_tokens=24, **GREEDY, spec=False)),
    ("p q r s p q", dict(max_tokens=24, temperature=0.8, seed=11, spec="ngram")),
]


@pytest.fixture(scope="module")
def model(tiny_model):
    return ggspec.Model(tiny_model("llama", "q8_0"), n_ctx=512, n_threads=2)


@pytest.fixture(scope="module")
def solo(tiny_model):
    reference = ggspec.Model(tiny_model("llama", "q8_0"), n_ctx=512, n_threads=2)
    return [ggspec.generate(reference, prompt, ignore_eos=True, **options).tokens for prompt, options in REQUESTS]


def test_four_threads_on_one_model_each_get_the_solo_output(model, solo):
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(REQUESTS))

    def client(i: int) -> None:
        prompt, options = REQUESTS[i]
        try:
            start.wait()
            if i == 1:  # one of them through a Session, one streamed, the others one-shot
                results[i] = ggspec.Session(model, chat=False).generate(prompt, ignore_eos=True, **options).tokens
            elif i == 2:
                run = ggspec.stream(model, prompt, ignore_eos=True, **options)
                "".join(run)
                results[i] = run.result.tokens
            else:
                results[i] = ggspec.generate(model, prompt, ignore_eos=True, **options).tokens
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    for _ in range(2):
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(REQUESTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert [results[i] for i in range(len(REQUESTS))] == solo


def test_one_engine_serves_requests_from_several_threads(model, solo):
    with ggspec.Engine(model) as engine:
        streams = [None] * len(REQUESTS)

        def client(i):
            prompt, options = REQUESTS[i]
            streams[i] = engine.submit(prompt, ignore_eos=True, **options)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(REQUESTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert [s.result.tokens for s in streams] == solo


def test_cancel_stops_the_request_within_one_step(model):
    with ggspec.Engine(model) as engine:
        run = engine.submit("a b c", max_tokens=400, ignore_eos=True, spec=False, **GREEDY)
        next(iter(run))
        run.cancel()
        seen = len(run.tokens)
        result = run.result
        assert result.stats["stop"] == "cancelled"
        assert len(result.tokens) <= seen + 1  # the step in flight, then nothing
        # the engine serves the next request at once, from a clean sequence
        again = engine.submit("a b c", max_tokens=8, ignore_eos=True, spec=False, **GREEDY).result
        assert again.tokens == result.tokens[:8] or len(result.tokens) < 8


def test_dropping_a_stream_cancels_it(model):
    # once the stream has given text, the engine waits at each token until the stream is gone
    ended, streaming, dropped = [], threading.Event(), threading.Event()
    with ggspec.Engine(model) as engine:
        run = engine.submit("a b c", max_tokens=400, ignore_eos=True, **GREEDY, on_finish=ended.append,
                            on_token=lambda _: streaming.is_set() and dropped.wait(60))
        next(iter(run))
        streaming.set()
        del run
        gc.collect()
        dropped.set()
        engine.submit("x", max_tokens=2, **GREEDY).result  # runs after the dropped one has ended
    assert ended[0].stats["stop"] == "cancelled" and len(ended[0].tokens) < 400


def test_a_dropped_engine_stops_its_worker(model):
    engine = ggspec.Engine(model)
    worker = engine._worker
    assert engine.submit("a b", max_tokens=4, **GREEDY).result.tokens
    del engine
    gc.collect()
    worker.join(timeout=10)
    assert not worker.is_alive()
    closed = ggspec.Engine(model)
    closed.close()
    assert not closed._worker.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        closed.submit("a", max_tokens=1)


def test_errors_reach_the_caller_and_the_engine_goes_on(model, tmp_path, tiny_model):
    with ggspec.Engine(model) as engine:
        with pytest.raises(ValueError, match="token id 99999 .at index 2. is outside the vocabulary"):
            engine.submit([1, 2, 99999], max_tokens=2)
        with pytest.raises(ValueError, match="token ids must be integers"):
            engine.submit(np.array([1.5, 2.0]), max_tokens=2)
        with pytest.raises(FileNotFoundError, match="draft model not found"):
            engine.submit("a", max_tokens=2, spec=SpecOptions(draft_model=str(tmp_path / "none.gguf")))
        odd = tiny_model("llama", "f32", metadata=(("general.architecture", "bert"),))
        with pytest.raises(ValueError, match="not a drafter"):
            engine.submit("a", max_tokens=2, spec=SpecOptions(draft_model=odd))
        # an error on the worker comes back through the stream, to iteration and to result
        broken = SpeculationPlan(_Broken(), SpeculationCostGovernor(enabled=False), SpecOptions())
        run = engine.submit("a b c", max_tokens=8, spec=broken, **GREEDY)
        with pytest.raises(RuntimeError, match="the drafter broke"):
            list(run)
        with pytest.raises(RuntimeError, match="the drafter broke"):
            run.result
        assert engine.submit([1, 2, 3], max_tokens=3, **GREEDY).result.tokens
    with pytest.raises(ValueError, match="slots must be a positive integer"):
        ggspec.Engine(model, slots=0)


class _Broken(Speculator):
    name = "broken"
    can_arm_after_prefix_reuse = True  # the prompt may be cached from an earlier test

    def __init__(self):
        super().__init__(max_draft_tokens=4)

    def propose(self, ctx, out):
        raise RuntimeError("the drafter broke")


def test_a_plan_made_by_the_caller_carries_its_governor(model):
    plan = plan_speculation(model.target, SpecOptions(spec_type="ngram"))
    with ggspec.Engine(model) as engine:
        first = engine.submit("a b a b a b", max_tokens=16, ignore_eos=True, spec=plan, **GREEDY).result
        second = engine.submit("a b a b a b", max_tokens=16, ignore_eos=True, spec=plan, **GREEDY).result
    assert first.tokens == second.tokens and first.stats["spec_type"] == "ngram"


def test_the_target_serialises_calls_from_two_threads(model):
    """Direct callers of one Target from two threads take turns: every row lands once."""
    target = ggspec.load(model.path, n_ctx=512, n_threads=2)
    target.reset()

    def forward_many():
        for i in range(40):
            target.spec_forward([1 + i % 7], top_k=1)

    threads = [threading.Thread(target=forward_many) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert target.cache_seq_len == 80


def test_each_request_s_governor_starts_from_what_the_last_one_learned(model, monkeypatch):
    found = []
    start = GovernorMemory.start

    def recording(self, governor, key):
        found.append((key, key in self._learned))
        start(self, governor, key)

    monkeypatch.setattr(GovernorMemory, "start", recording)
    for slots in (1, 2):  # one engine's memory, per engine
        with ggspec.Engine(model, slots=slots) as engine:
            for prompt in ("a b c a b c", "d e f d e f"):
                engine.submit(prompt, max_tokens=8, spec="ngram", **GREEDY).result
            engine.submit("g h", max_tokens=2, spec=False, **GREEDY).result  # no speculator: nothing to learn
    assert found == [(("ngram", None, None, 1), False), (("ngram", None, None, 1), True), (None, False)] * 2
