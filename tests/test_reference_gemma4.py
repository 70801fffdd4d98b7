"""The NumPy gemma4 and gemma4-assistant reference (tests/reference/numpy_gemma4.py) against
llama.cpp on the same tiny files, and checks of its own: the first oracle checked by the
second before any ggspec code runs the architecture.

With kv_type="f16" the reference emulates llama.cpp's default f16 KV cache, and its
logits are llama.cpp's bits on the x86 AVX2 + FMA build the peer is (measured: a max
|diff| of exactly 0 on every file here); the bound below leaves room for a last-bit
difference only. With its default f32 cache it differs visibly (Gemma 4's attention is
unscaled, so f16's rounding of q and k moves the scores): tenths of a logit on the
tiny f32 file.
"""

import numpy as np
import pytest

from bench.peer.peer import peer_logits
from tests.fixtures.tiny_gemma4 import MOE, write_tiny_gemma4, write_tiny_gemma4_assistant
from tests.reference.numpy_gemma4 import Gemma4AssistantReference, Gemma4Reference
from tests.test_bad_input import copy_gguf

TOKENS = [1] + list(range(40, 70))
LONG = [1] + list(range(100, 139))  # 40 tokens, five times the tiny files' sliding window of 8
VARIANTS = dict(n_rot_swa=16, layer_output_scale=False, double_wide_mlp=False, tied_output=False,
                final_logit_softcapping=None)  # no soft-capping key: llama.cpp caps at 30 all the same


@pytest.mark.peer
@pytest.mark.parametrize("dtype,options,tokens,one_by_one", [
    ("f32", {}, TOKENS, False),
    ("f32", dict(k_eq_v=True), TOKENS, False),
    ("f32", dict(n_embd_per_layer=0), TOKENS, False),
    ("f32", VARIANTS, TOKENS, False),
    ("f32", {}, LONG, False),
    ("f16", {}, TOKENS, False),
    ("q8_0", {}, TOKENS, False),
    ("q8_0", dict(k_eq_v=True), LONG, False),
    # llama.cpp's batched K-quant kernels are not batch-invariant: compare its token-at-a-time decode
    ("q4_k", {}, TOKENS[:12], True),
    # the 26B-A4B's shape: GELU experts beside each layer's MLP
    ("f32", MOE, TOKENS, False),
    ("f32", MOE | dict(down_scale=True), TOKENS, False),
    ("f32", MOE, LONG, False),
    ("f16", dict(n_expert=16, n_expert_used=2, fused_gate_up=True), TOKENS, False),
    ("q8_0", MOE, TOKENS, False),
    ("q4_k", MOE, TOKENS[:12], True),
])
def test_trunk_logits_match_llama_cpp(tmp_path, dtype, options, tokens, one_by_one):
    path = write_tiny_gemma4(tmp_path / "tiny.gguf", dtype=dtype, **options)
    ours, _ = Gemma4Reference(path, kv_type="f16").forward(tokens)
    theirs = peer_logits(path, tokens, n_threads=1, one_by_one=one_by_one)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() < 1e-3
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


@pytest.mark.peer
def test_f32_cache_is_close_to_llama_cpp_but_not_its_bits(tmp_path):
    path = write_tiny_gemma4(tmp_path / "tiny.gguf")
    ours, _ = Gemma4Reference(path).forward(TOKENS)
    theirs = peer_logits(path, TOKENS, n_threads=1)
    assert 1e-2 < np.abs(ours - theirs).max() < 1.5
    assert (ours.argmax(-1) == theirs.argmax(-1)).mean() >= 0.9


def test_hparams_and_kv_sharing(tmp_path):
    ref = Gemma4Reference(write_tiny_gemma4(tmp_path / "tiny.gguf"))
    hp = ref.hparams
    assert hp.is_swa == (True, True, True, False, True, False)
    assert [hp.kv_layer(il) for il in range(hp.n_layer)] == [0, 1, 2, 3, 2, 3]
    assert hp.head_dim == (32, 32, 32, 64, 32, 64) and hp.n_head_kv == (2, 2, 2, 1, 2, 1)
    assert hp.n_rot == hp.head_dim and hp.rope_freq_base == (1e4, 1e4, 1e4, 1e6, 1e4, 1e6)
    assert hp.n_ff == (128, 128, 128, 128, 256, 256) and hp.final_logit_softcapping == 30
    logits, hidden = ref.forward(TOKENS[:5])
    assert logits.shape == (5, 320) and np.isfinite(logits).all()
    assert sorted(hidden["kv"]) == [0, 1, 2, 3]
    assert hidden["kv"][3][0].shape == (5, 1, 64) and hidden["kv"][2][1].shape == (5, 2, 32)
    assert hidden["per_layer_inputs"].shape == (5, 6, hp.n_embd_per_layer)
    assert all(hidden[il].shape == (5, 64) for il in range(6)) and hidden["final"].shape == (5, 64)
    # The soft-cap bounds the logits by 30.
    assert np.abs(logits).max() < 30


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_trunk_is_causal(tmp_path, kv_type):
    """Row t of a T-token forward depends on tokens <= t only (and past the window too)."""
    ref = Gemma4Reference(write_tiny_gemma4(tmp_path / "tiny.gguf"), kv_type=kv_type)
    full_logits, full = ref.forward(LONG)
    part_logits, part = ref.forward(LONG[:9])
    np.testing.assert_allclose(part_logits, full_logits[:9], rtol=0, atol=1e-5)
    np.testing.assert_allclose(part["final"], full["final"][:9], rtol=0, atol=1e-5)
    for il, (k, v) in part["kv"].items():
        np.testing.assert_allclose(k, full["kv"][il][0][:9], rtol=0, atol=1e-5)
        np.testing.assert_allclose(v, full["kv"][il][1][:9], rtol=0, atol=1e-5)
    changed_logits, _ = ref.forward(LONG[:20] + [7] + LONG[21:])
    np.testing.assert_array_equal(changed_logits[:20], full_logits[:20])
    assert np.abs(changed_logits[20:] - full_logits[20:]).max() > 1e-2


def test_refuses_tensors_it_does_not_compute(tmp_path):
    path = write_tiny_gemma4(tmp_path / "tiny.gguf")
    # layer 0: 4 query heads of 32, 2 KV heads of 32 each for k and v
    fused = copy_gguf(path, tmp_path / "fused.gguf", tensors={"blk.0.attn_qkv.weight": np.ones((256, 64), np.float32)})
    with pytest.raises(NotImplementedError, match="attn_qkv"):
        Gemma4Reference(fused)
    lacking = copy_gguf(path, tmp_path / "lacking.gguf", drop=("blk.1.attn_k_norm.weight",))
    with pytest.raises(ValueError, match="attn_k_norm"):
        Gemma4Reference(lacking)
    # a router makes a layer a MoE one, which needs its experts and norms
    router = copy_gguf(path, tmp_path / "router.gguf",
                       tensors={"blk.0.ffn_gate_inp.weight": np.ones((8, 64), np.float32)})
    with pytest.raises(ValueError, match="ffn_down_exps"):
        Gemma4Reference(router)


def test_moe_layers(tmp_path):
    path = write_tiny_gemma4(tmp_path / "moe.gguf", **MOE)
    ref = Gemma4Reference(path)
    hp = ref.hparams
    assert (hp.n_expert, hp.n_expert_used, hp.n_ff_exp) == (8, 3, (32,) * 6)
    logits, hidden = ref.forward(TOKENS[:5])
    assert logits.shape == (5, 320) and np.isfinite(logits).all()
    # the experts move the layer's output: a dense file with the same other weights differs
    dense = copy_gguf(path, tmp_path / "dense.gguf",
                      drop=tuple(f"blk.{il}.{name}" for il in range(6) for name in (
                          "ffn_gate_inp.weight", "ffn_gate_inp.scale", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                          "ffn_down_exps.weight", "pre_ffw_norm_2.weight", "post_ffw_norm_1.weight",
                          "post_ffw_norm_2.weight")))
    _, dense_hidden = Gemma4Reference(dense).forward(TOKENS[:5])
    np.testing.assert_array_equal(dense_hidden[0], hidden[0])
    assert np.abs(dense_hidden[1] - hidden[1]).max() > 1e-2
    # per-expert gate or up scales are loaded by llama.cpp but not computed here
    scaled = copy_gguf(path, tmp_path / "scaled.gguf", tensors={"blk.2.ffn_up_exps.scale": np.ones(8, np.float32)})
    with pytest.raises(NotImplementedError, match="ffn_up_exps.scale"):
        Gemma4Reference(scaled)
    lacking = copy_gguf(path, tmp_path / "lacking.gguf", drop=("blk.3.post_ffw_norm_2.weight",))
    with pytest.raises(ValueError, match="post_ffw_norm_2"):
        Gemma4Reference(lacking)
    wrong = write_tiny_gemma4(tmp_path / "wrong.gguf", **MOE, metadata={"gemma4.expert_feed_forward_length": 16})
    with pytest.raises(ValueError, match="expert_feed_forward_length 16"):
        Gemma4Reference(wrong)


@pytest.fixture
def pair(tmp_path):
    target = Gemma4Reference(write_tiny_gemma4(tmp_path / "target.gguf"), kv_type="f16")
    return target, Gemma4AssistantReference(write_tiny_gemma4_assistant(tmp_path / "assistant.gguf"), target)


def test_assistant_reads_the_targets_last_kv_of_each_kind(pair):
    target, assistant = pair
    assert assistant.hparams.is_swa == (True, False) and assistant.kv_type == "f16"
    # sliding block: target layer 4, which reads layer 2's cache; global: layer 5 -> 3
    assert [assistant.target_kv_layer(il) for il in range(2)] == [2, 3]


def test_assistant_first_step(pair):
    """The first draft step is one deterministic row (token, the target's final row before
    it) at the pending token's position, blind to the cache at and past that position."""
    target, assistant = pair
    tokens = LONG[:21]  # the pending token at p = 20, past the sliding window
    p = len(tokens) - 1
    _, prefix = target.forward(tokens[:-1])

    def first_step(kv: dict) -> tuple[np.ndarray, np.ndarray]:
        return assistant.step(tokens[-1], prefix["final"][p - 1], p, kv)

    logits, h_next = first_step(prefix["kv"])
    assert logits.shape == (320,) and h_next.shape == (64,) and np.isfinite(logits).all()
    again = first_step(prefix["kv"])
    np.testing.assert_array_equal(again[0], logits)
    np.testing.assert_array_equal(again[1], h_next)
    drafts, steps = assistant.draft(tokens, 1)
    np.testing.assert_array_equal(steps[0], logits)
    assert drafts == [int(np.argmax(logits))]

    rng = np.random.default_rng(0)

    def replaced(kv: dict, layers, rows: slice) -> dict:
        """kv with random values in the rows of the given layers."""
        out = dict(kv)
        for il in layers:
            out[il] = tuple(x.copy() for x in kv[il])
            for x in out[il]:
                x[rows] = rng.standard_normal(x[rows].shape)
        return out

    # A cache holding later positions (a forward over more tokens), or garbage there, reads the same.
    _, longer = target.forward(LONG)
    np.testing.assert_array_equal(first_step(longer["kv"])[0], logits)
    np.testing.assert_array_equal(first_step(replaced(longer["kv"], longer["kv"], np.s_[p:]))[0], logits)

    # The sliding block (over layer 2's cache) sees p - 7 .. p - 1 only; the global one (layer 3) all.
    first_seen = p - assistant.hparams.n_swa + 1
    np.testing.assert_array_equal(first_step(replaced(prefix["kv"], [2], np.s_[:first_seen]))[0], logits)
    # ... and the oldest position each can see counts: copying there a visible row that the
    # softmax weighs moves the logits.
    for layer, first in ((2, first_seen), (3, 0)):
        moves = []
        for source in range(first + 1, p):
            moved = dict(prefix["kv"])
            moved[layer] = tuple(np.concatenate([x[:first], x[source:source + 1], x[first + 1:]])
                                 for x in prefix["kv"][layer])
            moves.append(np.abs(first_step(moved)[0] - logits).max())
        assert max(moves) > 1e-2


def test_assistant_chains_at_one_position(pair):
    """Each later step reads the previous draft and h_next at the same position."""
    target, assistant = pair
    tokens = TOKENS[:12]
    p = len(tokens) - 1
    drafts, steps = assistant.draft(tokens, 3)
    assert len(drafts) == len(steps) == 3 and all(0 <= d < 320 for d in drafts)
    _, prefix = target.forward(tokens[:-1])
    token, h = tokens[-1], prefix["final"][p - 1]
    for draft, logits in zip(drafts, steps):
        expected, h = assistant.step(token, h, p, prefix["kv"])
        np.testing.assert_array_equal(logits, expected)
        assert draft == int(np.argmax(expected))
        token = draft
