"""The qwen35 hybrid target: its graphs against the NumPy reference, and rollback of
a recurrent trunk on all three paths.

Rolling back a GatedDeltaNet layer cannot trim its state the way a KV cache is
trimmed: on the default path a verify keeps the state after every row and the kept
row's is copied on the device ("snapshots"); "snapshots-host" copies the same through
the host; "reforward" restores the pre-verify state and re-forwards the kept rows.
Each must leave the state, the KV and every later logit bit-identical to plain
one-row decoding of the kept tokens.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggspec
from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.sampling import Sampler, SamplerConfig
from ggspec.environment import target_options_from
from ggspec.speculators.draft_head import DraftHeadSpeculator
from ggspec.speculators.ngram import NGramSpeculator
from bench.synthetic_acceptance import SyntheticAcceptance
from tests.fixtures.scripted import GarbageSpeculator
from tests.fixtures.tiny_qwen35 import MOE, write_tiny_qwen35
from tests.reference.numpy_qwen35 import Qwen35Reference
from tests.test_exactness import assert_bits_equal

PATHS = ("snapshots", "snapshots-host", "reforward")
GREEDY = SamplerConfig(temperature=0)
TOKENS = [1] + list(range(40, 70))


@pytest.mark.parametrize("dtype,options,bound", [
    ("f32", {}, 0.01), ("f16", dict(recurrent_layers=[True, False, True, False]), 0.05), ("q8_0", {}, 0.3),
    ("f32", MOE, 0.01), ("f32", MOE | dict(n_expert_used=1), 0.01), ("q8_0", MOE | dict(fused_gate_up=True), 0.3),
    ("q4_k", MOE | dict(n_expert_used=8), 0.5)])
def test_logits_match_the_numpy_reference(tmp_path, dtype, options, bound):
    # The reference's recurrence is plain float32 (ggml's products, not its GDN
    # summation order), hence bounds rather than bits; a wrong formula moves logits
    # whose spread is ~4 by whole units.
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", dtype=dtype, **options)
    ours = ggspec.load(path, n_ctx=128, n_threads=2).spec_forward(TOKENS, all_logits=True).logits
    ref, _ = Qwen35Reference(path).forward(TOKENS)
    assert np.abs(ours - ref).max() < bound
    assert (ours.argmax(-1) == ref.argmax(-1)).all()


def test_state_after_a_forward_matches_the_reference(tmp_path):
    path = write_tiny_qwen35(tmp_path / "tiny.gguf")
    target = ggspec.load(path, n_ctx=128, n_threads=2)
    target.spec_forward(TOKENS)
    _, ref = Qwen35Reference(path).forward(TOKENS)
    ours = iter(target._core.read_recurrent_state())
    for states in ref["states"]:
        if states is None:
            continue
        conv, ssm = np.asarray(next(ours), np.float32), np.asarray(next(ours), np.float32)
        np.testing.assert_allclose(conv.reshape(states[-1].conv.shape), states[-1].conv, rtol=0, atol=1e-5)
        # ggml keeps each head's S[k index][v index] transposed
        np.testing.assert_allclose(ssm, states[-1].ssm.transpose(0, 2, 1).ravel(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
def test_rewind_reaches_only_rows_of_the_last_verify(tmp_path, path):
    target = ggspec.load(write_tiny_qwen35(tmp_path / "tiny.gguf"), n_ctx=128, recurrent_rollback=path)
    target.spec_forward(TOKENS[:10])
    target.snapshot_recurrent()
    target.spec_forward(TOKENS[10:15], all_logits=True)
    with pytest.raises(ValueError, match="recurrent state"):
        target.rewind(5)  # before the verify: no snapshot reaches it
    assert target.cache_seq_len == 15  # nothing changed
    if target.verify_persists_accepted_kv:
        target.rewind(12)
    else:
        target.restore_recurrent()
        target.rewind(10)
    target.rewind(target.cache_seq_len)  # where it is: always possible


def test_default_path_moves_no_state_through_the_host(tmp_path):
    path = write_tiny_qwen35(tmp_path / "tiny.gguf")
    moved = {}
    for rollback in PATHS:
        target = ggspec.load(path, n_ctx=128, recurrent_rollback=rollback)
        target.spec_forward(TOKENS[:10])
        target.snapshot_recurrent()
        target.spec_forward(TOKENS[10:15], all_logits=True)
        if target.verify_persists_accepted_kv:
            target.rewind(12)
        else:
            target.restore_recurrent()
            target.rewind(10)
        moved[rollback] = target.state_transfer_bytes
        assert target.verify_persists_accepted_kv == (rollback != "reforward")
    assert moved["snapshots"] == 0
    assert moved["snapshots-host"] > 0 and moved["reforward"] > 0


@pytest.mark.parametrize("env,path", [({}, "snapshots"), ({"GGSPEC_Q35_VERIFY_SNAPSHOTS": "0"}, "reforward"),
                                      ({"GGSPEC_Q35_VERIFY_DEFER_STATE": "0"}, "snapshots-host")])
def test_environment_switches_select_the_old_paths(tmp_path, env, path):
    """The CLI reads the switches (ggspec.environment); the library never does."""
    target = ggspec.load(write_tiny_qwen35(tmp_path / "tiny.gguf"), n_ctx=64, **target_options_from(env))
    target.spec_forward(TOKENS[:4])
    target.snapshot_recurrent()
    target.spec_forward(TOKENS[4:8], all_logits=True)
    roll_back(target, TOKENS[4:8], 2, 4)
    assert target.verify_persists_accepted_kv == (path != "reforward")
    assert (target.state_transfer_bytes > 0) == (path != "snapshots")


def roll_back(target, rows, kept, position):
    """What the runtime does (runtime.SpeculativeExecution._roll_back)."""
    if target.verify_persists_accepted_kv:
        target.rewind(position + kept)
        return None
    target.restore_recurrent()
    target.rewind(position)
    return target.spec_forward(rows[:kept], all_logits=True)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    path = write_tiny_qwen35(tmp_path_factory.mktemp("q35") / "tiny.gguf", dtype="q8_0")
    return {p: ggspec.load(path, n_ctx=256, n_threads=2, recurrent_rollback=p) for p in PATHS}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), seed=st.integers(0, 2**32 - 1),
       steps=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=12))
def test_random_accept_reject_patterns_leave_plain_decoding_state(targets, path, seed, steps):
    """steps: (drafts verified, of which accepted). Kept rows' logits, the final
    recurrent state and a probe row after it all equal plain one-row decoding's bits."""
    target = targets[path]
    rng = np.random.default_rng(seed)
    truth = rng.integers(3, target.n_vocab, size=8 + sum(a for _, a in steps) + len(steps) + 1).tolist()
    prompt = truth[:8]

    target.reset()
    target.spec_forward(prompt)
    kept_logits = []
    position = len(prompt)
    for n_drafts, n_accepted in steps:
        n_accepted = min(n_accepted, n_drafts)
        kept = n_accepted + 1
        rows = truth[position:position + kept] + rng.integers(3, target.n_vocab, size=n_drafts - n_accepted).tolist()
        target.snapshot_recurrent()
        out = target.spec_forward(rows, all_logits=True)
        kept_logits.append(out.logits[:kept])
        if kept < len(rows):
            roll_back(target, rows, kept, position)
        position += kept
    state = target._core.read_recurrent_state()
    probe = target.spec_forward(truth[position:position + 1]).logits

    target.reset()
    target.spec_forward(prompt)
    plain = [target.spec_forward([tok]).logits for tok in truth[len(prompt):position]]
    assert_bits_equal(np.concatenate(kept_logits), np.concatenate(plain), "kept verify rows")
    for ours, theirs in zip(state, target._core.read_recurrent_state()):
        assert_bits_equal(np.asarray(ours, np.float32), np.asarray(theirs, np.float32), "recurrent state")
    assert_bits_equal(probe, target.spec_forward(truth[position:position + 1]).logits, "probe after the run")


# ---- the MTP / NextN draft head ------------------------------------------------------


@pytest.mark.parametrize("options", [{}, MOE])
def test_draft_head_matches_the_numpy_reference(tmp_path, options):
    """A catch-up over the prompt folded with the first step, then a chained step that
    reads the head's own output row: outputs and top logits agree with the reference."""
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", **options)
    ref = Qwen35Reference(path)
    _, hidden = ref.forward(TOKENS)
    before = np.concatenate([np.zeros((1, hidden["final"].shape[1]), np.float32), hidden["final"][:-1]])
    head = ggspec.load(path, n_ctx=128).draft_head
    values, ids, row = head.draft_catch_up_and_step(TOKENS, before, 0, 10)
    ref_logits, ref_rows = ref.mtp_forward(TOKENS, before)
    np.testing.assert_allclose(row, ref_rows[-1], rtol=0, atol=5e-3)
    np.testing.assert_allclose(values, np.sort(ref_logits[-1])[::-1][:10], rtol=0, atol=5e-3)
    assert ids[0] == ref_logits[-1].argmax()

    # chained: the draft at position T reads the head's own output row
    values, ids, row = head.draft_step(int(ids[0]), row, len(TOKENS), 10)
    ref_logits, ref_rows = ref.mtp_forward([*TOKENS, int(ref_logits[-1].argmax())], np.vstack([before, ref_rows[-1:]]))
    np.testing.assert_allclose(row, ref_rows[-1], rtol=0, atol=5e-3)
    assert ids[0] == ref_logits[-1].argmax()


@pytest.mark.parametrize("options", [{}, MOE])
def test_draft_head_rows_are_batch_invariant(tmp_path, options):
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", **options)
    target = ggspec.load(path, n_ctx=128)
    hidden = target.spec_forward(TOKENS, hidden_layers=["final"]).hidden
    before = np.vstack([np.zeros((1, target.n_embd), np.float32), hidden[:-1]])
    head = target.draft_head
    batched = head.draft_catch_up_and_step(TOKENS, before, 0, 10)
    for position, token in enumerate(TOKENS):
        one = head.draft_step(token, before[position], position, 10)
    for a, b, what in zip(batched, one, ("top logits", "top ids", "output row")):
        assert_bits_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32), what)


def test_draft_head_refuses_rows_past_its_positions(tmp_path):
    head = ggspec.load(write_tiny_qwen35(tmp_path / "tiny.gguf"), n_ctx=128).draft_head
    with pytest.raises(ValueError, match="rows must continue them"):
        head.draft_step(5, np.zeros(64, np.float32), 3, 10)


def test_draft_head_skip_masks_the_positions_between(tmp_path):
    """Rows 0..9, a skip over 10..19, then rows 20..: those read positions 0..9 and
    themselves only, as the reference with positions 10..19 masked."""
    path = write_tiny_qwen35(tmp_path / "tiny.gguf")
    ref = Qwen35Reference(path)
    _, hidden = ref.forward(TOKENS)
    before = np.concatenate([np.zeros((1, hidden["final"].shape[1]), np.float32), hidden["final"][:-1]])
    head = ggspec.load(path, n_ctx=128).draft_head
    head.draft_catch_up(TOKENS[:10], before[:10], 0)
    head.draft_step(7, before[10], 10, 10)  # a chained draft's row: the skip forgets it
    head.skip(10, 20)
    values, ids, row = head.draft_catch_up_and_step(TOKENS[20:], before[20:], 20, 10)
    ref_logits, ref_rows = ref.mtp_forward(TOKENS, before, unseen=range(10, 20))
    np.testing.assert_allclose(row, ref_rows[-1], rtol=0, atol=5e-3)
    np.testing.assert_allclose(values, np.sort(ref_logits[-1])[::-1][:10], rtol=0, atol=5e-3)
    assert ids[0] == ref_logits[-1].argmax()
    assert np.abs(row - ref.mtp_forward(TOKENS, before)[1][-1]).max() > 1e-2  # the masking mattered
    with pytest.raises(ValueError, match="skip from 40 to 50: it holds 31 positions"):
        head.skip(40, 50)


class ParkingGovernor(SpeculationCostGovernor):
    """Drafts on the steps `drafting` names and parks on the others."""

    def __init__(self, drafting):
        super().__init__()
        self.drafting, self.step = drafting, -1

    def should_draft(self):
        self.step += 1
        return self.step in self.drafting

    @property
    def parked(self):
        return self.step not in self.drafting

    def observe(self, *args, **kwargs):
        pass


def test_a_parked_head_catches_up_on_its_last_rows_only(head_targets):
    """Parked for 30 steps after a 40-token prompt, the head catches up 16 rows at the
    probe, not 70, and the output is still plain decoding's; so does a first proposal
    right after the prompt."""
    target = head_targets["snapshots"]
    prompt = list(range(3, 43))
    plain, _ = decode(target, GREEDY, prompt, 48)
    spec = RecordingHead(target.draft_head, 3, 0.0)
    target.reset()
    execution = SpeculativeExecution(target, Sampler(GREEDY, target.n_vocab), spec,
                                     governor=ParkingGovernor(drafting=set(range(30, 100))))
    assert [t for step in execution.generate(prompt, 48) for t in step] == plain
    assert spec.proposals[0][0] == spec.parked_catch_up
    assert all(caught_up <= 4 for caught_up, _ in spec.proposals[1:])
    # never parked, the first proposal catches up on the prompt's last rows as well, and
    # each later one on what the last verify kept
    unparked = RecordingHead(target.draft_head, 3, 0.0)
    target.reset()
    execution = SpeculativeExecution(target, Sampler(GREEDY, target.n_vocab), unparked,
                                     governor=ParkingGovernor(drafting=set(range(100))))
    assert [t for step in execution.generate(prompt, 48) for t in step] == plain
    assert unparked.proposals[0][0] == unparked.parked_catch_up
    assert all(caught_up <= 4 for caught_up, _ in unparked.proposals[1:])


def test_a_file_without_a_head_has_none(tmp_path):
    target = ggspec.load(write_tiny_qwen35(tmp_path / "tiny.gguf", n_nextn=0), n_ctx=128)
    assert target.draft_head is None and target.n_layer == 4


class RecordingHead(DraftHeadSpeculator):
    """Keeps every proposal, to compare the folded and unfolded heads' drafts."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.proposals = []

    def propose(self, ctx, out):
        caught_up = len(self._tokens)  # rows the proposal catches up before its first step
        n = super().propose(ctx, out)
        self.proposals.append((caught_up, list(out[:n])))
        return n


def decode(target, config, prompt, n, speculator=None):
    target.reset()
    execution = SpeculativeExecution(target, Sampler(config, target.n_vocab), speculator)
    tokens = [t for step in execution.generate(prompt, n) for t in step]
    return tokens, execution.stats


@pytest.fixture(scope="module")
def head_targets(tmp_path_factory):
    """By rollback path, and ("moe", path) for a qwen35moe file."""
    root = tmp_path_factory.mktemp("q35h")
    path = write_tiny_qwen35(root / "tiny.gguf", dtype="q8_0")
    moe = write_tiny_qwen35(root / "tiny-moe.gguf", dtype="q8_0", **MOE)
    return ({p: ggspec.load(path, n_ctx=512, n_threads=2, recurrent_rollback=p) for p in PATHS}
            | {("moe", p): ggspec.load(moe, n_ctx=512, n_threads=2, recurrent_rollback=p) for p in PATHS})


def test_folded_and_unfolded_heads_draft_the_same(head_targets):
    """A random head's drafts are never the trunk's tokens, so the verify keeps them
    by synthetic acceptance (the benchmarks' switch): the folded head then saves one
    graph on every proposal that catches up accepted drafts."""
    target = head_targets["snapshots"]
    prompt = [1, 5, 6, 7, 8, 9, 5, 6, 7]
    runs = {}
    for fold in (True, False):
        calls = target.draft_head.graph_calls
        spec = RecordingHead(target.draft_head, 3, 0.0, fold)
        target.reset()
        execution = SyntheticAcceptance(target, Sampler(GREEDY, target.n_vocab), spec, rate=0.6, seed=1)
        tokens = [t for step in execution.generate(prompt, 48) for t in step]
        runs[fold] = (tokens, spec.proposals, target.draft_head.graph_calls - calls, execution.stats)
    assert runs[True][:2] == runs[False][:2]
    assert runs[True][3].draft_n_accepted > 10
    catch_ups = sum(1 for caught_up, _ in runs[True][1] if caught_up)
    assert catch_ups > 5 and runs[False][2] - runs[True][2] == catch_ups


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), moe=st.booleans(), kind=st.sampled_from(["draft-head", "ngram"]),
       fold=st.booleans(), window=st.integers(1, 6), sampled=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_speculative_output_is_plain_output(head_targets, path, moe, kind, fold, window, sampled, seed):
    target = head_targets[("moe", path) if moe else path]
    config = SamplerConfig(temperature=0.8, top_p=0.95, top_k=40, min_p=0.0, seed=seed) if sampled else GREEDY
    rng = np.random.default_rng(seed)
    prompt = rng.integers(3, target.n_vocab, size=int(rng.integers(1, 30))).tolist()
    prompt += prompt[: len(prompt) // 2]
    plain, _ = decode(target, config, prompt, 40)
    speculator = (DraftHeadSpeculator(target.draft_head, window, 0.0, fold) if kind == "draft-head"
                  else NGramSpeculator(max_draft_tokens=window))
    spec, stats = decode(target, config, prompt, 40, speculator)
    assert spec == plain
    if path == "snapshots":  # the default path: no re-forward, no state through the host
        assert stats.reforwards == 0 and stats.state_transfer_bytes == 0


def test_the_snapshot_budget_bounds_a_verify_and_the_draft_window(tmp_path):
    # three GDN layers of 4 heads x 16 x 16 float states: 12 KiB a row
    path = write_tiny_qwen35(tmp_path / "tiny.gguf", dtype="q8_0")
    target = ggspec.load(path, n_ctx=256, n_threads=2, recurrent_snapshot_mb=3 * 12 / 1024)
    assert target.max_verify_rows == 3
    assert ggspec.load(path, n_ctx=256).max_verify_rows == 65
    target.spec_forward(TOKENS[:8])
    target.spec_forward(TOKENS[8:12], all_logits=True)  # 4 rows: more than a verify keeps
    with pytest.raises(ValueError, match="recurrent state"):
        target.rewind(10)
    prompt = [1, 5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    plain, _ = decode(target, GREEDY, prompt, 32)
    spec, stats = decode(target, GREEDY, prompt, 32, GarbageSpeculator(target.n_vocab, 16, seed=3))
    assert spec == plain
    assert stats.draft_n > 0 and len(stats.proposed_at) <= 2  # drafts capped at max_verify_rows - 1


@pytest.mark.peer
@pytest.mark.parametrize("options", [{}, MOE])
def test_nextn_head_draft_tokens_are_llama_cpps(tmp_path, options):
    """The same drafts as llama.cpp's draft-mtp from the file's own head, on the same file
    and greedy input: a fixed window of 3, no gate, governor off. The tiny head's drafts
    rarely land, so both engines draft from (almost) every position."""
    from bench.peer.commands import speculative_cmd
    from bench.peer.peer import peer_tokenize
    from tests.fixtures.peer_drafts import drafts_against_llama_cpp, recording

    path, text, n, n_max = str(write_tiny_qwen35(tmp_path / "q35.gguf", **options)), "a b c d e", 40, 3
    model = ggspec.Model(path, n_ctx=256, n_threads=1)
    ids = model.encode_prompt(text)
    assert ids == peer_tokenize(path, text, add_special=True, parse_special=True)
    cmd = [*speculative_cmd(path, text, "draft-mtp", n_predict=n, threads=1, ctx=256),
           "--spec-draft-n-max", str(n_max), "--spec-draft-p-min", "0", "-v"]
    target = model.target
    speculator = recording(DraftHeadSpeculator)(target.draft_head, max_draft_tokens=n_max,
                                                min_draft_prob=0.0)
    compared = drafts_against_llama_cpp(cmd, target, speculator, ids, n, full=n_max)
    print(f"NextN drafts compared with llama.cpp: {compared}")
    assert compared >= 24, compared
