"""ggspec's multi-row CPU kernels (csrc/kernels/) and the bits they give.

Every weight product, and attention's products with the F16 KV cache, run on
them when the CPU can and the type has a kernel on the path ("vnni":
AVX512-VNNI, "avx2"): every type the loader takes but F32; a forward of one row
on ggml's own vec_dot with the weights fetched ahead (kernels/one_row_dot.h).
`row_kernels="off"` keeps ggml_mul_mat everywhere. The two targets must agree
bit for bit on logits and hidden taps, in prefill chunks and in verifies of
every size, on each path.

"vnni-block" runs the 32-value block types and Q4_K/Q5_K/Q6_K in ggspec's block
orders (kernels/q8_dot_rows.h, kernels/k_block_order.h), one row included, and
every other type as "vnni" does: its block-order products must equal their scalar reference (the probe),
sit within float noise of ggml's, and give a verify's and a prefill chunk's
rows a one-row step's bits.
"""

import subprocess
import sys

import numpy as np
import pytest

import ggspec
from ggspec import _core
from tests.test_exactness import assert_bits_equal, check_every_window

VERIFY_ROWS = (1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 65)
TAPS = (0, "final")
PATHS = ("vnni", "avx2")  # vnni-block runs vnni's kernels for every type but BLOCK_ORDER
BLOCK_ORDER = ("q8_0", "q5_0", "q4_0", "q4_1", "q5_1", "iq4_nl", "q4_k", "q5_k", "q6_k")  # the types vnni-block takes in its own order
TYPES = ("q8_0", "q5_0", "q4_0", "q4_1", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq3_s", "iq4_nl", "iq4_xs", "f16", "bf16")


def pair(path, kernels, **kw):
    if kernels not in _core.row_kernel_paths():
        pytest.skip(f"this CPU does not run the {kernels} kernels")
    with_kernel = ggspec.load(path, n_ctx=512, prefill_chunk=64, n_threads=2, row_kernels=kernels, **kw)
    assert with_kernel.row_kernels == kernels
    # On a CPU that runs it, a kernel whose probe found other bits than its reference is a failure, not a skip.
    assert with_kernel.lm_head_row_kernel, "the kernel disabled itself: its probe disagreed with its reference"
    assert _core.masked_soft_max_usable(), "the masked softmax disabled itself: its probe disagreed with ggml's"
    assert _core.fused_attention_usable(), "the fused attention disabled itself: its probe disagreed with the chain"
    assert _core.row_argmax_usable(), "the row argmax disabled itself: its probe disagreed with ggml_argmax"
    assert _core.geglu_usable(), "the GeGLU op disabled itself: its probe disagreed with ggml's geglu"
    assert _core.rms_norm_usable(), "the RMS norm op disabled itself: its probe disagreed with ggml's"
    return with_kernel, ggspec.load(path, n_ctx=512, prefill_chunk=64, n_threads=2, row_kernels="off", **kw)


def assert_same_forward(a, b, tokens, what, **kw):
    ra, rb = a.spec_forward(tokens, **kw), b.spec_forward(tokens, **kw)
    assert_bits_equal(ra.logits, rb.logits, f"logits of {what}")
    if kw.get("hidden_layers"):
        assert_bits_equal(ra.hidden, rb.hidden, f"hidden taps of {what}")


@pytest.mark.parametrize("kernels,dtype", [(p, t) for p in PATHS for t in TYPES])
@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_kernel_matches_ggml_mul_mat(tiny_model, arch, kernels, dtype):
    kernel, plain = pair(tiny_model(arch, dtype), kernels)
    rng = np.random.default_rng(3)
    prompt = rng.integers(3, kernel.n_vocab, size=150).tolist()  # 64 + 64 + 22 rows
    assert_same_forward(kernel, plain, prompt, "a chunked prefill", all_logits=True, hidden_layers=TAPS)
    for k in VERIFY_ROWS:
        tokens = rng.integers(3, kernel.n_vocab, size=k).tolist()
        assert_same_forward(kernel, plain, tokens, f"a {k}-row verify", all_logits=True, hidden_layers=TAPS)
        kernel.rewind(len(prompt))
        plain.rewind(len(prompt))
    assert kernel.packed_weight_bytes == 0  # only vnni-block packs weights


@pytest.mark.parametrize("kernels", PATHS)
def test_attention_heads_split_between_threads(tiny_model, kernels):
    """3 heads on 2 threads: the fused attention gives the third head's rows half
    to each thread (kernels/fused_attention.cpp); each row keeps ggml's bits."""
    kernel, plain = pair(tiny_model("qwen3", "q8_0", n_head=3, n_head_kv=1), kernels)
    rng = np.random.default_rng(6)
    prompt = rng.integers(3, kernel.n_vocab, size=150).tolist()
    assert_same_forward(kernel, plain, prompt, "a chunked prefill", all_logits=True)
    for k in (1, 2, 7, 8):
        assert_same_forward(kernel, plain, rng.integers(3, kernel.n_vocab, size=k).tolist(), f"a {k}-row verify",
                            all_logits=True)
        kernel.rewind(len(prompt))
        plain.rewind(len(prompt))


@pytest.mark.parametrize("dtype", BLOCK_ORDER)
@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_block_order_is_near_ggml_mul_mat(tiny_model, arch, dtype):
    """pair() asserts that the probe found the kernel equal to its scalar reference
    at 1-12 rows (every tile shape). Against ggml's order, a one-row forward's
    logits differ by rounding, about 1e-7 of their scale; a token whose
    activations' quantization flips on a rounding moves further (1e-2 seen), so
    the median over tokens is what is bounded: a reference that got a scale or
    a min term wrong would be far off for every token."""
    kernel, plain = pair(tiny_model(arch, dtype), "vnni-block")
    rel = []
    for token in range(3, kernel.n_vocab, 20):
        ours, ggml = kernel.spec_forward([token]).logits, plain.spec_forward([token]).logits
        rel.append(float(np.abs(ours - ggml).max() / np.abs(ggml).max()))
        kernel.reset()
        plain.reset()
    assert np.median(rel) < 1e-5, rel


@pytest.mark.parametrize("dtype", BLOCK_ORDER)
@pytest.mark.parametrize("arch", ["gemma3", "llama"])
def test_block_order_rows_match_one_row_steps(tiny_model, arch, dtype):
    """Verifies of 1-17 rows (every tile shape, a wide group and what follows it)
    and a chunked prefill (64 + 64 + 30 rows: the last chunk's 4 wide groups,
    which 4-bit weights meet in place) against one-row steps."""
    if "vnni-block" not in _core.row_kernel_paths():
        pytest.skip("this CPU does not run the vnni kernels")
    target = ggspec.load(tiny_model(arch, dtype), n_ctx=512, prefill_chunk=64, n_threads=2, row_kernels="vnni-block")
    assert target.lm_head_row_kernel, "the block order disabled itself: its probe disagreed with its reference"
    rng = np.random.default_rng(8)
    prompt = rng.integers(3, target.n_vocab, size=158).tolist()
    check_every_window(target, prompt, rng.integers(3, target.n_vocab, size=17).tolist(), TAPS)
    target.reset()
    chunked = target.spec_forward(prompt, all_logits=True).logits
    target.reset()
    steps = np.concatenate([target.spec_forward([token]).logits for token in prompt])
    assert_bits_equal(chunked, steps, "a chunked prefill's logits")
    # Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K run packed 16 rows to a register (kernels/lane_packs.h); no other type is copied
    assert (target.packed_weight_bytes > 0) == (dtype in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k")), target.packed_weight_bytes


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_real_model_block_order_rows_match_one_row_steps(request, model):
    if "vnni-block" not in _core.row_kernel_paths():
        pytest.skip("this CPU does not run the vnni kernels")
    target = ggspec.load(request.getfixturevalue(model), n_ctx=512, n_threads=2, row_kernels="vnni-block")
    assert target.lm_head_row_kernel  # both LM heads are Q8_0
    rng = np.random.default_rng(5)
    prompt = rng.integers(100, 20000, size=24).tolist()
    check_every_window(target, prompt, rng.integers(100, 20000, size=17).tolist())


@pytest.mark.parametrize("kernels", PATHS)
@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_real_model_kernel_matches_ggml_mul_mat(request, model, kernels):
    path = request.getfixturevalue(model)
    kernel, plain = pair(path, kernels)  # both LM heads are Q8_0, which every path runs
    rng = np.random.default_rng(4)
    prompt = rng.integers(3, kernel.n_vocab, size=40).tolist()
    assert_same_forward(kernel, plain, prompt, "the prompt", all_logits=True)
    for k in (4, 7, 32):
        tokens = rng.integers(3, kernel.n_vocab, size=k).tolist()
        assert_same_forward(kernel, plain, tokens, f"a {k}-row verify", all_logits=True, top_k=0)
        kernel.rewind(len(prompt))
        plain.rewind(len(prompt))
        ids = [t.spec_forward(tokens, all_logits=True, top_k=1).ids for t in (kernel, plain)]
        np.testing.assert_array_equal(ids[0], ids[1], err_msg=f"greedy picks of a {k}-row verify")
        kernel.rewind(len(prompt))
        plain.rewind(len(prompt))


@pytest.mark.parametrize("kv_type", ["f32", "bf16"])
def test_kv_cache_types_match_across_paths(tiny_model, kv_type):
    """The kernel paths write the transposed V cache by their own op (kernels/set_columns.cpp)."""
    kernel, plain = pair(tiny_model("gemma3", "q8_0"), PATHS[-1], kv_type=kv_type)
    rng = np.random.default_rng(5)
    prompt = rng.integers(3, kernel.n_vocab, size=150).tolist()
    assert_same_forward(kernel, plain, prompt, "a chunked prefill", all_logits=True)
    for k in (1, 8):
        assert_same_forward(kernel, plain, rng.integers(3, kernel.n_vocab, size=k).tolist(), f"a {k}-row step",
                            all_logits=True)


def test_the_path_is_chosen_and_reported(tiny_model):
    path = tiny_model("llama", "q8_0")
    best = (_core.row_kernel_paths() or ["off"])[0]
    assert ggspec.load(path, n_ctx=64).row_kernels == best
    assert ggspec.load(path, n_ctx=64, row_kernels=True).row_kernels == best
    off = ggspec.load(path, n_ctx=64, row_kernels=False)
    assert off.row_kernels == "off" and not off.lm_head_row_kernel
    assert not ggspec.load(tiny_model("llama", "f32"), n_ctx=64).lm_head_row_kernel  # not a type it decodes
    with pytest.raises(ValueError, match="row_kernels must be auto, vnni, vnni-block, avx2 or off, got 'sse'"):
        ggspec.load(path, n_ctx=64, row_kernels="sse")
    with pytest.raises(TypeError, match="row_kernels"):
        ggspec.load(path, n_ctx=64, row_kernels=1)


@pytest.mark.parametrize("dtype", ["q4_1", "q8_0"])
def test_packed_weights_keep_the_files_bits(tiny_model, dtype):
    """vnni-block packs these types (kernels/lane_packs.h) and, on the file's
    mapping, drops the pages under them; the embedding lookup of the tied
    Q8_0 matrix then reads its rows back from the file. A copy in private
    memory (mmap=False) must keep its pages: the two give the same bits, steps
    after the packs included."""
    if "vnni-block" not in _core.row_kernel_paths():
        pytest.skip("this CPU does not run the vnni kernels")
    path = tiny_model("llama", dtype)
    mapped, copied = (ggspec.load(path, n_ctx=256, n_threads=2, row_kernels="vnni-block", mmap=m) for m in (True, False))
    rng = np.random.default_rng(9)
    prompt = rng.integers(3, mapped.n_vocab, size=40).tolist()
    assert_same_forward(mapped, copied, prompt, "a prefill", all_logits=True)
    assert mapped.packed_weight_bytes > 0 and copied.packed_weight_bytes == mapped.packed_weight_bytes
    for token in rng.integers(3, mapped.n_vocab, size=6).tolist():
        assert_same_forward(mapped, copied, [token], "a step after the packs")


@pytest.mark.parametrize("total,rows,ms_per_run", [
    (0, 8, [0, 0]), (1, 8, [0, 0]), (3, 8, [0, 0, 0]), (64, 8, [0, 0]), (64, 128, [0, 0]),
    (1000, 8, [0.01, 0.05, 0.01]), (997, 64, [0.02, 0, 0.02]), (40, 8, [0.3, 0]),
])
def test_threads_take_every_weight_run_once(total, rows, ms_per_run):
    """A multi-row product's threads keep the last quarter of their shares in
    reserve, for the threads that finish first (RunDealer): each run is still
    computed exactly once, whatever the threads' speeds."""
    takers, counts = _core.deal_runs(total, rows, ms_per_run)
    assert counts == [1] * total, counts
    assert set(takers) <= set(range(len(ms_per_run)))


@pytest.mark.parametrize("rows", [8, 128])
def test_a_faster_thread_takes_a_slower_ones_reserve(rows):
    """Thread 1 at a tenth of thread 0's speed: thread 0 takes runs from the
    back of thread 1's share (two pieces of its reserve for a verify's rows,
    the reserve whole for a prefill chunk's). A thread that looks before the
    other has started takes nothing, so a start delayed by a loaded host gets
    another try."""
    for _ in range(5):
        takers, counts = _core.deal_runs(64, rows, [0.2, 2.0])
        assert counts == [1] * 64
        if takers[:32] == [0] * 32 and 0 in takers[32:]:
            assert takers[32:56] == [1] * 24  # thread 1's own three quarters stay its own
            return
    pytest.fail(f"thread 0 never took a run of the slower thread's share: {takers}")


@pytest.mark.parametrize("kernels", PATHS + ("vnni-block",))
def test_rows_are_the_same_on_any_thread_count(tiny_model, kernels):
    """Shares of the weight rows change with the thread count, and a thread that
    finishes first takes from the others' reserves (RunDealer): with a busy
    process beside them one of two threads shares its core and falls behind.
    No output's bits may move."""
    if kernels not in _core.row_kernel_paths():
        pytest.skip(f"this CPU does not run the {kernels} kernels")
    path = tiny_model("llama", "q4_1", n_embd=256, n_ff=768)
    rng = np.random.default_rng(11)
    prompt = rng.integers(3, 200, size=150).tolist()
    verifies = [rng.integers(3, 200, size=k).tolist() for k in (8, 16, 3, 8)]

    def rows(n_threads):
        target = ggspec.load(path, n_ctx=512, prefill_chunk=64, n_threads=n_threads, row_kernels=kernels)
        out = [target.spec_forward(prompt, all_logits=True).logits]
        for tokens in verifies:
            for _ in range(3):  # the same rows again, on other timings
                out.append(target.spec_forward(tokens, all_logits=True).logits)
                target.rewind(len(prompt))
        return np.concatenate(out)

    one = rows(1)
    assert_bits_equal(rows(2), one, "logits on 2 threads against 1")
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"])
    try:
        assert_bits_equal(rows(2), one, "logits on 2 threads beside a busy process against 1")
    finally:
        busy.kill()
        busy.wait()
