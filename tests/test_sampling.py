"""The sampler: llama.cpp's chain semantics, and a draw that depends only on (seed, position)."""

import math

import numpy as np
import pytest

import ggspec
from ggspec.engine.sampling import Sampler, SamplerConfig, uniform


def test_uniform_is_a_pure_function_of_seed_and_position():
    draws = [uniform(7, p) for p in range(20000)]
    assert draws == [uniform(7, p) for p in range(20000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert abs(np.mean(draws) - 0.5) < 0.01
    # deciles within 10% of even: a draw stream no chain could tell from uniform
    counts = np.histogram(draws, bins=10, range=(0, 1))[0]
    assert counts.min() > 1800 and counts.max() < 2200
    assert uniform(7, 3) != uniform(8, 3) and uniform(7, 3) != uniform(7, 4)


def test_what_the_target_is_asked_for():
    n_vocab = 1000
    assert Sampler(SamplerConfig(temperature=0), n_vocab).forward_top_k == 1
    assert Sampler(SamplerConfig(top_k=40), n_vocab).forward_top_k == 40
    assert Sampler(SamplerConfig(top_k=0), n_vocab).forward_top_k == 0       # the chain needs every logit
    assert Sampler(SamplerConfig(top_k=5000), n_vocab).forward_top_k == 0    # k past the vocabulary is off


def test_greedy_ties_go_to_the_lower_id():
    s = Sampler(SamplerConfig(temperature=0), 4)
    assert s.sample(np.array([1.0, 3.0, 3.0, 2.0], np.float32), None, 0) == 1


def frequencies(config: SamplerConfig, logits: np.ndarray, n: int = 20000) -> np.ndarray:
    s = Sampler(config, len(logits))
    counts = np.zeros(len(logits))
    for p in range(n):
        counts[s.sample(logits, None, p)] += 1
    return counts / n


LOGITS = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])).astype(np.float32)


def test_plain_temperature_one_follows_softmax():
    f = frequencies(SamplerConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1), LOGITS)
    np.testing.assert_allclose(f, [0.4, 0.25, 0.15, 0.1, 0.06, 0.04], atol=0.012)


def test_top_k_keeps_the_k_best():
    f = frequencies(SamplerConfig(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0, seed=2), LOGITS)
    np.testing.assert_allclose(f, [0.4 / 0.65, 0.25 / 0.65, 0, 0, 0, 0], atol=0.012)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    # cumulative 0.4, 0.65, 0.80: p = 0.7 keeps three tokens (llama.cpp: cum >= p)
    f = frequencies(SamplerConfig(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0, seed=3), LOGITS)
    np.testing.assert_allclose(f, [0.5, 0.3125, 0.1875, 0, 0, 0], atol=0.012)


def test_min_p_is_relative_to_the_best():
    # keeps p >= 0.3 * 0.4 = 0.12: the first three
    f = frequencies(SamplerConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.3, seed=4), LOGITS)
    np.testing.assert_allclose(f, [0.5, 0.3125, 0.1875, 0, 0, 0], atol=0.012)


def test_temperature_applies_after_truncation():
    # top-k 2 then temperature 0.5: weights 0.4^2 : 0.25^2
    f = frequencies(SamplerConfig(temperature=0.5, top_k=2, top_p=1.0, min_p=0.0, seed=5), LOGITS)
    w = np.array([0.4 ** 2, 0.25 ** 2])
    np.testing.assert_allclose(f[:2], w / w.sum(), atol=0.012)
    assert f[2:].sum() == 0


def test_in_graph_top_k_and_full_logits_draw_the_same_token():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=5000).astype(np.float32) * 3
    order = np.lexsort((np.arange(5000), -logits))[:40]
    sampler = Sampler(SamplerConfig(seed=11), 5000)  # llama.cpp's defaults: top-k 40, top-p 0.95, min-p 0.05
    for p in range(500):
        assert sampler.sample(logits[order], order, p) == sampler.sample(logits, None, p)


def test_bad_parameters_are_refused():
    for bad in [dict(top_p=1.5), dict(min_p=-0.1), dict(temperature=math.nan), dict(seed=-1), dict(seed=2**32)]:
        with pytest.raises(ValueError):
            SamplerConfig(**bad)


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return ggspec.Model(tiny_model("llama", "q8_0"), n_ctx=256, n_threads=2)


SAMPLED = dict(max_tokens=48, temperature=0.8, top_k=0, top_p=0.95, min_p=0.0, ignore_eos=True)


def test_seeded_sampling_repeats_run_after_run(tiny):
    a = ggspec.generate(tiny, "a b c", seed=1234, **SAMPLED)
    b = ggspec.generate(tiny, "a b c", seed=1234, **SAMPLED)
    c = ggspec.generate(tiny, "a b c", seed=1235, **SAMPLED)
    assert a.tokens == b.tokens and a.text == b.text
    assert a.tokens != c.tokens
    assert a.stats["seed"] == 1234


def test_a_positions_draw_does_not_depend_on_how_its_prefix_was_produced(tiny):
    """Re-derive every sampled token from one batched forward over the whole
    sequence (how a verify reads rows) instead of one-row decode steps."""
    run = ggspec.generate(tiny, "a b c", seed=99, **SAMPLED)
    sequence = run.prompt_tokens + run.tokens
    target, n_prompt = tiny.target, len(run.prompt_tokens)
    sampler = Sampler(SamplerConfig(temperature=0.8, top_k=0, top_p=0.95, min_p=0.0, seed=99), target.n_vocab)
    for split in (1, n_prompt, n_prompt + 17):  # prefill lengths before one batched forward over the rest
        target.reset()
        target.spec_forward(sequence[:split])
        rows = target.spec_forward(sequence[split:-1], all_logits=True).logits
        for q in range(max(split + 1, n_prompt), len(sequence)):  # the generated positions rows cover
            assert sampler.sample(rows[q - split - 1], None, q) == sequence[q], (split, q)
