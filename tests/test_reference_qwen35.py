"""The NumPy qwen35 and qwen35moe reference (tests/reference/numpy_qwen35.py) against llama.cpp on
the same tiny files: the first oracle checked by the second before any ggspec code
runs the architecture.

The reference's weight products are ggml's bits, but its GatedDeltaNet recurrence,
conv, sigmoid and softplus are plain float32: a last-bit difference there moves the
f16 or 8-bit rounding of a later product's activations now and then, hence looser
bounds for F16 and Q8_0 (a wrong formula moves logits by whole units: their spread
here is ~4).
"""

import numpy as np
import pytest

from bench.peer.peer import peer_logits
from tests.fixtures.tiny_qwen35 import MOE, write_tiny_qwen35
from tests.reference.numpy_qwen35 import Qwen35Reference, gated_delta_net, ssm_conv

TOKENS = [1] + list(range(40, 70))


@pytest.mark.peer
@pytest.mark.parametrize("dtype,options,bound", [
    ("f32", {}, 0.02), ("f16", dict(recurrent_layers=[True, False, True, False]), 0.1), ("q8_0", {}, 0.3),
    ("f32", MOE, 0.02), ("f16", dict(n_expert=16, n_expert_used=2, fused_gate_up=True), 0.1)])
def test_reference_logits_match_llama_cpp(tmp_path, dtype, options, bound):
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", dtype=dtype, **options)
    ours, _ = Qwen35Reference(path).forward(TOKENS)
    theirs = peer_logits(path, TOKENS, n_threads=1)
    assert np.abs(ours - theirs).max() < bound
    assert (ours.argmax(-1) == theirs.argmax(-1)).mean() >= 0.9


def test_recurrence_is_causal_and_resumable(tmp_path):
    """Row t of a T-token forward depends on tokens <= t only, and the state a GDN layer
    keeps after token t is what a forward of t + 1 tokens leaves."""
    ref = Qwen35Reference(write_tiny_qwen35(tmp_path / "tiny.gguf"))
    full_logits, full = ref.forward(TOKENS)
    part_logits, part = ref.forward(TOKENS[:9])
    np.testing.assert_allclose(part_logits, full_logits[:9], rtol=0, atol=1e-5)
    for il, states in enumerate(full["states"]):
        if states is None:
            continue
        np.testing.assert_allclose(part["states"][il][-1].ssm, states[8].ssm, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(part["states"][il][-1].conv, states[8].conv)


def test_delta_rule_and_conv_by_hand():
    rng = np.random.default_rng(1)
    # One head, one token from a zero state: S = k d^T with d = v * beta, o = S^T q / sqrt(dk).
    q, k, v = (rng.standard_normal((1, 1, 4)).astype(np.float32) for _ in range(3))
    out, states = gated_delta_net(q, k, v, np.zeros((1, 1)), np.full((1, 1), 0.5), np.zeros((1, 4, 4)))
    np.testing.assert_allclose(states[0, 0], np.outer(k[0, 0], 0.5 * v[0, 0]), rtol=1e-6)
    np.testing.assert_allclose(out[0, 0], 0.5 * v[0, 0] * (k[0, 0] @ q[0, 0]) / 2, rtol=1e-5)
    # Two value heads over one key head read it in turn (head h reads key head h % 1).
    q2, k2 = q, k
    v2 = rng.standard_normal((1, 2, 4)).astype(np.float32)
    out2, _ = gated_delta_net(q2, k2, v2, np.zeros((1, 2)), np.ones((1, 2)), np.zeros((2, 4, 4)))
    np.testing.assert_allclose(out2[0, 1], v2[0, 1] * (k[0, 0] @ q[0, 0]) / 2, rtol=1e-5)
    # The conv is causal: output t sees the Kc - 1 state columns before it and itself.
    window = np.arange(2 * 5, dtype=np.float32).reshape(2, 5)  # C = 2, Kc = 3, T = 3
    weight = np.array([[1, 0, 0], [0, 0, 1]], np.float32)
    np.testing.assert_array_equal(ssm_conv(window, weight), [[0, 7], [1, 8], [2, 9]])
