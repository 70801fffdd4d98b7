"""The tiny qwen35 files the tests write are llama.cpp's format: llama.cpp loads
them (the interval and the per-layer forms of the layer kinds, float and
quantized) and decodes with them, a hybrid trunk of GatedDeltaNet and attention."""

import math

import pytest

from bench.peer.peer import peer_greedy
from tests.fixtures.tiny_qwen35 import write_tiny_qwen35

pytestmark = pytest.mark.peer


@pytest.mark.parametrize("dtype,recurrent_layers", [("f32", None), ("q8_0", [True, False, True, False])])
def test_llama_cpp_runs_the_tiny_qwen35(tmp_path, dtype, recurrent_layers):
    path = write_tiny_qwen35(tmp_path / "tiny-qwen35.gguf", dtype=dtype, recurrent_layers=recurrent_layers)
    [(ids, margins)] = peer_greedy(path, [[1, 50, 60, 70, 80]], 8, n_threads=1)
    assert len(ids) == 8 and all(0 <= t < 320 for t in ids)
    assert all(math.isfinite(m) for m in margins)
    assert len(set(ids)) > 2  # a working trunk, not a constant or an echo


def test_layer_kind_flags_must_cover_the_trunk(tmp_path):
    with pytest.raises(ValueError, match="3 flags for 4 layers"):
        write_tiny_qwen35(tmp_path / "bad.gguf", recurrent_layers=[True, True, False])
