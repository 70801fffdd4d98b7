"""EAGLE-3 drafters (llama.cpp's eagle3, through the draft-head speculator): the head
against its NumPy reference, speculation on and off giving the same output on every
target architecture, the files that must be refused by name, and llama.cpp drafting
the same tokens from the same files."""

import numpy as np
import pytest

import ggspec
from ggspec.engine.planner import check_draft_model
from ggspec.errors import ModelFormatError
from ggspec.speculators.draft_head import DraftHeadSpeculator
from ggspec.speculators.options import SpecOptions
from tests.fixtures.tiny_eagle3 import write_tiny_eagle3, write_tiny_eagle3_for
from tests.reference.numpy_eagle3 import Eagle3Reference
from tests.reference.numpy_model import ReferenceModel
from tests.test_draft_model import GREEDY, PROMPT, assert_drafting_keeps_plain_output, run

VARIANTS = {
    "plain": {},
    "taps-inside": dict(target_layers=(0, 1, 1)),
    "reduced-vocab": dict(reduced_vocab=96),
    "norms": dict(norm_before_fc=True, norm_before_residual=True),
    "own-embeddings-and-head": dict(own_embeddings=True, own_head=True),
    "narrower": dict(n_embd=48, own_embeddings=True, own_head=True),
}


def greedy_drafts(head, tokens, trunk_rows, n):
    """n chained greedy drafts after tokens[-1]: head rows for every token from position 0
    (the trunk's rows before each), then n - 1 chained steps. Returns the drafts and the
    first step's top-10 logits."""
    before = np.vstack([np.zeros((1, trunk_rows.shape[1]), np.float32), trunk_rows])
    values, ids, row = head.draft_catch_up_and_step(tokens, before, 0, 10)
    first, drafts = values, [int(ids[0])]
    for i in range(n - 1):
        values, ids, row = head.draft_step(drafts[-1], row, len(tokens) + i, 10)
        drafts.append(int(ids[0]))
    return drafts, first


@pytest.mark.parametrize("variant", VARIANTS)
def test_drafts_match_the_numpy_reference(tiny_model, tmp_path, variant):
    path = tiny_model("llama", "f32")
    target = ggspec.load(path, n_ctx=256, n_threads=2, kv_type="f32")  # the reference's trunk bit for bit
    head = target.attach_draft_head(write_tiny_eagle3_for(target, tmp_path / "eagle3.gguf", **VARIANTS[variant]))
    assert head.trunk_row_width == 3 * target.n_embd
    tokens = list(range(10, 40)) + [77]
    ref = Eagle3Reference(head.path, ReferenceModel(path))
    # the target's rows at the file's eagle3.target_layers, as the reference reads them (its
    # layer count: the output after the final norm), and the same rows from ggspec's taps
    _, hidden = ReferenceModel(path).forward(tokens[:-1])
    features = np.concatenate([hidden["final" if layer == target.n_layer else layer] for layer in ref.target_layers],
                              axis=1)
    taps = target.spec_forward(tokens[:-1], hidden_layers=list(head.trunk_taps)).hidden
    np.testing.assert_array_equal(taps, features)
    drafts, first = greedy_drafts(head, tokens, features, 6)

    ref_drafts, steps = ref.draft(tokens, features, 6)
    assert drafts == ref_drafts
    np.testing.assert_allclose(first, np.sort(steps[0])[::-1][:10], rtol=0, atol=0.02)


def test_a_reduced_head_drafts_only_its_tokens_and_ranks_no_more_rows_than_it_has(tiny_model, tmp_path):
    target = ggspec.load(tiny_model("llama", "f32"), n_ctx=256, n_threads=2)
    head = target.attach_draft_head(write_tiny_eagle3_for(target, tmp_path / "eagle3.gguf", reduced_vocab=24))
    d2t = Eagle3Reference(head.path, ReferenceModel(tiny_model("llama", "f32"))).d2t
    tokens = list(range(10, 30))
    before = np.vstack([np.zeros((1, head.trunk_row_width), np.float32),
                        target.spec_forward(tokens[:-1], hidden_layers=list(head.trunk_taps)).hidden])
    values, ids, _ = head.draft_catch_up_and_step(tokens, before, 0, 64)
    assert len(ids) == 24 and set(ids.tolist()) == set(d2t.tolist())
    assert np.all(np.diff(values) <= 0)


# --- the invariant, on every target architecture ------------------------------------

@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "phi3", "gemma3", "qwen35"])
def test_eagle3_output_is_plain_output(tiny_model, tmp_path, arch):
    """Greedy and seeded, with and without a reused prefix. The head of random weights
    drafts badly, so most drafts miss: rollbacks every step, and the output must not move."""
    model = ggspec.Model(tiny_model(arch, "q8_0"), n_ctx=256, n_threads=2)
    eagle3 = write_tiny_eagle3_for(model.target, tmp_path / "eagle3.gguf")
    spec = SpecOptions(draft_model=eagle3, governor=False, pmin=0.0)
    with ggspec.Engine(model) as engine:
        assert_drafting_keeps_plain_output(engine, spec, "draft-head")
    assert model.target.draft_head.path == eagle3


def test_an_eagle3_file_is_a_draft_head_that_auto_picks(tiny_model, tmp_path):
    model = ggspec.Model(tiny_model("qwen35", "f32"), n_ctx=256, n_threads=2)
    own = model.target.draft_head
    assert own is not None and own.trunk_taps == ("final",)
    eagle3 = write_tiny_eagle3_for(model.target, tmp_path / "eagle3.gguf")
    assert check_draft_model(eagle3) == "draft-head"
    with ggspec.Engine(model) as engine:
        out = run(engine, PROMPT, SpecOptions(draft_model=eagle3, governor=False), GREEDY)
    assert out.stats["spec_type"] == "draft-head"
    assert model.target.draft_head.path == eagle3 and model.target.draft_head.trunk_taps == (0, 2, "final")


def test_cli_generates_with_an_eagle3_drafter(tiny_model, tmp_path):
    from tests.test_cli import ggspec as run_cli

    path = tiny_model("llama", "q8_0")
    eagle3 = write_tiny_eagle3_for(ggspec.load(path, n_ctx=64, n_threads=1), tmp_path / "eagle3.gguf")
    plain = run_cli("generate", "-m", path, "-p", "x y z", "-n", "12", "--temp", "0", "--no-spec", "--json")
    drafted = run_cli("generate", "-m", path, "-p", "x y z", "-n", "12", "--temp", "0", "--draft-model", eagle3,
                      "--spec-governor", "off", "--spec-pmin", "0", "--json")
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    import json

    plain, drafted = json.loads(plain.stdout), json.loads(drafted.stdout)
    assert drafted["tokens"] == plain["tokens"]
    assert drafted["stats"]["spec_type"] == "draft-head" and drafted["stats"]["draft_n"] > 0


class RecordingHead:
    """Stands for a per-token head: records what the speculator asks of it."""

    trunk_taps, trunk_row_width = ("final",), 4

    def __init__(self):
        self.calls = []

    def skip(self, start, end):
        self.calls.append(("skip", start, end))

    def draft_catch_up_and_step(self, tokens, trunk_rows, start, top_k):
        self.calls.append(("rows", list(tokens), np.asarray(trunk_rows).tolist(), start))
        return np.array([5.0, 0.0]), np.array([9, 8]), np.zeros(4, np.float32)


def test_a_reused_prefix_is_skipped_with_the_row_after_it():
    """The head never saw the prefix's trunk rows: positions [0, reused) and the first new
    token's row (it reads the prefix's last row) are skipped; the rows after read the
    committed trunk rows before them, and the pending token the last one."""
    from ggspec.speculators.base import DraftContext

    head = RecordingHead()
    speculator = DraftHeadSpeculator(head, max_draft_tokens=1, min_draft_prob=0.0)
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    speculator.commit([21, 22, 23], rows, 10)  # prompt positions 10..12 after 10 reused
    history = list(range(10)) + [21, 22, 23, 24]
    assert speculator.propose(DraftContext(history, 13, 1), out := []) == 1 and out == [9]
    assert head.calls == [("skip", 0, 11), ("rows", [22, 23, 24], rows.tolist(), 11)]


# --- files bound to another target, and broken files --------------------------------

REFUSED = {
    "another width": (dict(target_hidden_size=96), "reads a target 96 wide"),
    "a layer the target lacks": (dict(target_layers=(0, 1, 5)), "taps target layer 5"),
    "two taps": (dict(target_layers=(0, 1)), "EAGLE-3 taps exactly 3 target layers"),
    "another vocabulary": (dict(n_vocab=300), "vocabulary of 300 tokens"),
    "two layers": (dict(n_layer=2), "EAGLE-3 has one decoder layer"),
    "a narrower head borrowing the target's": (dict(n_embd=48), "must ship its own token_embd and output"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_file_that_does_not_fit_is_refused_by_name(tiny_model, tmp_path, case):
    options, message = REFUSED[case]
    target = ggspec.load(tiny_model("qwen35", "f32"), n_ctx=64, n_threads=1)
    own = target.draft_head
    options = {"target_width": target.n_embd, "n_vocab": target.n_vocab, "target_layers": (0, 1, 2), **options}
    with pytest.raises(ModelFormatError, match=message):
        target.attach_draft_head(write_tiny_eagle3(tmp_path / "eagle3.gguf", **options))
    assert target.draft_head is own and target.draft_head.path == target.path  # it keeps its own head,
    rows = np.zeros((2, target.n_embd), np.float32)  # in the core too: rows as wide as a NextN head's
    assert len(own.draft_catch_up_and_step([5, 6], rows, 0, 4)[1]) == 4


def test_a_d2t_without_its_own_head_is_refused(tiny_model, tmp_path):
    target = ggspec.load(tiny_model("llama", "f32"), n_ctx=64, n_threads=1)
    bad = write_tiny_eagle3(tmp_path / "bad.gguf", target_width=target.n_embd, reduced_vocab=24,
                            drop=("output.weight",))
    with pytest.raises(ModelFormatError, match="has 'd2t' but no head of its own"):
        target.attach_draft_head(bad)
    with pytest.raises(ModelFormatError, match="is not a draft head ggspec attaches"):
        target.attach_draft_head(tiny_model("llama", "f32"))


# --- parity with llama.cpp's draft-eagle3 ---------------------------------------------

# Taps inside the trunk: llama.cpp reads a target's output after its final norm only on
# architectures that export it (its MTP ones), none of these; and its gemma3 graph
# exports no layer inputs, so it cannot run EAGLE-3 on one.
@pytest.mark.peer
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_eagle3_draft_tokens_are_llama_cpps(tiny_model, tmp_path, arch):
    from bench.peer.commands import speculative_cmd
    from bench.peer.peer import peer_tokenize
    from tests.fixtures.peer_drafts import drafts_against_llama_cpp, recording

    path, text, n, n_max = tiny_model(arch, "f32"), "a b c d e", 40, 3
    model = ggspec.Model(path, n_ctx=256, n_threads=1)
    target = model.target
    eagle3 = write_tiny_eagle3_for(target, tmp_path / "eagle3.gguf", target_layers=(0, 1, target.n_layer - 1))
    ids = model.encode_prompt(text)
    assert ids == peer_tokenize(path, text, add_special=True, parse_special=True)
    # llama.cpp with a fixed window (n_max 3) and no gate (p_min 0); ggspec the same, governor off
    cmd = [*speculative_cmd(path, text, "draft-eagle3", n_predict=n, threads=1, ctx=256, draft_model=eagle3),
           "--spec-draft-n-max", str(n_max), "--spec-draft-p-min", "0", "-v"]
    speculator = recording(DraftHeadSpeculator)(target.attach_draft_head(eagle3), max_draft_tokens=n_max,
                                                min_draft_prob=0.0)
    compared = drafts_against_llama_cpp(cmd, target, speculator, ids, n, full=n_max)
    print(f"EAGLE-3 drafts compared with llama.cpp: {compared}")
    assert compared >= 24, compared
