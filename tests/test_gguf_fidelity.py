"""Files as people have them: every piece of a GGUF is used, or the file is refused
naming it; hyperparameters and tensor types are checked before ggml sees them; the
API refuses misuse by name. One regression test per defect the fuzzer and a new
user's tries found (each in a child process, so a crash fails the test)."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType

import ggspec
from tests.conftest import REPO
from tests.fixtures.tiny_dflash import DFLASH2, write_tiny_dflash
from tests.fixtures.tiny_models import U32
from tests.fixtures.tiny_qwen35 import write_tiny_qwen35, write_tiny_qwen35moe
from tests.test_bad_input import copy_gguf, expect_error

F32 = GGUFValueType.FLOAT32
REFUSED = "ggspec.ModelFormatError"


def refuses(path, *fragments):
    expect_error(f"ggspec.Model({str(path)!r}, n_ctx=64).target.spec_forward([1, 2, 3])", REFUSED, *fragments)


@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_a_matrix_in_an_integer_type_is_refused(tiny_model, tmp_path, dtype):
    weight = np.ones((128, 64), dtype)  # ffn_up [n_embd, n_ff] as GGUF writes numpy's reversed shape
    path = copy_gguf(tiny_model("llama"), tmp_path / "int.gguf", tensors={"blk.0.ffn_up.weight": weight})
    refuses(path, "blk.0.ffn_up.weight", "a weight type ggspec does not run")


def test_a_norm_that_is_not_f32_is_refused(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("llama"), tmp_path / "f16norm.gguf",
                     tensors={"blk.1.attn_norm.weight": np.ones(64, np.float16)})
    refuses(path, "blk.1.attn_norm.weight", "F16", "must be F32")


@pytest.mark.parametrize("key,value,fragment", [
    ("attention.layer_norm_rms_epsilon", -1e-5, "layer_norm_rms_epsilon"),
    ("attention.layer_norm_rms_epsilon", float("nan"), "layer_norm_rms_epsilon"),
    ("rope.freq_base", 0.0, "rope.freq_base"),
    ("rope.freq_base", -10000.0, "rope.freq_base"),
    ("rope.freq_base", float("nan"), "rope.freq_base"),
    ("rope.freq_base", float("inf"), "rope.freq_base"),
    ("rope.scaling.factor", float("nan"), "rope.scaling.factor"),
])
def test_hyperparameters_out_of_range_are_refused(tiny_model, tmp_path, key, value, fragment):
    path = copy_gguf(tiny_model("llama"), tmp_path / "bad.gguf", keys={f"llama.{key}": (value, F32)})
    refuses(path, fragment, "finite number")


def test_an_unsupported_rope_scaling_is_refused(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("llama"), tmp_path / "dynamic.gguf",
                     keys={"llama.rope.scaling.type": ("dynamic", GGUFValueType.STRING)})
    refuses(path, "RoPE scaling 'dynamic'", "llama.rope.scaling.type", "none, linear, yarn, longrope")


@pytest.mark.parametrize("arch,name,shape,fragment", [
    ("qwen3", "blk.0.mystery.weight", (8, 64), "does not use"),
    # llama runs them (test_reference); llama.cpp's qwen3 has no place for them, nor has ggspec's
    ("qwen3", "rope_freqs.weight", (16,), "RoPE frequency factors"),
    ("qwen3", "blk.0.attn_output.bias", (64,), "a bias"),
    # LongRoPE factors serve phi3, and llama files whose rope.scaling.type says longrope
    ("llama", "rope_factors_long.weight", (8,), "LongRoPE factors"),
])
def test_a_tensor_the_graph_does_not_use_is_refused_by_name(tiny_model, tmp_path, arch, name, shape, fragment):
    path = copy_gguf(tiny_model(arch), tmp_path / "extra.gguf", tensors={name: np.ones(shape, np.float32)})
    refuses(path, name, fragment)


@pytest.mark.parametrize("arch,head", [("llama", 16), ("qwen2", 16), ("qwen3", 32)])
def test_partial_rotary_is_refused_where_llama_cpp_asserts_whole_heads(tiny_model, tmp_path, arch, head):
    path = copy_gguf(tiny_model(arch), tmp_path / "partial.gguf",
                     keys={f"{arch}.rope.dimension_count": (8, GGUFValueType.UINT32)})
    refuses(path, f"{arch}.rope.dimension_count 8", f"differs from the head size {head}")


def test_a_fused_qkv_with_some_of_the_separate_biases_is_refused(tiny_model, tmp_path):
    # llama.cpp adds separate biases to a fused product only when all three are there
    path = copy_gguf(tiny_model("phi3"), tmp_path / "bias.gguf", tensors={"blk.1.attn_k.bias": np.ones(32, np.float32)})
    refuses(path, "blk.1.attn_qkv.weight", "only some of the attn_q/attn_k/attn_v biases")


def test_one_set_of_longrope_factors_without_the_other_is_refused(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("phi3"), tmp_path / "long.gguf",
                     tensors={"rope_factors_long.weight": np.ones(8, np.float32)})
    refuses(path, "only one of rope_factors_long and rope_factors_short")


def test_a_non_utf8_name_survives_into_the_message(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("qwen3"), tmp_path / "name.gguf",
                     tensors={"blk.0.zzzzzz.weight": np.ones((8, 64), np.float32)})
    data = bytearray(Path(path).read_bytes())
    at = data.index(b"zzzzzz")
    data[at:at + 2] = b"\xff\xfe"
    Path(path).write_bytes(bytes(data))
    refuses(path, "blk.0.", "does not use")


@pytest.mark.parametrize("sections,fragment", [((0, 0, 0, 0), "rope.dimension_sections"),
                                               ((2, 1, 9, 0), "rotated pairs"),
                                               ((-1, 3, 1, 0), "non-negative")])
def test_bad_rope_sections_are_refused(tmp_path, sections, fragment):
    refuses(write_tiny_qwen35(tmp_path / "q35.gguf", rope_sections=sections), fragment)


def test_a_qwen35_without_attention_layers_is_refused(tmp_path):
    path = write_tiny_qwen35(tmp_path / "q35.gguf", recurrent_layers=[True] * 4)
    refuses(path, "no full-attention layer")


@pytest.mark.parametrize("keys,fragment", [
    ({"qwen35moe.expert_count": (0, U32)}, "qwen35moe.expert_count' must be in 1..1024"),
    ({"qwen35moe.expert_count": None}, "qwen35moe.expert_count' must be in 1..1024"),
    ({"qwen35moe.expert_count": (4096, U32)}, "got 4096"),
    ({"qwen35moe.expert_used_count": (9, U32)}, "qwen35moe.expert_used_count' must be in 1..8"),
    ({"qwen35moe.expert_used_count": None}, "expert_used_count"),
    ({"qwen35moe.expert_feed_forward_length": (0, U32)}, "expert_feed_forward_length' must be positive"),
])
def test_bad_expert_counts_are_refused(tiny_model, tmp_path, keys, fragment):
    refuses(copy_gguf(tiny_model("qwen35moe"), tmp_path / "bad.gguf", keys=keys), fragment)


@pytest.mark.parametrize("drop,fragment", [
    (("blk.2.ffn_down_exps.weight",), "blk.2.ffn_down_exps.weight"),
    (("blk.3.ffn_gate_inp.weight",), "blk.3.ffn_gate_inp.weight"),
    (("blk.4.ffn_up_shexp.weight",), "blk.4.ffn_up_shexp.weight"),  # the NextN block's
])
def test_a_moe_file_missing_a_piece_is_refused(tiny_model, tmp_path, drop, fragment):
    refuses(copy_gguf(tiny_model("qwen35moe"), tmp_path / "bad.gguf", drop=drop), fragment)


def test_experts_of_the_wrong_width_are_refused(tmp_path):
    path = write_tiny_qwen35moe(tmp_path / "moe.gguf")
    wide = copy_gguf(str(path), tmp_path / "wide.gguf",
                     keys={"qwen35moe.expert_feed_forward_length": (64, U32)})
    refuses(wide, "ffn_gate_exps.weight")


def test_experts_in_a_dense_architecture_are_refused(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("qwen35"), tmp_path / "q35.gguf", keys={"qwen35.expert_count": (8, U32)})
    refuses(path, "mixture of experts", "qwen35.expert_count 8", "does not run for qwen35")


@pytest.mark.parametrize("keys,drop,fragment", [
    ({"muse-glimmer.logit_scale": None}, (), "lacks 'muse-glimmer.logit_scale'"),
    ({"muse-glimmer.logit_scale": (0.0, F32)}, (), "muse-glimmer.logit_scale"),
    ({"muse-glimmer.attention.sliding_window": None}, (), "muse-glimmer.attention.sliding_window"),
    ({}, ("blk.1.attn_gate.weight",), "blk.1.attn_gate.weight"),
    ({}, ("output.weight",), "output.weight"),  # llama.cpp requires an untied head
])
def test_a_muse_glimmer_file_missing_a_piece_is_refused(tiny_model, tmp_path, keys, drop, fragment):
    refuses(copy_gguf(tiny_model("muse-glimmer"), tmp_path / "bad.gguf", keys=keys, drop=drop), fragment)


def test_a_selector_wider_than_its_candidates_is_refused(tiny_model, tmp_path):
    drafter = write_tiny_dflash(tmp_path / "d2.gguf", dflash2={**DFLASH2, "selector_top_k": 400})
    expect_error(f"ggspec.load({tiny_model('qwen3')!r}, n_ctx=64).attach_drafter({str(drafter)!r})", REFUSED,
                 "selector_top_k", "400")


def test_a_string_key_stored_as_an_array_is_refused(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("llama"), tmp_path / "name.gguf",
                     keys={"general.name": ([1, 2, 3], GGUFValueType.ARRAY)})
    expect_error(f"ggspec.Model({path!r}, n_ctx=64)", REFUSED, "general.name is not a string")


@pytest.mark.parametrize("code,fragment", [
    ("t.spec_forward(np.array([2**32 + 5]))", "token id 4294967301"),
    ("t.spec_forward([1.0, 2.0])", "must be integers"),
    ("t.spec_forward(np.array([[1, 2]]))", "flat sequence"),
    ("t.spec_forward([True])", "must be integers"),
    ("t.rewind(2**63)", "rewind length 9223372036854775808 is out of range"),
    ("t.rewind(1.5)", "rewind length must be an integer"),
])
def test_token_ids_and_lengths_are_checked_exactly(tiny_model, code, fragment):
    expect_error(f"import numpy as np\nt = ggspec.load({tiny_model('llama')!r}, n_ctx=64)\n{code}", "ValueError",
                 fragment)


def test_threads_are_capped_at_the_cpus_the_process_may_use(tiny_model):
    with pytest.warns(UserWarning, match="more than the .* CPUs this process may use"):
        target = ggspec.load(tiny_model("llama"), n_ctx=64, n_threads=1000)
    assert target.n_threads == ggspec.native.target.usable_cpus()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ggspec.load(tiny_model("llama"), n_ctx=64, n_threads=1).n_threads == 1


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ggspec", *args], capture_output=True, text=True, timeout=120,
                          cwd=str(REPO))


def test_a_prompt_file_that_is_not_utf8_is_named(tiny_model, tmp_path):
    prompt = tmp_path / "latin1.txt"
    prompt.write_bytes("caf\xe9".encode("latin-1"))
    proc = cli("generate", "-m", tiny_model("llama"), "-f", str(prompt), "-n", "2")
    assert proc.returncode == 1 and str(prompt) in proc.stderr and "not UTF-8" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_context_too_large_to_allocate_is_one_line(tiny_model):
    proc = cli("generate", "-m", tiny_model("llama"), "-p", "a b", "-n", "2", "-c", "100000000")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "ggspec: error:" in proc.stderr, proc.stderr


def test_many_threads_on_the_cli_warn_and_run(tiny_model):
    proc = cli("generate", "-m", tiny_model("llama"), "-p", "a b", "-n", "2", "-t", "1000", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "ggspec: warning: n_threads 1000 is more than" in proc.stderr
    assert json.loads(proc.stdout)["tokens"]


@pytest.mark.parametrize("key,value,fragment", [
    ("llama.context_length", 0, "must be positive"),
    ("llama.context_length", 2**31, "past 2^31 - 1"),
    ("llama.rope.scaling.original_context_length", 2**32 - 1, "past 2^31 - 1"),
])
def test_a_context_length_ggml_cannot_take_is_refused(tiny_model, tmp_path, key, value, fragment):
    path = copy_gguf(tiny_model("llama"), tmp_path / "ctx.gguf", keys={key: (value, GGUFValueType.UINT32)})
    refuses(path, key, fragment)


def test_an_original_context_of_zero_means_the_training_context(tiny_model):
    # as llama.cpp's context reads rope.scaling.original_context_length
    tokens = list(range(3, 40))
    yarn = {"rope_scaling": "yarn", "rope_scaling_factor": 4.0}
    zero, absent, set_ = (ggspec.load(tiny_model("llama", **yarn, **extra), n_ctx=64).spec_forward(
        tokens, all_logits=True).logits for extra in ({"rope_original_context": 0}, {},
                                                      {"rope_original_context": 16}))
    assert np.array_equal(zero, absent) and not np.array_equal(zero, set_)
