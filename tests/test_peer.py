"""llama.cpp, the second oracle, agrees with ggspec on the same GGUF files.

Marked `peer`: these fail (never skip) when the peer build is missing; the
README's test command builds it first.
"""

import numpy as np
import pytest

import ggspec
from bench.peer.peer import peer_greedy, peer_logits, peer_tokenize
from tests.fixtures.tiny_models import ARCHS

pytestmark = pytest.mark.peer

MARGIN = 0.05  # positions where llama.cpp's top-1 leads top-2 by more count
TEXT = (
    "The old stonemasons who built the cathedral worked without written plans. Each guild kept its "
    "own methods, passed from master to apprentice, and the town records show that the north tower "
    "took forty years to finish. Today, visitors climb its narrow stairs to see the river valley, "
    "the market square and, on clear days, the blue line of the mountains far to the south."
)


def agreement(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float, float]:
    """(fraction of positions that qualify, fraction of those whose argmax agrees, max |diff|)."""
    top2 = np.sort(theirs, axis=1)[:, -2:]
    qualifies = top2[:, 1] - top2[:, 0] > MARGIN
    agrees = ours.argmax(1) == theirs.argmax(1)
    return float(qualifies.mean()), float(agrees[qualifies].mean()), float(np.abs(ours - theirs).max())


def check_against_peer(path: str, tokens: list[int], n_ctx: int = 256) -> None:
    target = ggspec.load(path, n_ctx=n_ctx)
    ours = target.spec_forward(tokens, all_logits=True).logits
    # llama.cpp decoding token by token, as it generates: its batched K-quant
    # kernels are not batch-invariant, so a one-shot batch would compare ggspec
    # with a variant llama.cpp itself never emits from.
    theirs = peer_logits(path, tokens, n_threads=2, n_ctx=n_ctx, one_by_one=True)
    qualified, agreed, max_diff = agreement(ours, theirs)
    print(f"{path}: {qualified:.0%} of positions qualify, argmax agrees on {agreed:.0%}, "
          f"max |logit diff| {max_diff:.4g}")
    assert qualified >= 0.9, f"only {qualified:.0%} of positions have a top-1 lead over {MARGIN}"
    assert agreed == 1.0, f"argmax differs from llama.cpp on {1 - agreed:.0%} of qualifying positions"


@pytest.mark.parametrize("dtype", ["f32", "q8_0", "q4_k"])
@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_models_agree_with_llama_cpp(tiny_model, arch, dtype):
    path = tiny_model(arch, dtype)
    tokens = np.random.default_rng(7).integers(3, 320, size=64).tolist()
    check_against_peer(path, tokens)


@pytest.mark.parametrize("arch", ["qwen35moe", "muse-glimmer"])
def test_llama_completion_decodes_the_newest_families(tiny_model, arch):
    """llama.cpp's own tool loads and decodes the tiny files (their logits and argmaxes
    are compared above and in test_qwen35_format.py)."""
    from bench.peer.commands import completion_cmd
    from bench.peer.generation_stats import completion_stats, run_for_stats

    n = 24
    stats = run_for_stats(completion_cmd(tiny_model(arch, "q8_0"), "a b c d e", n, threads=1, ctx=256),
                          parse=completion_stats)
    assert stats["call_tokens"] == n - 1  # the first token comes with the prompt


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_real_models_agree_with_llama_cpp(request, model):
    path = request.getfixturevalue(model)
    tokens = peer_tokenize(path, TEXT)[:64]
    assert len(tokens) == 64
    check_against_peer(path, tokens)


PHI3_FACTORS = (tuple(np.geomspace(1.0, 6.0, 12).round(3)), tuple(np.geomspace(1.0, 1.4, 12).round(3)))
PHI3_LONGROPE = {"n_rot": 24, "rope_factors": PHI3_FACTORS, "rope_original_context": 512, "rope_attn_factor": 1.19}
# Other shapes and seeds than the other tiny files: 96 wide (heads of 24, 12 rotated pairs)
# or, for phi3, 128 wide with 32-wide heads rotated over 24 dims.
ROPE_FILES = {
    "llama-rope_freqs": ("llama", {"rope_freqs": tuple(np.geomspace(1.0, 8.0, 12).round(3))}),  # Llama 3.1+
    "llama-rope_freqs-linear": ("llama", {"rope_freqs": tuple(np.geomspace(1.0, 4.0, 12).round(3)),
                                          "rope_scaling_factor": 2.0}),
    "llama-linear": ("llama", {"rope_scaling_factor": 4.0}),
    "llama-yarn": ("llama", {"rope_scaling": "yarn", "rope_scaling_factor": 4.0, "rope_original_context": 32}),
    "qwen2": ("qwen2", {"seed": 23}),
    "phi3-longrope": ("phi3", {"n_embd": 128, "n_head_kv": 1, **PHI3_LONGROPE}),
}


def rope_file(tiny_model, name: str) -> str:
    arch, overrides = ROPE_FILES[name]
    shape = {"n_embd": 96, "n_head": 4, "n_head_kv": 2, "n_ff": 192, "seed": 21}
    return tiny_model(arch, "f32", **{**shape, **overrides})


@pytest.mark.parametrize("name,n_ctx", [(name, 256) for name in ROPE_FILES] + [("phi3-longrope", 1024)])
def test_rope_options_and_new_families_agree_with_llama_cpp(tiny_model, name, n_ctx):
    # phi3-longrope at 256 runs its short factors, at 1024 its long ones (as llama.cpp picks them)
    tokens = np.random.default_rng(8).integers(3, 320, size=64).tolist()
    check_against_peer(rope_file(tiny_model, name), tokens, n_ctx=n_ctx)


@pytest.mark.parametrize("name", ROPE_FILES)
def test_greedy_text_on_rope_options_and_new_families_is_llama_cpps(tiny_model, name):
    path = rope_file(tiny_model, name)
    prompt = np.random.default_rng(9).integers(3, 320, size=24).tolist()
    n = 48
    model = ggspec.Model(path, n_ctx=256, n_threads=2)
    engine = ggspec.Engine(model)
    try:
        ours = engine.submit(prompt, max_tokens=n, temperature=0, ignore_eos=True, spec=False).result.tokens
    finally:
        engine.close()
    (theirs, margins), = peer_greedy(path, [prompt], n, n_ctx=256, n_threads=2, prompt_ubatch=1)
    parted = next((j for j, (a, b) in enumerate(zip(ours, theirs)) if a != b), n)
    print(f"{name}: {parted} of {n} greedy tokens as llama.cpp's: {model.tokenizer.decode(ours)!r}")
    assert parted == n or margins[parted] < MARGIN, (
        f"parted from llama.cpp at token {parted} where its top-1 leads by {margins[parted]:.3f}: "
        f"{model.tokenizer.decode(ours)!r} vs {model.tokenizer.decode(theirs)!r}")
