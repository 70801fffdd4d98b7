"""Self-checks of the test infrastructure: the tiny GGUF fixtures and the NumPy reference.

These do not touch ggspec itself (except the K-quant encoder, skipped without it).
"""

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, quants

from tests.fixtures.tiny_models import write_tiny_model
from tests.fixtures.tiny_vocab import MIN_VOCAB, spm_vocab
from tests.fixtures.weight_encoding import encode_matrix
from tests.reference import ggml_cpu
from tests.reference.numpy_model import ReferenceModel, rope
from tests.test_bad_input import copy_gguf

ARCHS = ["llama", "qwen3", "gemma3"]
FLOAT_AND_LEGACY_DTYPES = ["f32", "f16", "q8_0", "q4_0"]
GGML_TYPE = {
    "f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16, "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0, "q4_k": GGMLQuantizationType.Q4_K, "q6_k": GGMLQuantizationType.Q6_K,
}
# Dimensions every dtype accepts (K-quant rows are multiples of 256).
K_QUANT_SAFE_DIMS = dict(n_embd=256, n_ff=512, head_dim=64)


def _tensors(path) -> dict:
    return {t.name: t for t in GGUFReader(path).tensors}


def _dequantized(path) -> dict[str, np.ndarray]:
    return {name: quants.dequantize(t.data, t.tensor_type) for name, t in _tensors(path).items()}


def _expected_shapes(arch, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim, tied) -> dict:
    """GGUF tensor names and ggml shapes [ne0, ne1] as llama.cpp's loaders ask for them."""
    shapes = {"token_embd.weight": [n_embd, n_vocab], "output_norm.weight": [n_embd]}
    if not tied:
        shapes["output.weight"] = [n_embd, n_vocab]
    for i in range(n_layer):
        b = f"blk.{i}."
        shapes |= {
            b + "attn_norm.weight": [n_embd], b + "attn_q.weight": [n_embd, n_head * head_dim],
            b + "attn_k.weight": [n_embd, n_head_kv * head_dim], b + "attn_v.weight": [n_embd, n_head_kv * head_dim],
            b + "attn_output.weight": [n_head * head_dim, n_embd], b + "ffn_norm.weight": [n_embd],
            b + "ffn_gate.weight": [n_embd, n_ff], b + "ffn_up.weight": [n_embd, n_ff], b + "ffn_down.weight": [n_ff, n_embd],
        }
        if arch != "llama":
            shapes |= {b + "attn_q_norm.weight": [head_dim], b + "attn_k_norm.weight": [head_dim]}
        if arch == "gemma3":
            shapes |= {b + "post_attention_norm.weight": [n_embd], b + "post_ffw_norm.weight": [n_embd]}
    return shapes


# --- fixtures -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_AND_LEGACY_DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_fixture_has_llama_cpp_names_shapes_and_types(tmp_path, arch, dtype):
    path = write_tiny_model(tmp_path / "m.gguf", arch, dtype=dtype)
    reader = GGUFReader(path)
    fields = reader.fields

    assert fields["general.architecture"].contents() == arch
    # llama.cpp reads integer keys only as UINT32 and float keys only as FLOAT32.
    for key in ["context_length", "embedding_length", "block_count", "feed_forward_length",
                "attention.head_count", "attention.head_count_kv"]:
        assert fields[f"{arch}.{key}"].types == [GGUFValueType.UINT32], key
    for key in ["attention.layer_norm_rms_epsilon", "rope.freq_base"]:
        assert fields[f"{arch}.{key}"].types == [GGUFValueType.FLOAT32], key
    if arch == "llama":
        assert fields["llama.rope.dimension_count"].contents() == 16
    else:  # head_dim 32 differs from n_embd / n_head, so it is spelled out
        assert fields[f"{arch}.attention.key_length"].contents() == 32
    if arch == "gemma3":
        assert fields["gemma3.attention.sliding_window"].contents() == 8
    assert len(fields["tokenizer.ggml.tokens"].contents()) == 320

    n_layer = 7 if arch == "gemma3" else 2
    head_dim = 16 if arch == "llama" else 32
    expected = _expected_shapes(arch, 320, 64, n_layer, 4, 2, 128, head_dim, tied=True)
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == set(expected)
    for name, tensor in tensors.items():
        assert list(tensor.shape) == expected[name], name
        want = GGMLQuantizationType.F32 if len(expected[name]) == 1 else GGML_TYPE[dtype]
        assert tensor.tensor_type == want, name


def test_untied_output_and_optional_metadata(tmp_path):
    path = write_tiny_model(
        tmp_path / "m.gguf", "gemma3", tied_output=False, final_logit_softcapping=30.0,
        rope_freq_base_swa=500.0, rope_scaling_factor=8.0, sliding_window_pattern=[True, False] * 3 + [True],
        metadata={"general.name": "renamed", "gemma3.rope.freq_base": None, "gemma3.custom": 3},
    )
    fields = GGUFReader(path).fields
    assert "output.weight" in _tensors(path)
    assert fields["gemma3.final_logit_softcapping"].contents() == 30.0
    assert fields["gemma3.rope.freq_base_swa"].contents() == 500.0
    assert fields["gemma3.rope.scaling.type"].contents() == "linear"
    assert fields["gemma3.rope.scaling.factor"].contents() == 8.0
    assert fields["gemma3.attention.sliding_window_pattern"].contents() == [True, False] * 3 + [True]
    assert fields["general.name"].contents() == "renamed"
    assert "gemma3.rope.freq_base" not in fields
    assert fields["gemma3.custom"].types == [GGUFValueType.UINT32]


def test_vocab_meets_llama_cpp_spm_requirements():
    tokens, scores, types = spm_vocab(600)
    assert len(tokens) == len(scores) == len(types) == 600
    assert len(set(tokens)) == 600  # llama.cpp asserts unique token strings
    assert [f"<0x{b:02X}>" for b in range(256)] == tokens[3:259]  # all byte tokens, for byte fallback
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    with pytest.raises(ValueError, match="at least"):
        spm_vocab(MIN_VOCAB - 1)


def test_fixture_rejects_impossible_shapes(tmp_path):
    with pytest.raises(ValueError, match="multiple of 256"):
        write_tiny_model(tmp_path / "m.gguf", "llama", dtype="q4_k", n_embd=64)
    with pytest.raises(ValueError, match="n_head_kv"):
        write_tiny_model(tmp_path / "m.gguf", "llama", n_head=4, n_head_kv=3)
    with pytest.raises(ValueError, match="unsupported dtype"):
        write_tiny_model(tmp_path / "m.gguf", "llama", dtype="iq1_s")


# Relative RMS error of each stored matrix against its float32 source.
QUANT_ERROR_BOUND = {"f16": 1e-3, "q8_0": 1e-2, "q4_0": 0.12, "q4_k": 0.12, "q6_k": 0.03}


@pytest.mark.parametrize("dtype", list(QUANT_ERROR_BOUND))
def test_quantized_weights_are_close_to_their_f32_source(tmp_path, dtype):
    if dtype in ("q4_k", "q6_k"):
        pytest.importorskip("ggspec._core", reason="K-quant fixtures need ggspec._core.quantize")
    source = _dequantized(write_tiny_model(tmp_path / "f32.gguf", "qwen3", **K_QUANT_SAFE_DIMS))
    stored = _dequantized(write_tiny_model(tmp_path / "q.gguf", "qwen3", dtype=dtype, **K_QUANT_SAFE_DIMS))
    assert set(source) == set(stored)
    for name, weights in source.items():
        error = np.sqrt(np.mean((stored[name] - weights) ** 2) / np.mean(weights**2))
        bound = QUANT_ERROR_BOUND[dtype] if weights.ndim == 2 else 0.0  # norms stay f32
        assert error <= bound, (name, error)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_models_have_a_useful_spread_of_logits(tmp_path, arch, tied):
    model = ReferenceModel(write_tiny_model(tmp_path / "m.gguf", arch, tied_output=tied))
    tokens = list(np.random.default_rng(0).integers(3, 320, 32))
    logits, _ = model.forward(tokens)
    top2 = np.sort(logits, axis=-1)[:, -2:]
    assert 3.0 < logits.std(axis=-1).mean() < 5.0
    assert np.median(top2[:, 1] - top2[:, 0]) > 0.2  # top-1 usually clearly ahead
    # A tied head must not just echo the input token.
    assert np.mean(logits.argmax(axis=-1) == np.array(tokens)) < 0.25


# --- reference --------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", ["Q4_0", "Q5_0", "Q8_0", "Q4_1", "Q5_1", "Q4_K", "Q6_K"])
def test_quantized_matmul_is_the_dot_of_its_dequantized_operands(qtype):
    # ggml_cpu.dot_quantized works on integer quants in ggml's order; up to that order it is
    # the float dot of the weight and activations dequantized, plus for Q4_1/Q5_1 the
    # rounding of Q8_1's f16 block sums s, which their block mins m multiply.
    qtype = GGMLQuantizationType[qtype]
    k_quant = qtype in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K)
    rng = np.random.default_rng(5)
    matrix = (rng.standard_normal((48, 512)) * rng.uniform(0.1, 2.0, (48, 1))).astype(np.float32)
    if k_quant:
        pytest.importorskip("ggspec._core", reason="K-quant fixtures need ggspec._core.quantize")
        data, _ = encode_matrix(matrix, qtype.name.lower())
    else:
        data = quants.quantize(matrix, qtype)
    x = rng.standard_normal((5, 512)).astype(np.float32)
    x[0, :64] = 0  # all-zero activation blocks
    weight = ggml_cpu.QuantizedWeight.from_gguf(data, qtype)

    x_quants, x_d, x_s = ggml_cpu.quantize_q8_k(x) if k_quant else ggml_cpu.quantize_q8_0(x)
    block = 256 if k_quant else 32
    expected = (x_quants * np.repeat(x_d, block, axis=-1)).astype(np.float64) @ quants.dequantize(data, qtype).T
    if qtype in (GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q5_1):
        quant_sums = x_quants.reshape(len(x), -1, block).sum(axis=-1)
        expected += (x_s - x_d * quant_sums).astype(np.float64) @ weight.m.T
    ours = ggml_cpu.dot_quantized(weight, x)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("arch", ARCHS)
def test_reference_is_causal(tmp_path, arch):
    model = ReferenceModel(write_tiny_model(tmp_path / "m.gguf", arch, dtype="q8_0"))
    tokens = list(np.random.default_rng(1).integers(0, 320, 24))
    full_logits, full_hidden = model.forward(tokens)
    logits, hidden = model.forward(tokens[:13])
    # Not bit-equal: BLAS may sum in another order for another number of rows.
    for rows, full_rows in [(logits, full_logits)] + [(hidden[k], full_hidden[k]) for k in hidden]:
        np.testing.assert_allclose(rows, full_rows[:13], rtol=1e-4, atol=1e-5 * np.abs(full_rows).max())


@pytest.mark.parametrize("arch", ARCHS)
def test_reference_hidden_states_layout(tmp_path, arch):
    model = ReferenceModel(write_tiny_model(tmp_path / "m.gguf", arch))
    tokens = [1, 40, 41, 300]
    logits, hidden = model.forward(tokens)
    hp = model.hparams
    assert logits.shape == (4, 320) and logits.dtype == np.float32
    assert set(hidden) == set(range(hp.n_layer)) | {"final"}
    assert all(h.shape == (4, hp.n_embd) and h.dtype == np.float32 for h in hidden.values())
    embd = model.weights["token_embd.weight"]
    np.testing.assert_allclose(hidden[0], embd[tokens] * hp.embd_scale, rtol=1e-6)
    # Tied head: the logits are the final hidden state against the embedding matrix.
    np.testing.assert_allclose(logits, hidden["final"] @ embd.T, rtol=1e-4, atol=1e-4)


def _changed_positions(model, tokens, position, new_token) -> np.ndarray:
    """Positions whose logits change when tokens[position] is replaced."""
    edited = list(tokens)
    edited[position] = new_token
    return np.flatnonzero(np.any(model.forward(tokens)[0] != model.forward(edited)[0], axis=-1))


def test_sliding_window_hides_keys_at_window_distance(tmp_path):
    # One SWA layer: a token at p0 reaches exactly the queries p0 .. p0 + window - 1.
    model = ReferenceModel(write_tiny_model(tmp_path / "m.gguf", "gemma3", n_layer=1, sliding_window_pattern=0))
    assert model.hparams.is_swa == (True,) and model.hparams.n_swa == 8
    tokens = list(np.random.default_rng(2).integers(3, 320, 20))
    np.testing.assert_array_equal(_changed_positions(model, tokens, 3, 7), np.arange(3, 11))

    dense = ReferenceModel(write_tiny_model(tmp_path / "d.gguf", "gemma3", n_layer=1, sliding_window=None))
    assert dense.hparams.is_swa == (False,)
    np.testing.assert_array_equal(_changed_positions(dense, tokens, 3, 7), np.arange(3, 20))


def test_only_global_layers_carry_a_token_past_the_windows(tmp_path):
    # 7 SWA layers of window 4 carry position 0 at most 7 * 3 positions on.
    tokens = list(np.random.default_rng(3).integers(3, 320, 40))
    all_swa = ReferenceModel(write_tiny_model(tmp_path / "s.gguf", "gemma3", sliding_window=4, sliding_window_pattern=0))
    assert all(all_swa.hparams.is_swa)
    assert _changed_positions(all_swa, tokens, 0, 7).max() <= 21
    # The default pattern makes layer 5 global, and it sees position 0 from everywhere.
    mixed = ReferenceModel(write_tiny_model(tmp_path / "m.gguf", "gemma3", sliding_window=4))
    assert mixed.hparams.is_swa == (True, True, True, True, True, False, True)
    np.testing.assert_array_equal(_changed_positions(mixed, tokens, 0, 7), np.arange(40))


def test_rope_modes_and_relative_positions():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 8)).astype(np.float32)
    n_pos = 6
    xs = np.repeat(x, n_pos, axis=0)
    normal = rope(xs, 8, "normal", 100.0, 0.5)
    # NEOX rotates (x[i], x[i + n/2]) as NORMAL rotates (x[2i], x[2i + 1]).
    interleaved_to_halves = np.r_[0:8:2, 1:8:2]
    neox = rope(xs[..., interleaved_to_halves], 8, "neox", 100.0, 0.5)
    np.testing.assert_array_equal(neox, normal[..., interleaved_to_halves])
    np.testing.assert_array_equal(normal[0], x[0])  # position 0 does not turn
    # q.k depends on positions only through their difference (up to f32 rounding: rope is ggml's f32).
    dots = np.einsum("pd,qd->pq", normal[:, 0].astype(np.float64), normal[:, 1].astype(np.float64))
    np.testing.assert_allclose(dots[1, 3], dots[2, 4], rtol=1e-6)
    # Dimensions past n_rot are left alone.
    partial = rope(xs, 4, "normal", 100.0, 1.0)
    np.testing.assert_array_equal(partial[..., 4:], xs[..., 4:])


def test_hparams_follow_llama_cpp_defaults(tmp_path):
    bare = write_tiny_model(tmp_path / "l.gguf", "llama", n_head_kv=4, metadata={
        "llama.rope.freq_base": None, "llama.attention.head_count_kv": None, "llama.rope.dimension_count": None,
    })
    hp = ReferenceModel(bare).hparams
    assert hp.rope_freq_base == (10000.0, 10000.0) and hp.n_head_kv == 4 and hp.n_rot == 16
    assert hp.rope_mode == "normal" and hp.attn_scale == pytest.approx(16**-0.5)

    hp = ReferenceModel(write_tiny_model(tmp_path / "g.gguf", "gemma3", n_layer=13, rope_scaling_factor=4.0)).hparams
    swa = tuple(il % 6 < 5 for il in range(13))
    assert hp.is_swa == swa and hp.rope_mode == "neox"
    assert hp.rope_freq_base == tuple(10000.0 if s else 1000000.0 for s in swa)
    assert hp.rope_freq_scale == tuple(1.0 if s else 0.25 for s in swa)
    assert hp.attn_scale == pytest.approx(32**-0.5) and hp.embd_scale == pytest.approx(8.0)


def test_final_logit_softcapping(tmp_path):
    plain, _ = ReferenceModel(write_tiny_model(tmp_path / "p.gguf", "gemma3")).forward([1, 5, 9])
    capped, _ = ReferenceModel(write_tiny_model(tmp_path / "c.gguf", "gemma3", final_logit_softcapping=2.0)).forward([1, 5, 9])
    np.testing.assert_allclose(capped, 2.0 * np.tanh(plain / 2.0), rtol=1e-5, atol=1e-6)


def test_reference_refuses_what_it_does_not_implement(tmp_path):
    dynamic = write_tiny_model(tmp_path / "y.gguf", "llama", metadata={"llama.rope.scaling.type": "dynamic"})
    with pytest.raises(NotImplementedError, match="dynamic"):
        ReferenceModel(dynamic)
    sinks = write_tiny_model(tmp_path / "s.gguf", "qwen2")
    with pytest.raises(NotImplementedError, match="attn_sinks"):
        ReferenceModel(copy_gguf(str(sinks), tmp_path / "s2.gguf", tensors={"blk.0.attn_sinks.weight": np.ones(4, np.float32)}))


# --- real models -------------------------------------------------------------------------


@pytest.mark.parametrize("model_path, space", [
    ("smollm2_path", "\u0120"),  # GPT-2 byte-level BPE space
    ("gemma3_path", "\u2581"),  # SentencePiece space
])
def test_reference_completes_a_fact_on_real_models(request, model_path, space):
    path = request.getfixturevalue(model_path)
    reader = GGUFReader(path)
    fields = reader.fields
    vocab = {piece: i for i, piece in enumerate(fields["tokenizer.ggml.tokens"].contents())}
    words = ["The"] + [space + w for w in ["capital", "of", "France", "is", "the", "city", "of"]]
    tokens = [vocab[w] for w in words]
    if fields["tokenizer.ggml.add_bos_token"].contents():
        tokens.insert(0, fields["tokenizer.ggml.bos_token_id"].contents())
    logits, _ = ReferenceModel(reader).forward(tokens)
    top2 = np.argsort(logits[-1])[-2:]
    assert top2[1] == vocab[space + "Paris"]
    assert logits[-1, top2[1]] - logits[-1, top2[0]] > 1.0
