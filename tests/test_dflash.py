"""DFlash block drafters: the drafter against its NumPy reference, speculation on and
off giving the same output (greedy, seeded, after a reused prefix), the bindings
that must fail loudly, and llama.cpp running the same files."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggspec
from bench.peer.commands import speculative_cmd
from bench.peer.generation_stats import run_for_stats
from ggspec.speculators.registry import SpeculatorOptions, registry
from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.sampling import Sampler, SamplerConfig
from ggspec.engine.planner import plan_speculation
from ggspec.speculators.options import SpecOptions
from ggspec.speculators.block import BlockDraftSpeculator
from tests.fixtures.tiny_dflash import write_tiny_dflash
from tests.fixtures.tiny_models import write_tiny_model
from tests.fixtures.tiny_qwen35 import write_tiny_qwen35
from tests.test_qwen35 import GREEDY, ParkingGovernor, decode
from tests.reference.numpy_dflash import DFlashReference
from tests.reference.numpy_model import ReferenceModel

VARIANTS = {
    "plain": {},
    "shared-kv": dict(shared_kv=True),
    "sliding-window": dict(sliding_window=(4, [True, False])),
    "own-embeddings": dict(own_embeddings=True),
    "reduced-vocab": dict(reduced_vocab=96),
    "dflash2": dict(dflash2={}),
    "dflash2-reduced-vocab": dict(dflash2={}, reduced_vocab=96),
    "dspark": dict(dspark={}),
    "dspark-bonus-anchor": dict(dspark=dict(sample_from_anchor=False)),
    "dspark-reduced-vocab": dict(dspark={}, reduced_vocab=96),
    "dspark-no-confidence": dict(dspark=dict(confidence=False)),
    "dspark-f16": dict(dspark={}, dtype="f16"),  # conf_proj an F16 matrix, as llama.cpp's converter writes it
}
DSPARK_VARIANTS = [v for v in VARIANTS if v.startswith("dspark")]


@pytest.fixture(scope="module")
def qwen3_target(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("dflash") / "target.gguf", "qwen3")


# the Muse-Glimmer pairs read its layers 1 and 3, a sliding-window and a global one
MUSE_PAIRS = [("muse_target", variant) for variant in ("plain", "dflash2")]
MUSE_LAYERS = dict(target_layers=(1, 3))


@pytest.fixture(scope="module")
def muse_target(tmp_path_factory):
    """A Muse-Glimmer target (logit_scale 0.9, global layers without RoPE): the seed's DFlash model.
    Its window of 64 covers the parity tests' 51 positions: with a window of 8, llama.cpp's
    draft-dflash drafts one token (the first of a block, at position 32) other than the
    NumPy reference's, from the same target and drafter files, where ggspec's is the
    reference's (not looked into further; --swa-full does not change it)."""
    return write_tiny_model(tmp_path_factory.mktemp("dflash-muse") / "target.gguf", "muse-glimmer",
                            sliding_window=64)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not v.startswith(("dflash2", "dspark"))])
def test_drafts_match_the_numpy_reference(qwen3_target, tmp_path, variant):
    drafter_path = write_tiny_dflash(tmp_path / "drafter.gguf", **VARIANTS[variant])
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    drafter = target.attach_drafter(drafter_path)
    tokens = list(range(10, 40))
    features = target.spec_forward(tokens, hidden_layers=list(drafter.target_layers)).hidden
    drafter.inject(features, 0)
    draft = drafter.draft(77, len(tokens), 6, 10)

    ref = DFlashReference(drafter_path, ReferenceModel(qwen3_target))
    logits = ref.draft(ref.inject(features), 77, 5)
    np.testing.assert_allclose(draft.values, np.sort(logits, axis=1)[:, ::-1][:, :10], rtol=0, atol=0.02)
    assert draft.walk()[0] == logits.argmax(1).tolist()


@pytest.mark.parametrize("variant", DSPARK_VARIANTS)
def test_dspark_drafts_match_the_numpy_reference(qwen3_target, tmp_path, variant):
    """The Markov head chained through the block (from the anchor, each row's greedy pick
    biasing the next), the anchor-first block and the bonus-anchor one, and the confidence
    head: ggspec's biased logits, drafts and confidences against the reference's."""
    drafter_path = write_tiny_dflash(tmp_path / "drafter.gguf", **VARIANTS[variant])
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    drafter = target.attach_drafter(drafter_path)
    assert drafter.dspark and drafter.max_draft == 8 - drafter.first_draft_row
    tokens = list(range(10, 40))
    features = target.spec_forward(tokens, hidden_layers=list(drafter.target_layers)).hidden
    drafter.inject(features, 0)
    ref = DFlashReference(drafter_path, ReferenceModel(qwen3_target))
    for n in (1, 3, drafter.max_draft):
        draft = drafter.draft(77, len(tokens), n + drafter.first_draft_row, 10)
        tokens_ref, logits, confidence = ref.dspark_draft(ref.inject(features), 77, n)
        assert draft.ids.shape == (n, 10) and draft.walk()[0] == tokens_ref
        np.testing.assert_allclose(draft.values, np.sort(logits, axis=1)[:, ::-1][:, :10], rtol=0, atol=0.02)
        if confidence is None:
            assert draft.confidence is None
        else:
            np.testing.assert_allclose(draft.confidence, confidence, rtol=0, atol=0.01)


@pytest.mark.parametrize("dflash2", [{}, dict(sliding_window=(4, [True, False]), shared_kv=True),
                                     dict(reduced_vocab=96)])
def test_dflash2_lattice_walks_as_the_numpy_reference(qwen3_target, tmp_path, dflash2):
    """The conv around every sublayer and the selector lattice: ggspec's greedy walk and
    its per-position probabilities agree with the reference's, and only the lattice
    (k ids and k scores per MASK row, k*k pair scores per row after the first) comes back."""
    drafter_path = write_tiny_dflash(tmp_path / "drafter.gguf", dflash2={}, **dflash2)
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    drafter = target.attach_drafter(drafter_path)
    tokens = list(range(10, 40))
    features = target.spec_forward(tokens, hidden_layers=list(drafter.target_layers)).hidden
    drafter.inject(features, 0)
    ref = DFlashReference(drafter_path, ReferenceModel(qwen3_target))
    k = ref.top_k
    for n_block in (2, 4, 8):
        before = drafter.readback_bytes
        draft = drafter.draft(77, len(tokens), n_block, 10)
        rows = n_block - 1
        assert drafter.readback_bytes - before == 4 * (2 * k * rows + k * k * (rows - 1))
        assert draft.ids.shape == (rows, k) and draft.pairs.shape == (rows - 1, k, k)
        tokens_ours, p_ours = draft.walk()
        tokens_ref, p_ref = ref.walk(ref.inject(features), 77, rows)
        assert tokens_ours == tokens_ref
        np.testing.assert_allclose(p_ours, p_ref, rtol=0, atol=0.01)  # the KV cache is f16


def test_a_dflash2_lattice_takes_the_transformed_logit(muse_target, tmp_path):
    """A DFlash2 file for Muse-Glimmer carries the target's logit transform (logit_scale,
    final_logit_softcapping), and the lattice's unary term is the transformed logit: the
    walk is the reference's with it, and the same file without the two keys walks
    differently."""
    target = ggspec.load(muse_target, n_ctx=256, n_threads=2)
    tokens = list(range(10, 40))
    features = target.spec_forward(tokens, hidden_layers=list(MUSE_LAYERS["target_layers"])).hidden
    walks = {}
    for name, transform in (("transformed", dict(logit_scale=0.9, final_logit_softcapping=2.0)),
                            ("raw", dict(logit_scale=0.0, final_logit_softcapping=0.0))):
        path = write_tiny_dflash(tmp_path / f"{name}.gguf", dflash2=transform, **MUSE_LAYERS)
        drafter = target.attach_drafter(path)
        drafter.inject(features, 0)
        walks[name] = [drafter.draft(anchor, len(tokens), 8, 10).walk()[0] for anchor in (77, 5, 200, 31)]
        if name == "transformed":
            ref = DFlashReference(path, ReferenceModel(muse_target))
            for anchor, walk in zip((77, 5, 200, 31), walks[name]):
                assert walk == ref.walk(ref.inject(features), anchor, 7)[0]
    assert walks["transformed"] != walks["raw"]


def test_dflash2_switches_attribute_its_extensions(qwen3_target, tmp_path):
    drafter_path = write_tiny_dflash(tmp_path / "drafter.gguf", dflash2={})
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    tokens = list(range(10, 40))
    drafts = {}
    for switch in (None, "selector", "conv"):
        drafter = target.attach_drafter(drafter_path, **({switch: False} if switch else {}))
        drafter.inject(target.spec_forward(tokens, hidden_layers=list(drafter.target_layers)).hidden, 0)
        drafts[switch] = drafter.draft(77, len(tokens), 6, 10)
    assert drafts["selector"].pairs is None  # each row's argmax, DFlash's readout
    assert drafts[None].pairs is not None and drafts["conv"].pairs is not None
    assert not np.array_equal(drafts[None].values, drafts["conv"].values)


def test_the_cli_switches_reach_the_attached_drafter(qwen3_target, tmp_path):
    """GGSPEC_DFLASH_CONV/SELECTOR/FUSED=0 (read by SpecOptions.from_environment) attach
    the drafter with that extension off; a plan with other switches re-attaches it."""
    drafter_path = str(write_tiny_dflash(tmp_path / "drafter.gguf", dflash2={}))
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    env = {"GGSPEC_SPEC_DRAFT_MODEL": drafter_path, "GGSPEC_DFLASH_CONV": "0", "GGSPEC_DFLASH_SELECTOR": "0",
           "GGSPEC_DFLASH_FUSED": "0"}
    plan_speculation(target, SpecOptions.from_environment(env))
    assert target.block_drafter.switches == {"conv": False, "selector": False, "fused": False}
    plan_speculation(target, SpecOptions(draft_model=drafter_path))
    assert target.block_drafter.switches == {"conv": True, "selector": True, "fused": True}


@pytest.mark.parametrize("variant", ["plain", "sliding-window", "dflash2", "dflash2-reduced-vocab", "dspark"])
def test_one_graph_passes_equal_the_per_op_path(qwen3_target, tmp_path, variant):
    """fused=False (GGSPEC_DFLASH_FUSED=0) dispatches every node of passes A+B and C as a
    graph of its own; the one-graph passes must give the same bits."""
    drafter_path = write_tiny_dflash(tmp_path / "drafter.gguf", **VARIANTS[variant])
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    tokens = list(range(10, 50))
    features = target.spec_forward(tokens, hidden_layers=[0, 1]).hidden
    drafts = {}
    for fused in (True, False):
        drafter = target.attach_drafter(drafter_path, fused=fused)
        drafter.inject(features[:30], 0)
        first = drafter.draft(77, 30, 8, 10)
        drafter.inject(features[30:], 30)
        drafts[fused] = (first, drafter.draft(91, 40, 5, 10))
    for one_graph, per_op in zip(drafts[True], drafts[False]):
        for field in ("values", "ids", "pairs"):
            a, b = getattr(one_graph, field), getattr(per_op, field)
            assert (a is None) == (b is None)
            if a is not None:
                assert np.array_equal(a.view(np.uint32) if a.dtype == np.float32 else a,
                                      b.view(np.uint32) if b.dtype == np.float32 else b), field


def test_the_block_is_dropped_and_rows_inject_where_committed(qwen3_target, tmp_path):
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    drafter = target.attach_drafter(write_tiny_dflash(tmp_path / "drafter.gguf"))
    tokens = list(range(10, 40))
    features = target.spec_forward(tokens, hidden_layers=list(drafter.target_layers)).hidden
    drafter.inject(features[:20], 0)
    drafter.inject(features[20:], 20)
    first = drafter.draft(77, 30, 6, 10)
    assert target._core.drafter_seq_len == 30  # the block's own K/V are not context
    again = drafter.draft(77, 30, 6, 10)
    drafter.inject(features, 0)  # the same rows in one pass
    whole = drafter.draft(77, 30, 6, 10)
    for field in ("values", "ids"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
        np.testing.assert_array_equal(getattr(first, field), getattr(whole, field))


def test_rows_injected_after_a_gap_mask_the_positions_before_them(qwen3_target, tmp_path):
    """Rows 18..29 alone (a reused prefix's rows, or those a parked drafter dropped, are
    never injected): the drafts are the reference's with those positions alone in context."""
    drafter_path = write_tiny_dflash(tmp_path / "drafter.gguf")
    target = ggspec.load(qwen3_target, n_ctx=256, n_threads=2)
    drafter = target.attach_drafter(drafter_path)
    features = target.spec_forward(list(range(10, 40)), hidden_layers=list(drafter.target_layers)).hidden
    drafter.inject(features[18:], 18)
    draft = drafter.draft(77, 30, 6, 10)
    ref = DFlashReference(drafter_path, ReferenceModel(qwen3_target))
    logits = ref.draft(ref.inject(features[18:], 18), 77, 5)
    np.testing.assert_allclose(draft.values, np.sort(logits, axis=1)[:, ::-1][:, :10], rtol=0, atol=0.02)
    assert draft.walk()[0] == logits.argmax(1).tolist()
    assert np.abs(logits - ref.draft(ref.inject(features), 77, 5)).max() > 0.1  # the masking mattered


class RecordingDrafter:
    """A block drafter that keeps every inject's positions: (first, end)."""

    def __init__(self, drafter):
        self._drafter, self.injected = drafter, []

    def __getattr__(self, name):
        return getattr(self._drafter, name)

    def inject(self, features, start):
        self.injected.append((start, start + len(features)))
        self._drafter.inject(features, start)


def test_a_parked_drafter_injects_the_prompt_and_its_last_rows_only(targets):
    """Parked for 40 steps after a 40-token prompt, the drafter's first proposal injects
    the prompt's rows and its last 32 (the 8 before them masked), not all 80; never
    parked, the prompt's; each later one what the last verify kept. The output is plain
    decoding's either way."""
    target = targets["qwen3"]
    prompt = list(range(20, 60))
    plain, _ = decode(target, GREEDY, prompt, 64)
    for drafting, first in ((set(range(40, 100)), [(0, 40), (48, 80)]), (set(range(100)), [(0, 40)])):
        drafter = RecordingDrafter(target.block_drafter)
        spec = BlockDraftSpeculator(drafter, 4, 0.0)
        target.reset()
        execution = SpeculativeExecution(target, Sampler(GREEDY, target.n_vocab), spec,
                                         governor=ParkingGovernor(drafting=drafting))
        assert [t for step in execution.generate(prompt, 64) for t in step] == plain
        assert drafter.injected[:len(first)] == first and spec.parked_catch_up == 32
        assert all(end - start <= 5 for start, end in drafter.injected[len(first):])
        assert execution.stats.draft_n > 0


def test_a_drafter_never_let_draft_keeps_the_prompt_and_its_last_rows():
    """What stays queued while the governor parks from the first step on without a
    begin(): the prompt's commits, then about the last parked_catch_up rows."""
    spec = BlockDraftSpeculator(SimpleNamespace(max_draft=4, target_layers=(0,)), parked_catch_up=4)
    spec.commit([1] * 6, np.zeros((6, 2)), 0)
    spec.commit([1] * 3, np.zeros((3, 2)), 6)  # a prompt in two chunks
    for position in range(9, 20):
        spec.idle()
        spec.commit([1], np.zeros((1, 2)), position)
    assert [(first, len(rows)) for first, rows in spec._queued] == [(0, 6), (6, 3), (16, 1), (17, 1), (18, 1),
                                                                    (19, 1)]


@pytest.fixture(scope="module")
def targets(tmp_path_factory, qwen3_target):
    root = tmp_path_factory.mktemp("dflash-targets")
    qwen35 = write_tiny_qwen35(root / "qwen35.gguf", dtype="q8_0")
    muse = write_tiny_model(root / "muse.gguf", "muse-glimmer", dtype="q8_0")
    out = {}
    for name, path, drafter in (("qwen3", qwen3_target, dict(target_layers=(0, 1))),
                                ("muse-glimmer", muse, dict(target_layers=(1, 3))),
                                ("muse-glimmer-dflash2", muse, dict(target_layers=(0, 4), dflash2=dict(
                                    logit_scale=0.9, final_logit_softcapping=0.0))),
                                ("qwen35", qwen35, dict(target_layers=(1, 3))),
                                ("qwen35-dflash2", qwen35, dict(target_layers=(0, 2), dflash2={})),
                                ("qwen35-dspark", qwen35, dict(target_layers=(1, 3), dspark={})),
                                ("qwen3-dspark-bonus-anchor", qwen3_target,
                                 dict(target_layers=(0, 1), dspark=dict(sample_from_anchor=False)))):
        target = ggspec.load(path, n_ctx=512, n_threads=2)
        target.attach_drafter(write_tiny_dflash(root / f"{name}-drafter.gguf", **drafter))
        out[name] = target
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=st.sampled_from(["qwen3", "qwen35", "qwen35-dflash2", "qwen35-dspark", "qwen3-dspark-bonus-anchor",
                             "muse-glimmer", "muse-glimmer-dflash2"]),
       window=st.integers(1, 8), sampled=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_speculative_output_is_plain_output(targets, arch, window, sampled, seed):
    target = targets[arch]
    config = SamplerConfig(temperature=0.8, top_p=0.95, top_k=40, min_p=0.0, seed=seed) if sampled else GREEDY
    prompt = np.random.default_rng(seed).integers(3, target.n_vocab, size=12).tolist()
    plain, _ = decode(target, config, prompt, 32)
    spec, stats = decode(target, config, prompt, 32, BlockDraftSpeculator(target.block_drafter, window, 0.0))
    assert spec == plain
    assert stats.draft_n > 0


@pytest.mark.parametrize("arch", ["qwen3", "qwen35-dspark"])
def test_a_reused_prefix_keeps_the_output_and_drafting(targets, arch):
    target = targets[arch]
    prompt = list(range(20, 44))
    plain, _ = decode(target, GREEDY, prompt, 24)
    target.reset()
    target.spec_forward(prompt[:16])  # a prefix the drafter never saw
    execution = SpeculativeExecution(target, Sampler(GREEDY, target.n_vocab),
                                     BlockDraftSpeculator(target.block_drafter, 4, 0.0))
    spec = [t for step in execution.generate(prompt, 24, reused=16) for t in step]
    assert spec == plain
    assert execution.stats.draft_n > 0


def test_auto_picks_an_attached_drafter_over_the_files_head(targets):
    target = targets["qwen35"]
    assert target.draft_head is not None and target.drafter is target.block_drafter
    assert registry.resolve("auto", target) == "block"
    speculator, reason = registry.create("draft-head", target, SpeculatorOptions())
    assert reason is None and speculator.name == "draft-head"  # the file's head stays reachable by name


@pytest.mark.parametrize("change,words", [
    (dict(n_embd=32, head_dim=16), "wide"),
    (dict(target_layers=(0, 5)), "taps target layer 5"),
    (dict(n_vocab=300), "vocabulary"),
    (dict(mask_token=None), "mask token"),
    (dict(mask_token=400), "mask token 400"),
])
def test_bad_bindings_fail_clearly(qwen3_target, tmp_path, change, words):
    target = ggspec.load(qwen3_target, n_ctx=128)
    with pytest.raises(ggspec.ModelFormatError, match=words):
        target.attach_drafter(write_tiny_dflash(tmp_path / "drafter.gguf", **change))
    assert target.block_drafter is None


@pytest.mark.parametrize("change,words", [
    (dict(drop=("markov_w1.weight",)), "a DSpark key, but no Markov head"),
    (dict(drop=("markov_w1.weight",), dspark=None), None),  # a plain DFlash file
    (dict(drop=("markov_w2.weight",)), "has markov_w1.weight but no markov_w2.weight"),
    (dict(drop=("conf_proj.weight", "conf_proj.bias")), "says it has a confidence head"),
    (dict(dspark=dict(w1_rows=300)), "Markov codes for 300 tokens"),
    (dict(dspark=dict(w2_rows=300)), "biases 300 tokens"),
    (dict(dspark=dict(w2_rows=320), reduced_vocab=96), "biases 320 tokens .* its LM head ranks 96"),
])
def test_a_dspark_file_missing_a_piece_is_refused_by_name(qwen3_target, tmp_path, change, words):
    options = {"dspark": {}, **change}
    path = write_tiny_dflash(tmp_path / "drafter.gguf", **{k: v for k, v in options.items() if v is not None})
    target = ggspec.load(qwen3_target, n_ctx=128)
    if words is None:
        assert not target.attach_drafter(path).dspark
        return
    with pytest.raises(ggspec.ModelFormatError, match=words):
        target.attach_drafter(path)
    assert target.block_drafter is None


def test_a_model_that_is_not_a_drafter_is_refused(qwen3_target):
    target = ggspec.load(qwen3_target, n_ctx=128)
    with pytest.raises(ggspec.ModelFormatError, match="not a DFlash drafter"):
        target.attach_drafter(qwen3_target)


@pytest.mark.peer
@pytest.mark.parametrize("target,variant", [("qwen3_target", v) for v in ("plain", "sliding-window", "reduced-vocab",
                                                                          "dflash2", "dflash2-reduced-vocab")]
                         + MUSE_PAIRS)
def test_llama_cpp_runs_its_dflash_speculation_on_the_files(request, tmp_path, target, variant):
    target_path = request.getfixturevalue(target)
    drafter = write_tiny_dflash(tmp_path / "drafter.gguf", **VARIANTS[variant],
                                **(MUSE_LAYERS if target == "muse_target" else {}))
    cmd = [*speculative_cmd(target_path, "a b c d", "draft-dflash", n_predict=24, threads=1, ctx=256),
           "-md", str(drafter), "--spec-draft-n-max", "5"]
    assert run_for_stats(cmd)["draft_n"] > 0


def test_the_cli_attaches_a_drafter(qwen3_target, tmp_path):
    import json

    from tests.test_cli import ggspec as run_cli

    drafter = str(write_tiny_dflash(tmp_path / "drafter.gguf"))
    common = ["generate", "-m", str(qwen3_target), "-p", "a b c", "--temp", "0", "-n", "24", "-t", "2", "-c", "256",
              "--ignore-eos", "--json"]
    plain = run_cli(*common, "--no-spec")
    # the governor off: on a tiny model its measured step costs may say drafting never pays
    spec = run_cli(*common, "--draft-model", drafter, "--spec-governor", "off", "--spec-pmin", "0")
    assert plain.returncode == 0 and spec.returncode == 0, plain.stderr + spec.stderr
    plain, spec = json.loads(plain.stdout), json.loads(spec.stdout)
    assert spec["tokens"] == plain["tokens"]
    assert spec["stats"]["spec_type"] == "block" and spec["stats"]["draft_n"] > 0


@pytest.mark.parametrize("tensor,shape", [("fc.scale", (1,)), ("blk.0.attn_output.scale", (1,)),
                                          ("rope_freqs.weight", (16,)), ("blk.1.attn_sinks.weight", (4,))])
def test_pieces_not_run_yet_are_refused_by_name(qwen3_target, tmp_path, tensor, shape):
    from gguf import GGUFReader

    from tests.fixtures.tiny_models import write_gguf

    source = GGUFReader(write_tiny_dflash(tmp_path / "base.gguf"))
    meta = {f.name: (f.contents(), f.types[0]) for f in source.fields.values()
            if not f.name.startswith("GGUF.") and f.name != "general.architecture"}
    tensors = {t.name: np.array(t.data).reshape(list(reversed(t.shape.tolist()))) for t in source.tensors}
    tensors[tensor] = np.ones(shape, np.float32)
    path = write_gguf(tmp_path / "extra.gguf", "dflash", meta, tensors, "f32")
    target = ggspec.load(qwen3_target, n_ctx=128)
    with pytest.raises(ggspec.ModelFormatError, match=tensor.replace(".", r"\.")):
        target.attach_drafter(path)


def test_block_size_defaults_to_16_and_sets_the_window(qwen3_target, tmp_path):
    target = ggspec.load(qwen3_target, n_ctx=128)
    drafter = target.attach_drafter(write_tiny_dflash(tmp_path / "drafter.gguf", block_size=None))
    assert drafter.block_size == 16
    speculator = BlockDraftSpeculator(drafter)
    assert speculator.max_draft_tokens == 15 and speculator.min_draft_prob == 0.35
    assert BlockDraftSpeculator(drafter, max_draft_tokens=40).max_draft_tokens == 15  # capped by the block


class FixedDrafter:
    """A drafter whose walk gives fixed tokens with fixed per-position probabilities (and,
    as a DSpark drafter's confidence head would, fixed confidences)."""

    block_size, target_layers, lattice, first_draft_row, max_draft = 8, (0,), False, 1, 7

    def __init__(self, probabilities, confidence=None):
        self.probabilities, self.confidence = probabilities, confidence

    def draft(self, anchor, position, n_block, top_k):
        drafter = self

        class Walk:
            confidence = None if drafter.confidence is None else drafter.confidence[:n_block - 1]

            def walk(inner):
                return list(range(10, 10 + n_block - 1)), drafter.probabilities[:n_block - 1]
        return Walk()


def test_the_confidence_gate_is_on_the_cumulative_prefix_probability():
    from ggspec.speculators.base import DraftContext

    speculator = BlockDraftSpeculator(FixedDrafter([0.9, 0.8, 0.6, 0.99, 0.99, 0.99, 0.99]), 7)
    out = []
    # 0.9, 0.72, then 0.432 >= 0.35, then 0.428 >= 0.35, 0.423, 0.419, 0.415: all seven stand
    assert speculator.propose(DraftContext([1, 2], 1, 7), out) == 7
    speculator = BlockDraftSpeculator(FixedDrafter([0.9, 0.8, 0.4, 0.99, 0.99, 0.99, 0.99]), 7)
    out = []
    # 0.9, 0.72, 0.288 < 0.35: the third and everything after it go, though each later one is confident
    assert speculator.propose(DraftContext([1, 2], 1, 7), out) == 2 and out == [10, 11]
    # a confidence head decides instead, row by row: the first row below the gate ends the draft
    speculator = BlockDraftSpeculator(FixedDrafter([0.1] * 7, confidence=[0.9, 0.5, 0.4, 0.2, 0.9, 0.9, 0.9]), 7)
    out = []
    assert speculator.propose(DraftContext([1, 2], 1, 7), out) == 3 and out == [10, 11, 12]


@pytest.mark.peer
@pytest.mark.parametrize("target,variant", [("qwen3_target", v) for v in (
    "plain", "sliding-window", "reduced-vocab", "dflash2", "dflash2-reduced-vocab", "dspark", "dspark-bonus-anchor",
    "dspark-reduced-vocab")] + MUSE_PAIRS)
def test_dflash_draft_tokens_are_llama_cpps(request, tmp_path, target, variant):
    """The same blocks as llama.cpp's draft-dflash (draft-dspark for a DSpark file), on the
    same files and greedy input: a full block of n_max drafts each step, no gate, governor
    off. A DFlash2 lattice walk's picks are logged by the peer build's instrumentation
    (bench/peer/instrument.py), with their probabilities given the chosen predecessor."""
    from bench.peer.peer import peer_tokenize
    from tests.fixtures.peer_drafts import drafts_against_llama_cpp, recording

    target_path = request.getfixturevalue(target)
    drafter = write_tiny_dflash(tmp_path / "drafter.gguf", **VARIANTS[variant],
                                **(MUSE_LAYERS if target == "muse_target" else {}))
    text, n, n_max = "a b c d e", 40, 4
    model = ggspec.Model(str(target_path), n_ctx=256, n_threads=1)
    ids = model.encode_prompt(text)
    assert ids == peer_tokenize(str(target_path), text, add_special=True, parse_special=True)
    mode = "draft-dspark" if variant.startswith("dspark") else "draft-dflash"
    cmd = [*speculative_cmd(target_path, text, mode, n_predict=n, threads=1, ctx=256),
           "-md", str(drafter), "--spec-draft-n-max", str(n_max), "--spec-draft-p-min", "0", "-v"]
    target = model.target
    speculator = recording(BlockDraftSpeculator)(target.attach_drafter(drafter), n_max, 0.0)
    compared = drafts_against_llama_cpp(cmd, target, speculator, ids, n, full=n_max)
    print(f"{variant}: DFlash drafts compared with llama.cpp: {compared}")
    assert compared >= 24, compared
