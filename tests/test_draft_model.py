"""A standalone draft model (--spec-type draft): the output is plain decoding's on
every target architecture, with any architecture as the draft; vocabularies are
checked as llama.cpp checks them, and pairs that differ only in size are handled."""

import pytest

import ggspec
from ggspec.engine.planner import check_draft_model
from ggspec.errors import ModelFormatError
from ggspec.speculators.base import CHAIN_ROWS_WITHOUT_TOP_K, DraftContext
from ggspec.speculators.draft_model import DraftModelSpeculator
from ggspec.speculators.options import SpecOptions
from ggspec.text.vocab import load_vocab
from ggspec.text.vocab_match import vocabulary_mismatch
from tests.test_cli import assert_clear_failure, ggspec as run_cli

GREEDY = dict(temperature=0)
SEEDED = dict(temperature=0.8, top_p=0.95, seed=11)


def draft(path, **options) -> SpecOptions:
    return SpecOptions(draft_model=path, governor=False, **options)


def run(engine, prompt, spec, sampling, n=24):
    return engine.submit(prompt, max_tokens=n, ignore_eos=True, spec=spec, **sampling).result


PROMPT = [5, 9, 17, 33, 5, 9, 17, 40, 61, 7, 5, 9]


def assert_drafting_keeps_plain_output(engine, spec, spec_type: str) -> None:
    """Greedy and seeded, with and without a reused prefix: the drafted output is plain
    decoding's, and the drafter drafted."""
    for sampling in (GREEDY, SEEDED):
        plain = run(engine, PROMPT, False, sampling)
        drafted = run(engine, PROMPT, spec, sampling)
        assert drafted.tokens == plain.tokens
        assert drafted.stats["spec_type"] == spec_type and drafted.stats["draft_n"] > 0
        turn = PROMPT + plain.tokens + [3, 4]  # the target reuses the prefix from its cache
        again = run(engine, turn, spec, sampling)
        assert again.tokens == run(engine, turn, False, sampling).tokens
        assert again.stats["reused_prompt_tokens"] > 0 and again.stats["draft_n"] > 0


# --- the invariant, on every target architecture ------------------------------------

@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen35"])
@pytest.mark.parametrize("draft_arch", ["same", "llama", "qwen35"])
def test_draft_model_output_is_plain_output(tiny_model, arch, draft_arch):
    target = tiny_model(arch, "q8_0")
    # the same weights at f32 draft well (most drafts land, some do not); another
    # architecture's random weights draft badly: both must leave the output alone
    drafter = tiny_model(arch if draft_arch == "same" else draft_arch, "f32")
    model = ggspec.Model(target, n_ctx=256, n_threads=2)
    with ggspec.Engine(model) as engine:
        for sampling in (GREEDY, SEEDED):
            plain = run(engine, PROMPT, False, sampling)
            spec = run(engine, PROMPT, draft(drafter), sampling)
            assert spec.tokens == plain.tokens
            assert spec.stats["spec_type"] == "draft"
            assert spec.stats["draft_n"] > 0
            # a second turn: the target reuses the prefix from its cache, the draft what it holds
            turn = PROMPT + plain.tokens + [3, 4]
            assert run(engine, turn, draft(drafter), sampling).tokens == run(engine, turn, False, sampling).tokens
    if draft_arch == "same":
        assert spec.stats["draft_n_accepted"] > spec.stats["draft_n"] // 2


def test_a_draft_of_the_same_file_lands_every_draft(tiny_model):
    path = tiny_model("llama", "q8_0")
    with ggspec.Engine(ggspec.Model(path, n_ctx=256, n_threads=2)) as engine:
        out = run(engine, PROMPT, draft(path, pmin=0.0), GREEDY, n=40)
    assert out.stats["draft_n"] > 20 and out.stats["draft_n_accepted"] == out.stats["draft_n"]


def test_slots_draft_on_their_own_sequences(tiny_model):
    path, drafter = tiny_model("gemma3", "q8_0"), tiny_model("gemma3", "f32")
    prompts = [PROMPT, PROMPT[::-1] * 2, [7, 7, 8, 9] * 5]
    with ggspec.Engine(ggspec.Model(path, n_ctx=256, n_threads=2)) as solo:
        alone = [run(solo, p, draft(drafter), SEEDED) for p in prompts]
    with ggspec.Engine(ggspec.Model(path, n_ctx=256, n_threads=2), slots=3) as engine:
        streams = [engine.submit(p, max_tokens=24, ignore_eos=True, spec=draft(drafter), **SEEDED) for p in prompts]
        got = [s.result for s in streams]
    assert [g.tokens for g in got] == [a.tokens for a in alone]
    keys = ("spec_type", "draft_n", "draft_n_accepted", "verify_steps")
    assert [[g.stats[k] for k in keys] for g in got] == [[a.stats[k] for k in keys] for a in alone]


def test_auto_picks_a_draft_model_attached_once_per_file_and_threads(tiny_model):
    path, drafter = tiny_model("llama", "q8_0"), tiny_model("llama", "f32")
    with ggspec.Engine(ggspec.Model(path, n_ctx=256, n_threads=2)) as engine:
        out = run(engine, PROMPT, SpecOptions(draft_model=drafter), GREEDY)
        assert out.stats["spec_type"] == "draft"
        assert out.tokens == run(engine, PROMPT, False, GREEDY).tokens
        model = engine.model
    attached = model.target.draft_model
    assert attached.path == drafter and attached.n_threads == 2
    with ggspec.Engine(model) as engine:
        run(engine, PROMPT, SpecOptions(draft_model=drafter, draft_threads=1), GREEDY)
        assert model.target.draft_model.n_threads == 1  # other threads: attached again
        attached = model.target._draft_model
        run(engine, PROMPT, SpecOptions(draft_model=drafter, draft_threads=1), GREEDY)
        assert model.target._draft_model is attached
        with pytest.warns(UserWarning, match="more than the"):  # more threads than CPUs: capped, once
            run(engine, PROMPT, SpecOptions(draft_model=drafter, draft_threads=4096), GREEDY)
        attached = model.target._draft_model
        run(engine, PROMPT, SpecOptions(draft_model=drafter, draft_threads=4096), GREEDY)
        assert model.target._draft_model is attached


# --- the speculator's own rules ------------------------------------------------------

def test_drafts_follow_the_draft_models_argmax_and_stop_at_the_gate(tiny_model):
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=128, n_threads=2, mmap=False)
    sequence = target.attach_draft_model(tiny_model("llama", "f32"))
    assert target._draft_model.target.mmap is False  # copied like the target's
    reference = ggspec.load(tiny_model("llama", "f32"), n_ctx=128, n_threads=2)
    history = list(PROMPT)
    spec = DraftModelSpeculator(sequence, target.n_vocab, max_draft_tokens=6, min_draft_prob=0.0)
    spec.begin(history)
    out: list[int] = []
    spec.propose(DraftContext(history, len(history) - 1, 6), out)
    expected, context = [], list(history)
    for _ in range(4):  # the window starts at 4
        token = int(reference.spec_forward(context, top_k=1).ids[-1][0])
        reference.reset()
        expected.append(token)
        context.append(token)
    assert out == expected
    assert sequence.held == history + expected[:-1]  # the last draft is never forwarded
    strict = DraftModelSpeculator(sequence, target.n_vocab, max_draft_tokens=6, min_draft_prob=1.0)
    assert strict.propose(DraftContext(history, len(history) - 1, 6), []) == 0


def ungated(tiny_model, draft_arch: str) -> DraftModelSpeculator:
    """A speculator over a draft of draft_arch attached to a fresh tiny llama target."""
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=128, n_threads=2)
    return DraftModelSpeculator(target.attach_draft_model(tiny_model(draft_arch, "f32")), target.n_vocab,
                                max_draft_tokens=8, min_draft_prob=0.0)


def test_the_draft_keeps_what_landed_and_rewinds_the_rest(tiny_model):
    spec = ungated(tiny_model, "llama")
    sequence, n_vocab = spec.draft, spec.target_vocab
    history = list(PROMPT)
    drafts: list[int] = []
    spec.propose(DraftContext(history, len(history) - 1, 8), drafts)
    history += drafts[:2] + [(drafts[2] + 1) % n_vocab]  # two landed, the third was corrected
    spec.commit(history[len(PROMPT) - 1:], None, len(PROMPT) - 1)
    spec.propose(DraftContext(history, len(history) - 1, 8), [])
    assert sequence.held[:len(history)] == history
    assert spec.window.size == 3  # accepted + 1


def test_qwen35_as_a_draft_rolls_back_to_where_drafting_began(tiny_model):
    spec = ungated(tiny_model, "qwen35")
    history = list(PROMPT)
    drafts: list[int] = []
    spec.propose(DraftContext(history, len(history) - 1, 8), drafts)
    history += drafts[:1] + [(drafts[1] + 1) % spec.target_vocab]
    again: list[int] = []
    spec.propose(DraftContext(history, len(history) - 1, 8), again)
    fresh = ungated(tiny_model, "qwen35")
    expected: list[int] = []
    fresh.window.size = spec.window.size
    fresh.propose(DraftContext(history, len(history) - 1, 8), expected)
    assert again == expected  # the state after the rollback is a fresh run's


def test_a_sliding_window_draft_starts_again_where_its_ring_cannot_rewind(tiny_model):
    # gemma3's ring keeps its recent positions only: a short unrelated history after a
    # long one cannot rewind into it, so the draft's sequence starts again from empty
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=1024, n_threads=2)
    spec = DraftModelSpeculator(target.attach_draft_model(tiny_model("gemma3", "f32")), target.n_vocab,
                                max_draft_tokens=4, min_draft_prob=0.0)
    long = [5 + (i * 7) % 300 for i in range(700)]
    spec.propose(DraftContext(long, len(long) - 1, 4), [])
    short: list[int] = []
    spec.reset()
    spec.propose(DraftContext(PROMPT, len(PROMPT) - 1, 4), short)
    fresh = DraftModelSpeculator(ggspec.load(tiny_model("llama", "q8_0"), n_ctx=1024, n_threads=2)
                                 .attach_draft_model(tiny_model("gemma3", "f32")), target.n_vocab,
                                 max_draft_tokens=4, min_draft_prob=0.0)
    expected: list[int] = []
    fresh.propose(DraftContext(PROMPT, len(PROMPT) - 1, 4), expected)
    assert short == expected and spec.draft.held == PROMPT + expected[:-1]


def test_a_recurrent_drafts_roll_back_point_belongs_to_its_sequence(tiny_model):
    # two speculators on one draft sequence (a reused plan after another request): the
    # second's mark replaces the first's, and the first then starts again, never restores it
    first = ungated(tiny_model, "qwen35")
    second = DraftModelSpeculator(first.draft.for_sequence(0), first.target_vocab, max_draft_tokens=8,
                                  min_draft_prob=0.0)
    history = list(PROMPT)
    drafts: list[int] = []
    first.propose(DraftContext(history, len(history) - 1, 8), drafts)
    second.propose(DraftContext([9, 8, 7, 6], 3, 8), [])
    history += drafts[:1] + [(drafts[1] + 1) % first.target_vocab]
    again: list[int] = []
    first.propose(DraftContext(history, len(history) - 1, 8), again)
    fresh = ungated(tiny_model, "qwen35")
    fresh.window.size = first.window.size
    expected: list[int] = []
    fresh.propose(DraftContext(history, len(history) - 1, 8), expected)
    assert again == expected


def test_sizing_the_sequences_again_keeps_what_the_draft_holds(tiny_model):
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=128, n_threads=2)
    sequence = target.attach_draft_model(tiny_model("llama", "f32"))
    DraftModelSpeculator(sequence, target.n_vocab).begin(PROMPT)
    held = list(sequence.held)
    target.set_sequences(1)  # what an engine does when it wakes: the same count
    assert sequence.held == held and held
    target.set_sequences(2)
    assert sequence.held == [] and target.draft_model.for_sequence(1).held == []
    assert target.memory["draft_model_bytes"] > 0
    two_f16 = target.memory["draft_model_bytes"]
    wide = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=128, n_threads=2, kv_type="f32")
    wide.attach_draft_model(tiny_model("llama", "f32"))
    assert wide.memory["draft_model_bytes"] == two_f16  # one sequence at f32: the target's KV type


# --- vocabularies --------------------------------------------------------------------

def test_vocabularies_are_checked_as_llama_cpp_checks_them(tiny_model):
    base = load_vocab(tiny_model("llama", "q8_0"))
    assert vocabulary_mismatch(base, load_vocab(tiny_model("gemma3", "f32"))) is None
    assert vocabulary_mismatch(base, load_vocab(tiny_model("llama", "f32", n_vocab=400))) is None  # padding
    too_big = load_vocab(tiny_model("llama", "f32", n_vocab=320 + 129))
    assert "449 tokens and the target 320, more than 128 apart" in vocabulary_mismatch(base, too_big)
    other_bos = load_vocab(tiny_model("llama", "f32", metadata=(("tokenizer.ggml.bos_token_id", 3),)))
    assert "its BOS token is id 3, the target's is id 1" in vocabulary_mismatch(base, other_bos)
    no_bos = load_vocab(tiny_model("llama", "f32", metadata=(("tokenizer.ggml.add_bos_token", False),)))
    assert "does not add a BOS token" in vocabulary_mismatch(base, no_bos)
    renamed = load_vocab(tiny_model("llama", "f32"))
    renamed.tokens = list(renamed.tokens)
    renamed.tokens[300] = "other"
    assert "token 300 is 'other' in it" in vocabulary_mismatch(base, renamed)
    renamed.tokens[300], renamed.tokens[2] = base.tokens[300], "</eos>"  # ids below 5 are not compared
    assert vocabulary_mismatch(base, renamed) is None


def test_a_draft_of_another_vocabulary_is_refused_by_name(tiny_model):
    path = tiny_model("llama", "q8_0")
    other = tiny_model("llama", "f32", metadata=(("tokenizer.ggml.bos_token_id", 3),))
    with ggspec.Engine(ggspec.Model(path, n_ctx=128, n_threads=2)) as engine:
        with pytest.raises(ModelFormatError, match="cannot draft for .*its BOS token is id 3"):
            run(engine, PROMPT, draft(other), GREEDY)
        assert run(engine, PROMPT, False, GREEDY).tokens  # the engine goes on
    assert_clear_failure(run_cli("generate", "-m", path, "-p", "x", "-n", "2", "--draft-model", other),
                         "vocabulary is not the target's")


def test_vocabularies_of_different_sizes_draft_only_shared_ids(tiny_model):
    # the draft knows 80 more tokens: drafts of those end the draft, never reach the verify
    target = ggspec.load(tiny_model("llama", "q8_0"), n_ctx=128, n_threads=2)
    big = target.attach_draft_model(tiny_model("llama", "f32", n_vocab=400))
    spec = DraftModelSpeculator(big, target.n_vocab, max_draft_tokens=8, min_draft_prob=0.0)
    for start in range(3, 60):
        out: list[int] = []
        history = [start, start + 1, start + 2]
        spec.reset()
        spec.propose(DraftContext(history, 2, 8), out)
        assert all(t < target.n_vocab for t in out)
    # the target knows 80 more: after one of them in the history the draft drafts nothing
    target = ggspec.load(tiny_model("llama", "f32", n_vocab=400), n_ctx=128, n_threads=2)
    small = target.attach_draft_model(tiny_model("llama", "q8_0"))
    spec = DraftModelSpeculator(small, target.n_vocab, max_draft_tokens=8, min_draft_prob=0.0)
    history = [5, 6, 7]
    assert spec.propose(DraftContext(history, 2, 8), []) > 0
    history += [350, 8]
    assert spec.propose(DraftContext(history, 4, 8), []) == 0
    history += [9, 10]
    assert spec.propose(DraftContext(history, 6, 8), []) == 0
    spec.reset()
    assert spec.propose(DraftContext([5, 6, 7], 2, 8), []) > 0


def test_what_a_drafter_file_is(tiny_model, tmp_path):
    from tests.fixtures.tiny_dflash import write_tiny_dflash

    assert check_draft_model(tiny_model("qwen35", "f32")) == "draft"
    assert check_draft_model(str(write_tiny_dflash(tmp_path / "d.gguf"))) == "block"
    odd = tiny_model("llama", "f32", metadata=(("general.architecture", "bert"),))
    with pytest.raises(ValueError, match="'bert' is not a drafter ggspec can attach"):
        check_draft_model(odd)


def test_threads_draft_flag(tiny_model):
    path = tiny_model("llama", "q8_0")
    proc = run_cli("generate", "-m", path, "-p", "x", "-n", "4", "--draft-model", tiny_model("llama", "f32"),
                   "--threads-draft", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert_clear_failure(run_cli("generate", "-m", path, "-p", "x", "--threads-draft", "0"), "--threads-draft")
    with pytest.raises(ValueError, match="draft threads must be a positive integer"):
        SpecOptions(draft_threads=0)


# --- parity with llama.cpp's draft-simple ---------------------------------------------

# Attention-only pairs: on a recurrent target llama.cpp re-verifies a partly accepted
# draft from a checkpoint instead of drafting again, so its proposals start elsewhere.
@pytest.mark.peer
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_draft_tokens_are_llama_cpps(tiny_model, arch):
    from bench.peer.commands import speculative_cmd
    from bench.peer.peer import peer_tokenize
    from tests.fixtures.peer_drafts import drafts_against_llama_cpp, recording

    # a draft of other (random) weights: most drafts miss, so both engines draft from
    # (almost) every position and the two schedules meet at the same positions
    path, drafter, text, n = tiny_model(arch, "f32"), tiny_model(arch, "f32", seed=3), "a b c d e", 40
    model = ggspec.Model(path, n_ctx=256, n_threads=1)
    ids = model.encode_prompt(text)
    assert ids == peer_tokenize(path, text, add_special=True, parse_special=True)
    # llama.cpp with a fixed window (n_max 3) and no gate (p_min 0); ggspec the same, governor off
    cmd = [*speculative_cmd(path, text, "draft-simple", n_predict=n, threads=1, ctx=256, draft_model=drafter),
           "--spec-draft-n-max", "3", "--spec-draft-p-min", "0", "-v"]
    target = model.target
    speculator = recording(DraftModelSpeculator)(target.attach_draft_model(drafter), target.n_vocab,
                                                 max_draft_tokens=3, min_draft_prob=0.0, window=3)
    compared = drafts_against_llama_cpp(cmd, target, speculator, ids, n, full=3)
    assert compared >= 24, compared


# --- rejection mode: drafts drawn from q, q reported ------------------------------------

def test_rejection_mode_draws_from_q_and_follows_the_target_distribution(tiny_model):
    """Chi-square over many one-draft steps: the first emitted token follows the target's
    row; the acceptance rate is sum(min(p, q)) for q the chain over the draft's row (at
    temperature 4 two random models' rows overlap, about 0.19 over the draft's best 64,
    where drafting the draft's argmax would land about 3%)."""
    import dataclasses

    import numpy as np

    from ggspec.engine.execution import SpeculativeExecution
    from ggspec.engine.sampling import DraftSampler, Sampler, SamplerConfig

    target = ggspec.load(tiny_model("llama", "f32"), n_ctx=64, n_threads=2)
    other = tiny_model("llama", "f32", seed=3)  # other weights: q is not p
    prompt, config = [5, 17, 42, 99, 7], SamplerConfig(temperature=4.0, top_k=0, top_p=1.0, min_p=0.0)
    sampler = Sampler(config, target.n_vocab)
    ids, weights = sampler.distribution(target.spec_forward(prompt + [11]).logits[0], None)
    p = dict(zip(ids.tolist(), (weights / weights.sum()).tolist()))
    # the chain keeps every id: the draft's row reports its best 64, and q is the chain over them
    reference = ggspec.load(other, n_ctx=64, n_threads=2).spec_forward(prompt + [11], top_k=CHAIN_ROWS_WITHOUT_TOP_K)
    q_ids, q_probs = DraftSampler(sampler, target.n_vocab).distribution(reference.logits[0], reference.ids[0])
    expected_acceptance = sum(min(p[t], qt) for t, qt in zip(q_ids.tolist(), q_probs.tolist()))
    assert 0.1 < expected_acceptance < 0.7
    speculator = DraftModelSpeculator(target.attach_draft_model(other), target.n_vocab, max_draft_tokens=1,
                                      min_draft_prob=0.0, window=1)
    trials, first, accepted = 3000, [], 0
    target.reset()
    target.spec_forward(prompt)
    for t in range(trials):
        execution = SpeculativeExecution(target, Sampler(dataclasses.replace(config, seed=t), target.n_vocab),
                                         speculator, accept="rejection")
        first.append(execution.step(prompt + [11], budget=2)[0])
        accepted += execution.stats.draft_n_accepted
        assert execution.stats.draft_n == 1
        target.rewind(len(prompt))
    top = list(ids[:5].tolist())  # the target's five likeliest tokens, and the rest as one bin
    observed = np.array([first.count(t) for t in top] + [sum(t not in top for t in first)])
    want = trials * np.array([p[t] for t in top] + [1.0 - sum(p[t] for t in top)])
    chi2 = float((((observed - want) ** 2) / want).sum())
    assert chi2 < 20.5, (chi2, observed, want)  # df = 5: p-value 0.001
    assert abs(accepted / trials - expected_acceptance) < 0.04, (accepted / trials, expected_acceptance)


def test_a_step_reads_only_what_it_drafted_not_the_whole_history(tiny_model):
    from tests.test_ngram import CountingHistory

    spec = ungated(tiny_model, "llama")
    history = CountingHistory([5 + (i * 7) % 300 for i in range(90)])
    spec.begin(history)
    for _ in range(6):
        history.reads = 0
        drafts: list[int] = []
        spec.propose(DraftContext(history, len(history) - 1, 8), drafts)
        assert history.reads <= len(drafts) + 4, history.reads  # the drafts compared, the pending token
        history.tokens += drafts[:1] + [3]  # one landed, then the target's own token
