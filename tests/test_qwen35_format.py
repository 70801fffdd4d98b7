"""The tiny qwen35 and qwen35moe files the tests write are llama.cpp's format:
llama.cpp loads them (the interval and the per-layer forms of the layer kinds,
float and quantized, experts in separate or fused gate/up stacks) and decodes with
them, a hybrid trunk of GatedDeltaNet and attention; ggspec agrees with it on every
clear argmax, and llama.cpp's own MTP speculation runs on the files' NextN block."""

import math

import numpy as np
import pytest

import ggspec
from bench.peer.commands import speculative_cmd
from bench.peer.generation_stats import run_for_stats
from bench.peer.peer import peer_greedy, peer_logits
from tests.fixtures.tiny_qwen35 import MOE, write_tiny_qwen35

pytestmark = pytest.mark.peer


@pytest.mark.parametrize("dtype,options", [("f32", {}), ("q8_0", dict(recurrent_layers=[True, False, True, False])),
                                           ("q4_k", MOE)])
def test_llama_cpp_runs_the_tiny_qwen35(tmp_path, dtype, options):
    path = write_tiny_qwen35(tmp_path / "tiny-qwen35.gguf", dtype=dtype, **options)
    [(ids, margins)] = peer_greedy(path, [[1, 50, 60, 70, 80]], 8, n_threads=1)
    assert len(ids) == 8 and all(0 <= t < 320 for t in ids)
    assert all(math.isfinite(m) for m in margins)
    assert len(set(ids)) > 2  # a working trunk, not a constant or an echo


def test_layer_kind_flags_must_cover_the_trunk(tmp_path):
    with pytest.raises(ValueError, match="3 flags for 4 layers"):
        write_tiny_qwen35(tmp_path / "bad.gguf", recurrent_layers=[True, True, False])


# two shapes: the default (grouped GDN heads, layer kinds by interval) and a wider one
# (ungrouped GDN heads, head_dim 64 with 16 rotated dims, per-layer kind flags); each
# also as qwen35moe (8 experts, 3 a row; the wide one 16 experts, 4 a row, gate and up fused)
WIDE = dict(n_layer=6, recurrent_layers=[True, True, False, True, True, False], ssm_groups=4, ssm_v_heads=4,
            ssm_state=32, head_dim=64, n_rot=16, rope_sections=(4, 2, 2, 0), n_head=2, n_head_kv=1)
SHAPES = {
    "grouped": {},
    "wide": WIDE,
    "grouped-moe": MOE,
    "wide-moe": WIDE | dict(n_expert=16, n_expert_used=4, fused_gate_up=True),
}
MARGIN = 0.1  # ggspec's f32 logits stay within 0.02 of llama.cpp's on these files


@pytest.mark.parametrize("n_nextn", [0, 1])
@pytest.mark.parametrize("shape", SHAPES)
def test_ggspec_agrees_with_llama_cpp_on_every_clear_argmax(tmp_path, shape, n_nextn):
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", n_nextn=n_nextn, **SHAPES[shape])
    tokens = np.random.default_rng(7).integers(3, 320, size=64).tolist()
    theirs = peer_logits(path, tokens, n_threads=1)
    ours = ggspec.load(path, n_ctx=256, n_threads=1).spec_forward(tokens, all_logits=True).logits
    top2 = np.sort(theirs, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > MARGIN
    assert clear.sum() >= 48
    assert (ours.argmax(1) == theirs.argmax(1))[clear].all()


@pytest.mark.parametrize("shape", SHAPES)
def test_llama_cpp_runs_its_mtp_speculation_on_the_file(tmp_path, shape):
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", **SHAPES[shape])
    stats = run_for_stats(speculative_cmd(path, "a b c d", "draft-mtp", n_predict=24, threads=1, ctx=256))
    assert stats["draft_n"] > 0
