"""Steady-state decoding replays persistent graphs and builds none."""

import pytest

import ggspec
from bench.decode import greedy_decode as timed_greedy_decode


def greedy_decode(target, prompt, n):
    return timed_greedy_decode(target, prompt, n)[0]


@pytest.mark.slow
def test_256_token_decode_builds_no_graph_after_warm_up(smollm2_path):
    target = ggspec.load(smollm2_path, n_ctx=1024)
    prompt = [1, 504, 3260, 314, 260, 1345, 28, 284]
    warm = greedy_decode(target, prompt, 256)
    builds = target.graph_builds
    assert builds > 0
    again = greedy_decode(target, prompt, 256)
    assert target.graph_builds == builds, "a warm decode built new graphs"
    assert again == warm


def test_graph_budget_evicts_but_stays_correct(tiny_model):
    path = tiny_model("llama")
    roomy = ggspec.load(path, n_ctx=512)
    tight = ggspec.load(path, n_ctx=512, graph_budget_mb=0.001)
    prompt = list(range(3, 40))
    assert greedy_decode(tight, prompt, 40) == greedy_decode(roomy, prompt, 40)
    assert tight._core.graphs_cached <= 2
