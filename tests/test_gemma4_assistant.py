"""The Gemma 4 assistant (llama.cpp's gemma4-assistant, through the draft-head speculator):
its drafts against the NumPy reference, speculation on and off giving the same output,
the files bound to another target refused by name, and llama.cpp drafting the same
tokens from the same pair."""

import numpy as np
import pytest

import ggspec
from ggspec.engine.planner import check_draft_model
from ggspec.errors import ModelFormatError
from ggspec.speculators.draft_head import DraftHeadSpeculator
from ggspec.speculators.options import SpecOptions
from tests.fixtures.tiny_gemma4 import write_tiny_gemma4, write_tiny_gemma4_assistant
from tests.reference.numpy_gemma4 import Gemma4AssistantReference, Gemma4Reference
from tests.test_draft_model import GREEDY, PROMPT, assert_drafting_keeps_plain_output, run
from tests.test_exactness import assert_bits_equal


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gemma4-pair")
    return str(write_tiny_gemma4(root / "target.gguf")), str(write_tiny_gemma4_assistant(root / "assistant.gguf"))


@pytest.mark.parametrize("n_prefix", [12, 41])  # within the sliding window of 8, and well past it
def test_drafts_match_the_numpy_reference(pair, n_prefix):
    target_path, assistant_path = pair
    target = ggspec.load(target_path, n_ctx=128, n_threads=2)
    head = target.attach_draft_head(assistant_path)
    assert head.trunk_taps == ("final",) and head.trunk_row_width == 64
    tokens = [1] + np.random.default_rng(n_prefix).integers(3, 320, n_prefix).tolist()
    p = len(tokens) - 1  # the pending token's position: the target holds the rows before it
    final = target.spec_forward(tokens[:-1], hidden_layers=["final"]).hidden
    values, ids, row = head.draft_catch_up_and_step(tokens[-3:], np.zeros((3, 64), np.float32) + final[-1], p - 2,
                                                    320)
    ours = [(values, ids)]
    for i in range(3):
        values, ids, row = head.draft_step(int(ids[0]), row, p + 1 + i, 320)
        ours.append((values, ids))

    reference = Gemma4AssistantReference(assistant_path, Gemma4Reference(target_path, kv_type="f16"))
    drafts, steps = reference.draft(tokens, 4)
    assert [int(ids[0]) for _, ids in ours] == drafts
    for (values, ids), logits in zip(ours, steps):
        order = np.argsort(-logits, kind="stable")
        np.testing.assert_array_equal(ids, order)
        assert_bits_equal(values, logits[order], "assistant logits")


def test_a_head_over_the_targets_cache_drafts_from_its_next_position(pair):
    target_path, assistant_path = pair
    target = ggspec.load(target_path, n_ctx=128, n_threads=2)
    head = target.attach_draft_head(assistant_path)
    target.spec_forward([1, 5, 6, 7])
    with pytest.raises(ValueError, match="from the target's next position 4, not from a token at 3"):
        head.draft_catch_up_and_step([7], np.zeros((1, 64), np.float32), 3, 4)
    assert head.draft_catch_up_and_step([8], np.zeros((1, 64), np.float32), 4, 4)[1].shape == (4,)


@pytest.mark.parametrize("dtype", ["q8_0", "f32"])
def test_assistant_output_is_plain_output(tmp_path, dtype):
    """Greedy and seeded, with and without a reused prefix. A random assistant drafts
    badly: rollbacks nearly every step, and the output must not move."""
    target = write_tiny_gemma4(tmp_path / "target.gguf", dtype=dtype)
    assistant = str(write_tiny_gemma4_assistant(tmp_path / "assistant.gguf", dtype=dtype))
    assert check_draft_model(assistant) == "draft-head"
    model = ggspec.Model(target, n_ctx=256, n_threads=2)
    spec = SpecOptions(draft_model=assistant, governor=False, pmin=0.0)
    with ggspec.Engine(model) as engine:
        assert_drafting_keeps_plain_output(engine, spec, "draft-head")
    assert model.target.draft_head.path == assistant


def test_cli_generates_with_the_assistant_and_the_governor_on(pair):
    """The user's command line: --spec-draft-model, the governor on (planning measures the
    assistant's pass over the target's cache)."""
    import json

    from tests.test_cli import ggspec as run_cli

    path, assistant = pair
    plain = run_cli("generate", "-m", path, "-p", "x y z", "-n", "12", "--temp", "0", "--no-spec", "--json")
    drafted = run_cli("generate", "-m", path, "-p", "x y z", "-n", "12", "--temp", "0", "--spec-draft-model", assistant,
                      "--json")
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    plain, drafted = json.loads(plain.stdout), json.loads(drafted.stdout)
    assert drafted["tokens"] == plain["tokens"] and drafted["stats"]["spec_type"] == "draft-head"


@pytest.mark.parametrize("fold_catch_up", [True, False])
def test_catch_ups_cost_nothing(pair, fold_catch_up):
    """There is nothing to catch up: unfolded catch-ups run no graph, folded ones draft
    from the last row alone, and the output is plain decoding's either way."""
    from ggspec.engine.sampling import SamplerConfig
    from tests.test_runtime import decode

    target_path, assistant_path = pair
    target = ggspec.load(target_path, n_ctx=128, n_threads=2)
    head = target.attach_draft_head(assistant_path)
    config = SamplerConfig(temperature=0)
    plain = decode(target, config, PROMPT, 24)
    speculator = DraftHeadSpeculator(head, max_draft_tokens=3, min_draft_prob=0.0, fold_catch_up=fold_catch_up)
    calls = head.graph_calls
    drafted = decode(target, config, PROMPT, 24, speculator)
    assert drafted[0] == plain[0] and np.array_equal(drafted[1], plain[1])
    assert head.graph_calls - calls == drafted[2].draft_n  # one graph per draft token, no catch-up graphs


def test_slots_draft_over_their_own_regions(pair):
    """Two sequences at once, each drafting over its own region of the target's cache:
    each slot's output is the same request's alone."""
    target_path, assistant_path = pair
    model = ggspec.Model(target_path, n_ctx=256, n_threads=2)
    spec = SpecOptions(draft_model=assistant_path, governor=False, pmin=0.0)
    prompts = [PROMPT, [7, 8, 9, 10, 7, 8]]
    with ggspec.Engine(model, slots=2) as engine:
        alone = [run(engine, p, False, GREEDY).tokens for p in prompts]
        jobs = [engine.submit(p, max_tokens=24, ignore_eos=True, spec=spec, **GREEDY) for p in prompts]
        assert [job.result.tokens for job in jobs] == alone


# --- files bound to another target, and broken files --------------------------------

REFUSED = {
    "another width": (dict(n_embd_backbone=96), "reads a target 96 wide"),
    "its own width": (dict(n_embd=64), "differ from the assistant's own width"),
    "other sliding heads": (dict(head_dim_swa=16), "sliding-window KV as 2 heads of 16"),
    "other global KV heads": (dict(n_head_kv_full=2), "global KV as 2 heads of 64"),
    "another window": (dict(sliding_window=16), "window of 16"),
    "another vocabulary": (dict(n_vocab=300), "vocabulary of 300 tokens"),
    "fewer drafting blocks": (dict(metadata={"gemma4-assistant.nextn_predict_layers": 1}), "nextn_predict_layers"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_file_that_does_not_fit_is_refused_by_name(pair, tmp_path, case):
    options, message = REFUSED[case]
    target = ggspec.load(pair[0], n_ctx=64, n_threads=1)
    with pytest.raises(ModelFormatError, match=message):
        target.attach_draft_head(write_tiny_gemma4_assistant(tmp_path / "assistant.gguf", **options))
    assert target.draft_head is None


def test_a_target_of_another_architecture_or_kind_pattern_is_refused(pair, tiny_model, tmp_path):
    llama = ggspec.load(tiny_model("llama", "f32"), n_ctx=64, n_threads=1)
    with pytest.raises(ModelFormatError, match="drafts over a gemma4 target's cache; the target is llama"):
        llama.attach_draft_head(pair[1])
    # a target whose last layer is a sliding-window one: the assistant's global block has no layer to read
    swa_last = ggspec.load(write_tiny_gemma4(tmp_path / "t.gguf", swa_layers=(True, True, False, True, False, True),
                                             shared_kv_layers=0), n_ctx=64, n_threads=1)
    with pytest.raises(ModelFormatError, match="block 0 .sliding-window. would read target layer 4, which is not"):
        swa_last.attach_draft_head(pair[1])


# --- parity with llama.cpp's draft-mtp ------------------------------------------------

@pytest.mark.peer
def test_assistant_draft_tokens_are_llama_cpps(pair):
    from bench.peer.commands import speculative_cmd
    from bench.peer.peer import peer_tokenize
    from tests.fixtures.peer_drafts import drafts_against_llama_cpp, recording

    (path, assistant), text, n, n_max = pair, "a b c d e", 40, 3
    model = ggspec.Model(path, n_ctx=256, n_threads=1)
    ids = model.encode_prompt(text)
    assert ids == peer_tokenize(path, text, add_special=True, parse_special=True)
    # llama.cpp with a fixed window (n_max 3) and no gate (p_min 0); ggspec the same, governor off
    cmd = [*speculative_cmd(path, text, "draft-mtp", n_predict=n, threads=1, ctx=256, draft_model=assistant),
           "--spec-draft-n-max", str(n_max), "--spec-draft-p-min", "0", "-v"]
    speculator = recording(DraftHeadSpeculator)(model.target.attach_draft_head(assistant), max_draft_tokens=n_max,
                                                min_draft_prob=0.0)
    compared = drafts_against_llama_cpp(cmd, model.target, speculator, ids, n, full=n_max)
    print(f"Gemma 4 assistant drafts compared with llama.cpp: {compared}")
    assert compared >= 24, compared
