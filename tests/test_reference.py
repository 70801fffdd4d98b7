"""ggspec agrees with the independent NumPy forward (the first oracle).

The targets here keep an f32 KV cache: the reference emulates the model's math
in ggml's CPU order of operations (tests/reference/ggml_cpu.py), not the f16
storage of the default cache. The tolerances are the contract; in practice
the two agree bit for bit on this machine.
"""

import numpy as np
import pytest

import ggspec
from tests.fixtures.tiny_models import ARCHS
from tests.reference.numpy_model import ReferenceModel

EXACT_TYPES = ("f32", "f16")
TOLERANCE = {"f32": 1e-3, "f16": 1e-3, "q8_0": 3e-2, "q4_k": 3e-2, "q6_k": 3e-2, "q4_1": 3e-2}


def check_logits(ours: np.ndarray, ref: np.ndarray, rel_tol: float) -> None:
    bound = rel_tol * float(np.abs(ref).max())
    diff = float(np.abs(ours - ref).max())
    assert diff <= bound, f"max |logit diff| {diff:.4g} exceeds {bound:.4g}"
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > bound
    assert clear.any()
    assert np.array_equal(ours.argmax(1)[clear], ref.argmax(1)[clear]), "argmax differs where the reference is clear"


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q4_k", "q6_k"])
@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_models_match_reference(tiny_model, arch, dtype):
    path = tiny_model(arch, dtype)
    tokens = np.random.default_rng(11).integers(3, 320, size=40).tolist()
    ref_logits, ref_hidden = ReferenceModel(path).forward(tokens)
    target = ggspec.load(path, n_ctx=128, kv_type="f32")
    r = target.spec_forward(tokens, all_logits=True, hidden_layers=(0, target.n_layer - 1, "final"))
    check_logits(r.logits, ref_logits, TOLERANCE[dtype])
    if dtype in EXACT_TYPES:
        n = target.n_embd
        for j, key in enumerate((0, target.n_layer - 1, "final")):
            ours, ref = r.hidden[:, j * n:(j + 1) * n], ref_hidden[key]
            assert np.abs(ours - ref).max() <= 1e-3 * np.abs(ref).max(), f"hidden tap {key}"


# Llama 3.1's pattern: low-frequency pairs slowed down, high-frequency ones kept
LLAMA31_FREQS = tuple(np.geomspace(1.0, 8.0, 8).round(3))


@pytest.mark.parametrize("overrides", [
    {"rope_freqs": LLAMA31_FREQS},
    {"rope_freqs": LLAMA31_FREQS, "rope_scaling_factor": 4.0},
    {"rope_scaling_factor": 8.0, "seed": 5},
])
def test_llama_rope_options_match_reference(tiny_model, overrides):
    path = tiny_model("llama", **overrides)
    tokens = np.random.default_rng(13).integers(3, 320, size=40).tolist()
    ref_logits, _ = ReferenceModel(path).forward(tokens)
    ours = ggspec.load(path, n_ctx=64, kv_type="f32").spec_forward(tokens, all_logits=True).logits
    check_logits(ours, ref_logits, 1e-3)
    if "rope_freqs" in overrides:  # the factors change the result: a file that dropped them would not pass
        plain_logits, _ = ReferenceModel(tiny_model("llama", **{k: v for k, v in overrides.items()
                                                                 if k != "rope_freqs"})).forward(tokens)
        assert np.abs(plain_logits - ref_logits).max() > 1e-2


PHI3_FACTORS = (tuple(np.geomspace(1.0, 6.0, 6).round(3)), tuple(np.geomspace(1.0, 1.5, 6).round(3)))


@pytest.mark.parametrize("arch,overrides,n_ctx,without", [
    # YaRN: ramps between interpolated and extrapolated pairs, and scales magnitudes
    ("llama", {"rope_scaling": "yarn", "rope_scaling_factor": 4.0, "rope_original_context": 32}, 64,
     {"rope_scaling": "linear"}),
    ("qwen3", {"rope_scaling": "yarn", "rope_scaling_factor": 8.0, "rope_original_context": 16}, 64,
     {"rope_scaling": "linear"}),
    # LongRoPE picks its long factors past the training context, the short ones within it
    ("phi3", {"n_rot": 12, "rope_factors": PHI3_FACTORS, "rope_original_context": 256, "rope_attn_factor": 1.19},
     1024, {"n_rot": 12, "rope_factors": PHI3_FACTORS[::-1], "rope_original_context": 256, "rope_attn_factor": 1.19}),
    ("phi3", {"n_rot": 12, "rope_factors": PHI3_FACTORS, "rope_original_context": 256, "rope_attn_factor": 1.19},
     256, {"n_rot": 12, "rope_factors": PHI3_FACTORS[::-1], "rope_original_context": 256, "rope_attn_factor": 1.19}),
    ("phi3", {"n_rot": 8}, 64, {}),                         # partial rotary
    ("llama", {"fused_qkv": True, "qkv_bias": True}, 64, {"fused_qkv": True}),
    ("gemma3", {"qkv_bias": True}, 64, {}),
])
def test_rope_scaling_and_projections_match_reference(tiny_model, arch, overrides, n_ctx, without):
    path = tiny_model(arch, seed=9, **overrides)
    tokens = np.random.default_rng(14).integers(3, 320, size=40).tolist()
    ref_logits, _ = ReferenceModel(path, n_ctx=n_ctx).forward(tokens)
    ours = ggspec.load(path, n_ctx=n_ctx, kv_type="f32").spec_forward(tokens, all_logits=True).logits
    check_logits(ours, ref_logits, 1e-3)
    # the option changes the result: a file read without it would not pass
    other, _ = ReferenceModel(tiny_model(arch, seed=9, **without), n_ctx=n_ctx).forward(tokens)
    assert np.abs(other - ref_logits).max() > 1e-2


@pytest.mark.parametrize("overrides", [
    {"tied_output": False},
    {"sliding_window": None},
    {"rope_freq_base_swa": 50000.0, "sliding_window": 5},
    {"final_logit_softcapping": 3.0},
])
def test_gemma3_options_match_reference(tiny_model, overrides):
    path = tiny_model("gemma3", **overrides)
    tokens = np.random.default_rng(12).integers(3, 320, size=30).tolist()
    ref_logits, _ = ReferenceModel(path).forward(tokens)
    check_logits(ggspec.load(path, n_ctx=64, kv_type="f32").spec_forward(tokens, all_logits=True).logits, ref_logits, 1e-3)


def test_gemma3_sliding_window_ring_matches_reference(tiny_model):
    # n_ctx 1024 with 64-row chunks: the window layers use a 256-slot ring, which
    # 400 tokens wrap; the reference attends over the whole sequence with a mask.
    path = tiny_model("gemma3")
    tokens = np.random.default_rng(13).integers(3, 320, size=400).tolist()
    ref_logits, _ = ReferenceModel(path).forward(tokens)
    target = ggspec.load(path, n_ctx=1024, prefill_chunk=64, kv_type="f32")
    check_logits(target.spec_forward(tokens, all_logits=True).logits, ref_logits, 1e-3)


@pytest.mark.slow
def test_smollm2_matches_reference(smollm2_path):
    tokens = [1, 504, 3260, 314, 260, 1345, 28, 284, 1028, 3287, 282, 253, 4937, 30, 378, 3260]
    ref_logits, _ = ReferenceModel(smollm2_path).forward(tokens)
    check_logits(ggspec.load(smollm2_path, n_ctx=64, kv_type="f32").spec_forward(tokens, all_logits=True).logits, ref_logits,
                 TOLERANCE["q4_1"])
