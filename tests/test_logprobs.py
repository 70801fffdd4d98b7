"""Logprobs come from the trunk rows: each emitted token's log-softmax over the row
it was drawn from, the same bits with speculation on or off, on one slot or many."""

import threading

import numpy as np
import pytest

import ggspec
from ggspec.engine.logprobs import token_logprob
from ggspec.speculators.options import SpecOptions

PROMPT = "one two three one two three one two"


@pytest.fixture(scope="module")
def path(tiny_model):
    return tiny_model("llama", "q8_0")


def run(path, slots, spec, top=3, **options):
    model = ggspec.Model(path, n_ctx=256, n_threads=2)
    with ggspec.Engine(model, slots=slots) as engine:
        return engine.submit(PROMPT, max_tokens=24, ignore_eos=True, spec=spec, logprobs=top, **options).result


@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=0.8, seed=5)])
def test_each_token_s_logprob_is_its_row_s_log_softmax(path, options):
    result = run(path, 1, SpecOptions(spec_type="ngram", governor=False), **options)
    assert result.stats["draft_n_accepted"] > 0  # verify rows were used
    # the whole sequence in one forward: its rows have a one-row step's bits
    target = ggspec.load(path, n_ctx=256, n_threads=2)
    rows = target.spec_forward(result.prompt_tokens + result.tokens[:-1], all_logits=True, top_k=0).logits
    rows = rows[len(result.prompt_tokens) - 1:]
    assert len(result.logprobs) == len(result.tokens)
    for row, token, lp in zip(rows, result.tokens, result.logprobs):
        assert lp == token_logprob(row, token, 3)
        shifted = row.astype(np.float64) - row.max()
        np.testing.assert_allclose(lp.logprob, shifted[token] - np.log(np.exp(shifted).sum()), rtol=1e-12)
        assert [i for i, _ in lp.top] == sorted(range(len(row)), key=lambda i: (-row[i], i))[:3]
    if options["temperature"] == 0:
        assert all(lp.top[0][0] == lp.token for lp in result.logprobs)  # greedy: the row's best


def test_speculation_and_slots_change_no_logprob_and_logprobs_no_token(path):
    sampled = dict(temperature=0.8, seed=5, top_k=3)  # full rows instead of the in-graph top 3
    plain = run(path, 1, False, **sampled)
    assert run(path, 1, "ngram", **sampled).logprobs == plain.logprobs
    without = run(path, 1, "ngram", top=None, **sampled)
    assert without.tokens == plain.tokens and without.logprobs is None
    # in one batch, a slot asking for full rows makes the forward return them for all
    model = ggspec.Model(path, n_ctx=256, n_threads=2)
    submitted = threading.Event()  # the first request waits for the others, so that all three share steps
    with ggspec.Engine(model, slots=3) as engine:
        streams = [engine.submit(PROMPT, max_tokens=24, ignore_eos=True, spec="ngram", logprobs=top, **sampled,
                                 on_token=(lambda _: submitted.wait(60)) if i == 0 else None)
                   for i, top in enumerate((3, None, 3))]
        submitted.set()
        results = [s.result for s in streams]
    assert max(r.stats["max_batch_slots"] for r in results) == 3
    assert [r.tokens for r in results] == [plain.tokens] * 3
    assert results[0].logprobs == results[2].logprobs == plain.logprobs and results[1].logprobs is None


def test_bad_logprobs_are_refused(path):
    model = ggspec.Model(path, n_ctx=64, n_threads=2)
    with ggspec.Engine(model) as engine:
        for bad in (-1, 21, True):
            with pytest.raises(ValueError, match="logprobs must be None or 0..20"):
                engine.submit("a b", logprobs=bad)
        assert engine.submit("a b", max_tokens=2).result.logprobs is None
