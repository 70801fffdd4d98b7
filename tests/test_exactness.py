"""Row i of a k-row verify gives the same bits as the one-row step at that position.

This is the property that lets speculative decoding reproduce plain decoding
exactly: every emitted token is drawn from a verify row, so the rows must not
depend on how many other rows were in the batch.
"""

import numpy as np
import pytest

import ggspec
from tests.fixtures.tiny_models import ATTENTION_ARCHS, TARGET_ARCHS

MAX_ROWS = 65
TAPS = (0, 1, "final")


def assert_bits_equal(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, what
    if not np.array_equal(actual.view(np.uint32), expected.view(np.uint32)):
        diff = np.abs(actual - expected)
        row = int(np.unravel_index(diff.argmax(), diff.shape)[0])
        pytest.fail(f"{what}: not bit-identical (max |diff| {diff.max():.3g} at row {row})")


def one_row_steps(target, prompt, seq, taps=()):
    target.reset()
    target.spec_forward(prompt)
    results = [target.spec_forward([tok], hidden_layers=taps) for tok in seq]
    logits = np.concatenate([r.logits for r in results])
    hidden = np.concatenate([r.hidden for r in results]) if taps else None
    return logits, hidden


def back_to_prompt(target, prompt):
    """A rewind, or a fresh prefill where a recurrent state cannot go back that far
    (it reaches only rows of the last verify, and a chunked forward keeps none)."""
    try:
        target.rewind(len(prompt))
    except ValueError:
        target.reset()
        target.spec_forward(prompt)


def check_every_window(target, prompt, seq, taps=()):
    ref_logits, ref_hidden = one_row_steps(target, prompt, seq, taps)
    for k in range(1, len(seq) + 1):
        back_to_prompt(target, prompt)
        r = target.spec_forward(seq[:k], all_logits=True, hidden_layers=taps)
        assert_bits_equal(r.logits, ref_logits[:k], f"logits of a {k}-row verify")
        if taps:
            assert_bits_equal(r.hidden, ref_hidden[:k], f"hidden taps of a {k}-row verify")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0", "q5_0", "q5_1", "q4_0", "q4_1", "q2_k", "q3_k",
                                   "q4_k", "q5_k", "q6_k", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq3_s", "iq4_nl",
                                   "iq4_xs"])
@pytest.mark.parametrize("arch", TARGET_ARCHS)
def test_tiny_verify_rows_match_one_row_steps(tiny_model, arch, dtype):
    # With 64-row prefill chunks gemma3's sliding-window layers keep a ring of
    # 128 slots (window 8 + 64 - 1, rounded up), and 300 prompt tokens wrap it.
    target = ggspec.load(tiny_model(arch, dtype), n_ctx=512, prefill_chunk=64)
    rng = np.random.default_rng(1)
    prompt = rng.integers(3, target.n_vocab, size=300).tolist()
    seq = rng.integers(3, target.n_vocab, size=MAX_ROWS).tolist()
    check_every_window(target, prompt, seq, TAPS)


@pytest.mark.parametrize("arch", TARGET_ARCHS)
def test_prefill_chunks_match_one_row_steps(tiny_model, arch):
    target = ggspec.load(tiny_model(arch, "q8_0"), n_ctx=256, prefill_chunk=16)
    tokens = np.random.default_rng(2).integers(3, target.n_vocab, size=50).tolist()
    chunked = target.spec_forward(tokens, all_logits=True, hidden_layers=TAPS)
    ref_logits, ref_hidden = one_row_steps(target, tokens[:1], tokens[1:], TAPS)
    target.reset()
    first = target.spec_forward(tokens[:1], all_logits=True, hidden_layers=TAPS)
    assert_bits_equal(chunked.logits, np.concatenate([first.logits, ref_logits]), "chunked prefill logits")
    assert_bits_equal(chunked.hidden, np.concatenate([first.hidden, ref_hidden]), "chunked prefill taps")


@pytest.mark.parametrize("n", [16, 17, 33])
def test_last_row_of_a_chunked_prefill(tiny_model, n):
    # With 16-row chunks, the last chunk may hold a single row: its logits are
    # still the forward's only output row.
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=128, prefill_chunk=16)
    tokens = np.random.default_rng(6).integers(3, target.n_vocab, size=n).tolist()
    all_rows = target.spec_forward(tokens, all_logits=True, hidden_layers=TAPS)
    target.reset()
    last = target.spec_forward(tokens, hidden_layers=TAPS)
    assert_bits_equal(last.logits, all_rows.logits[-1:], "last-row logits of a chunked prefill")
    assert_bits_equal(last.hidden, all_rows.hidden, "hidden taps of a chunked prefill")
    target.reset()
    top = target.spec_forward(tokens, top_k=3)
    assert np.array_equal(top.ids[0], np.argsort(-all_rows.logits[-1], kind="stable")[:3])


@pytest.mark.parametrize("arch", ATTENTION_ARCHS)
def test_rewind_and_reforward_reproduce_logits(tiny_model, arch):
    # attention-only trunks: a recurrent one rewinds only within its last verify (test_qwen35.py)
    target = ggspec.load(tiny_model(arch, "f16"), n_ctx=256)
    tokens = np.random.default_rng(3).integers(3, target.n_vocab, size=120).tolist()
    full = target.spec_forward(tokens, all_logits=True).logits
    for keep in (119, 100, 64, 1):
        target.rewind(keep)
        again = target.spec_forward(tokens[keep:], all_logits=True).logits
        assert_bits_equal(again, full[keep:], f"re-forward after rewind to {keep}")


def test_top_k_and_argmax_agree_with_full_logits(tiny_model):
    target = ggspec.load(tiny_model("qwen3", "q8_0"), n_ctx=128)
    tokens = np.random.default_rng(4).integers(3, target.n_vocab, size=12).tolist()
    full = target.spec_forward(tokens, all_logits=True).logits
    for k in (1, 5):
        target.reset()
        r = target.spec_forward(tokens, all_logits=True, top_k=k)
        order = np.argsort(-full, axis=1, kind="stable")[:, :k]
        assert np.array_equal(r.ids, order)
        assert_bits_equal(r.logits, np.take_along_axis(full, order, axis=1), f"top-{k} values")


@pytest.mark.parametrize("dtype", ["f16", "q4_1", "q4_k"])
def test_copied_weights_give_the_mapped_weights_bits(tiny_model, dtype):
    path = tiny_model("llama", dtype)
    tokens = np.random.default_rng(6).integers(3, 200, size=70).tolist()
    mapped = ggspec.load(path, n_ctx=128).spec_forward(tokens, all_logits=True).logits
    copied = ggspec.load(path, n_ctx=128, mmap=False)
    assert_bits_equal(copied.spec_forward(tokens, all_logits=True).logits, mapped, "a prefill on copied weights")
    copied.reset()
    steps = np.concatenate([copied.spec_forward([t]).logits for t in tokens[:8]])
    assert_bits_equal(steps, mapped[:8], "one-row steps on copied weights")


def test_mmap_takes_a_bool(tiny_model):
    with pytest.raises(TypeError, match="mmap must be True or False"):
        ggspec.load(tiny_model("llama", "q8_0"), n_ctx=64, mmap="no")


@pytest.mark.slow
def test_the_default_models_copied_weights_give_its_mapped_bits(gemma3_path):
    tokens = np.random.default_rng(7).integers(100, 20000, size=24).tolist()
    mapped = ggspec.load(gemma3_path, n_ctx=64).spec_forward(tokens, all_logits=True).logits
    copied = ggspec.load(gemma3_path, n_ctx=64, mmap=False).spec_forward(tokens, all_logits=True).logits
    assert_bits_equal(copied, mapped, "Gemma 3's logits on copied weights")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_real_model_verify_rows_match_one_row_steps(request, model):
    target = ggspec.load(request.getfixturevalue(model), n_ctx=512)
    rng = np.random.default_rng(5)
    prompt = rng.integers(100, 20000, size=24).tolist()
    seq = rng.integers(100, 20000, size=MAX_ROWS).tolist()
    check_every_window(target, prompt, seq)
