"""gemma4 in ggspec: logits and hidden taps bit for bit against the NumPy reference
(with its emulation of an f16 KV cache) and against llama.cpp on the same tiny files,
past a wrap of the sliding-window ring and through the shared-KV layers; files that
llama.cpp would misread or assert on are refused by name.

Row-invariance of verify rows, prefill chunks and rewinds is tests/test_exactness.py's
(gemma4 is in TARGET_ARCHS), spec == plain is tests/test_runtime.py's.
"""

import numpy as np
import pytest

import ggspec
from bench.peer.peer import peer_logits
from tests.fixtures.tiny_gemma4 import MOE, write_tiny_gemma4
from tests.fixtures.tiny_models import ARR, U32
from tests.reference.numpy_gemma4 import Gemma4Reference
from tests.test_bad_input import copy_gguf
from tests.test_exactness import TAPS, assert_bits_equal, check_every_window
from tests.test_gguf_fidelity import refuses

# 80 tokens: 8-row graphs keep a ring of 64 slots for the window of 8, which they wrap
TOKENS = [1] + np.random.default_rng(0).integers(3, 320, 79).tolist()
VARIANTS = dict(n_rot_swa=16, layer_output_scale=False, double_wide_mlp=False, tied_output=False,
                final_logit_softcapping=None)  # no soft-capping key: llama.cpp caps at 30 all the same


def small_graphs(path: str) -> ggspec.Target:
    return ggspec.load(path, n_ctx=128, prefill_chunk=8, max_verify_rows=8)


@pytest.mark.parametrize("dtype,options", [
    ("f32", {}), ("f32", dict(k_eq_v=True)), ("f32", dict(n_embd_per_layer=0)), ("f32", VARIANTS),
    ("q8_0", dict(k_eq_v=True)), ("q4_k", {}),
    # the 26B-A4B's shape: experts beside each MLP
    ("f32", dict(MOE, down_scale=True)), ("q8_0", dict(n_expert=16, n_expert_used=2, fused_gate_up=True))])
def test_logits_and_taps_match_the_reference(tmp_path, dtype, options):
    path = write_tiny_gemma4(tmp_path / "tiny.gguf", dtype=dtype, **options)
    ours = small_graphs(path).spec_forward(TOKENS, all_logits=True, hidden_layers=[4, "final"])
    logits, hidden = Gemma4Reference(path, kv_type="f16").forward(TOKENS)
    assert_bits_equal(ours.logits, logits, "logits")
    assert_bits_equal(ours.hidden, np.concatenate([hidden[4], hidden["final"]], axis=1), "hidden taps")


@pytest.mark.parametrize("dtype", ["q8_0", "q4_k"])
def test_moe_verify_rows_match_one_row_steps(tmp_path, dtype):
    """As tests/test_exactness.py for the dense files: the rows of one verify route to
    many experts, a step's row to a few, and each output is one vec_dot either way."""
    target = ggspec.load(write_tiny_gemma4(tmp_path / "moe.gguf", dtype=dtype, **MOE), n_ctx=256, prefill_chunk=16)
    rng = np.random.default_rng(7)
    check_every_window(target, rng.integers(3, 320, 40).tolist(), rng.integers(3, 320, 17).tolist(), TAPS)


@pytest.mark.peer
@pytest.mark.parametrize("dtype,options", [("f32", dict(k_eq_v=True)), ("q4_k", dict(k_eq_v=True)),
                                           ("q8_0", dict(MOE, down_scale=True))])
def test_logits_are_llama_cpps(tmp_path, dtype, options):
    path = write_tiny_gemma4(tmp_path / "tiny.gguf", dtype=dtype, **options)
    ours = small_graphs(path).spec_forward(TOKENS[:48], all_logits=True).logits
    # llama.cpp's token-by-token decode: its batched K-quant products are not batch-invariant
    assert_bits_equal(ours, peer_logits(path, TOKENS[:48], n_threads=2, one_by_one=True), "logits")


@pytest.fixture
def tiny_gemma4(tmp_path):
    return write_tiny_gemma4(tmp_path / "tiny.gguf")


@pytest.mark.parametrize("keys,fragments", [
    # llama.cpp asserts on fewer than 2 layers with their own KV
    ({"gemma4.attention.shared_kv_layers": (5, U32)}, ("attention.shared_kv_layers", "at least 2 layers")),
    # layer 5, global, would read layer 2, a sliding-window layer
    ({"gemma4.attention.sliding_window_pattern": ([1, 1, 0, 1, 1, 0], ARR),
      "gemma4.attention.head_count_kv": ([2, 2, 1, 2, 2, 1], ARR)},
     ("shared-KV layer", "other kind")),
    ({"gemma4.attention.head_count_kv": ([2, 1, 2, 1, 2, 1], ARR)}, ("head_count_kv varies",)),
    ({"gemma4.attention.sliding_window_pattern": (6, U32)}, ("sliding_window_pattern", "per-layer array")),
    ({"gemma4.attention.key_length_swa": None}, ("key_length_swa",)),
    ({"gemma4.embedding_length_per_layer_input": None}, ("embedding_length_per_layer_input",)),
    ({"gemma4.expert_count": (8, U32)}, ("gemma4.expert_used_count", "must be in 1..8")),
])
def test_misread_files_are_refused(tiny_gemma4, tmp_path, keys, fragments):
    refuses(copy_gguf(tiny_gemma4, tmp_path / "bad.gguf", keys=keys), *fragments)


def test_a_layer_without_its_kv_is_refused(tiny_gemma4, tmp_path):
    refuses(copy_gguf(tiny_gemma4, tmp_path / "bad.gguf", drop=("blk.3.attn_k.weight",)), "blk.3.attn_k.weight")
    # a shared-KV layer's k may be there, unused, as converted files keep it
    extra = np.ones((64, 64), np.float32)  # layer 5 is global: one KV head of 64
    path = copy_gguf(tiny_gemma4, tmp_path / "extra.gguf", tensors={"blk.5.attn_k.weight": extra})
    assert small_graphs(path).spec_forward([1, 2, 3]).logits.shape == (1, 320)
