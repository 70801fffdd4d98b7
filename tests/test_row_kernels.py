"""ggspec's multi-row CPU kernel (csrc/kernels/q8_dot_rows.h) gives ggml_mul_mat's bits.

Every weight product of a forward with at least 4 rows runs on it when the CPU
can (AVX512-VNNI) and the weight type is Q8_0, Q5_0, Q4_0 or Q4_1; `row_kernels=False`
keeps ggml_mul_mat everywhere. The two targets must agree bit for bit on logits
and hidden taps, in prefill chunks and in verifies of every size.
"""

import numpy as np
import pytest

import ggspec
from ggspec import _core
from tests.test_exactness import assert_bits_equal

VERIFY_ROWS = (1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 65)
TAPS = (0, "final")


def pair(path, **kw):
    if not _core.row_kernel_cpu():
        pytest.skip("this CPU does not run the multi-row kernel (it needs AVX512-VNNI)")
    with_kernel = ggspec.load(path, n_ctx=512, prefill_chunk=64, n_threads=2, **kw)
    # On a CPU that runs it, a kernel whose probe found other bits than ggml's is a failure, not a skip.
    assert with_kernel.lm_head_row_kernel, "the kernel disabled itself: its probe disagreed with ggml's vec_dot"
    return with_kernel, ggspec.load(path, n_ctx=512, prefill_chunk=64, n_threads=2, row_kernels=False, **kw)


def assert_same_forward(a, b, tokens, what, **kw):
    ra, rb = a.spec_forward(tokens, **kw), b.spec_forward(tokens, **kw)
    assert_bits_equal(ra.logits, rb.logits, f"logits of {what}")
    if kw.get("hidden_layers"):
        assert_bits_equal(ra.hidden, rb.hidden, f"hidden taps of {what}")


@pytest.mark.parametrize("dtype", ["q8_0", "q5_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_kernel_matches_ggml_mul_mat(tiny_model, arch, dtype):
    kernel, plain = pair(tiny_model(arch, dtype))
    rng = np.random.default_rng(3)
    prompt = rng.integers(3, kernel.n_vocab, size=150).tolist()  # 64 + 64 + 22 rows
    assert_same_forward(kernel, plain, prompt, "a chunked prefill", all_logits=True, hidden_layers=TAPS)
    for k in VERIFY_ROWS:
        tokens = rng.integers(3, kernel.n_vocab, size=k).tolist()
        assert_same_forward(kernel, plain, tokens, f"a {k}-row verify", all_logits=True, hidden_layers=TAPS)
        kernel.rewind(len(prompt))
        plain.rewind(len(prompt))


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_real_model_kernel_matches_ggml_mul_mat(request, model):
    kernel, plain = pair(request.getfixturevalue(model))
    rng = np.random.default_rng(4)
    prompt = rng.integers(3, kernel.n_vocab, size=40).tolist()
    assert_same_forward(kernel, plain, prompt, "the prompt", all_logits=True)
    for k in (4, 7, 32):
        tokens = rng.integers(3, kernel.n_vocab, size=k).tolist()
        assert_same_forward(kernel, plain, tokens, f"a {k}-row verify", all_logits=True, top_k=0)
        kernel.rewind(len(prompt))
        plain.rewind(len(prompt))


def test_kernel_is_off_when_asked(tiny_model):
    assert not ggspec.load(tiny_model("llama", "q8_0"), n_ctx=64, row_kernels=False).lm_head_row_kernel
    assert not ggspec.load(tiny_model("llama", "f32"), n_ctx=64).lm_head_row_kernel  # not a type it decodes
