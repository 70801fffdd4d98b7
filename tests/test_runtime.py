"""SpeculativeExecution: exact stats on a scripted target, rollback paths, and the
invariant on real graphs — speculative output == plain output, whatever the drafter."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggspec
from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.sampling import Sampler, SamplerConfig
from ggspec.speculators.draft_head import DraftHeadSpeculator
from ggspec.speculators.draft_model import DraftModelSpeculator
from ggspec.speculators.ngram import NGramSpeculator
from tests.fixtures.scripted import GarbageSpeculator, NoisyOracleSpeculator, ScriptedSpeculator, ScriptedTarget
from tests.fixtures.tiny_models import ATTENTION_ARCHS, TARGET_ARCHS

TRUTH = [(7 * i + 3) % 32 for i in range(80)]
GREEDY = SamplerConfig(temperature=0)


def scripted_run(script, persists_kv=True, max_tokens=9):
    target = ScriptedTarget(TRUTH, persists_kv=persists_kv)
    spec = ScriptedSpeculator(script)
    execution = SpeculativeExecution(target, Sampler(GREEDY, 32), spec)
    steps = list(execution.generate(TRUTH[:5], max_tokens))
    return target, spec, execution, steps


T = TRUTH
WRONG = 31  # not in TRUTH[6..14]
SCRIPT = [[T[6], T[7], WRONG], [WRONG], [], [T[11], T[12]]]


def test_stats_count_what_happened():
    target, spec, execution, steps = scripted_run(SCRIPT)
    assert steps == [[T[5]], [T[6], T[7], T[8]], [T[9]], [T[10]], [T[11], T[12], T[13]]]
    s = execution.stats.as_dict()
    assert (s["draft_n"], s["draft_n_accepted"], s["verify_steps"], s["plain_steps"]) == (6, 4, 3, 1)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 4 / 3)
    assert s["acceptance_per_position"] == [2 / 3, 1.0, 0.0]
    assert (s["draft_n_per_position"], s["draft_n_accepted_per_position"]) == ([3, 2, 1], [2, 2, 0])
    assert s["acceptance_rate"] == pytest.approx(4 / 6)


def test_commits_carry_exactly_the_kept_tokens():
    target, spec, *_ = scripted_run(SCRIPT)
    assert spec.commits == [(T[:5], 0), ([T[5], T[6], T[7]], 5), ([T[8]], 8), ([T[9]], 9),
                            ([T[10], T[11], T[12]], 10)]
    assert [c.position for c in spec.contexts] == [5, 8, 9, 10]
    assert spec.contexts[0].history == T[:6]


def test_rollback_is_a_rewind_when_the_verify_kept_its_kv():
    target, *_ = scripted_run(SCRIPT)
    assert [e for e in target.log if e[0] == "rewind"] == [("rewind", 8), ("rewind", 9)]
    assert ("restore",) not in target.log
    assert target.cache_seq_len == 13  # everything but the pending token


def test_rollback_re_advances_a_trunk_that_does_not_keep_it():
    target, spec, execution, steps = scripted_run(SCRIPT, persists_kv=False)
    assert steps[1] == [T[6], T[7], T[8]]
    i = target.log.index(("forward", 5, 4))  # the first verify: [T5, T6, T7, WRONG]
    assert target.log[i - 1] == ("snapshot",)
    assert target.log[i + 1:i + 4] == [("restore",), ("rewind", 5), ("forward", 5, 3)]
    assert execution.stats.seconds["rollback"] > 0
    assert execution.stats.reforwards == 2  # both partly accepted verifies


def test_budget_and_context_bound_the_draft():
    _, spec, _, steps = scripted_run([[T[6], T[7], T[8], T[9], T[10]]], max_tokens=4)
    assert spec.contexts[0].max_draft == 2 and steps == [[T[5]], [T[6], T[7], T[8]]]
    target = ScriptedTarget(TRUTH, n_ctx=8)
    spec = ScriptedSpeculator([[T[6], T[7], T[8], T[9]]])
    steps = list(SpeculativeExecution(target, Sampler(GREEDY, 32), spec).generate(T[:5], 20))
    assert spec.contexts[0].max_draft == 2  # positions 5, 6, 7 fit; 8 does not
    assert sum(map(len, steps)) == 4 and target.cache_seq_len == 8


# ---- the invariant on real graphs ---------------------------------------------------


def decode(target, config, prompt, n, speculator=None):
    target.reset()
    execution = SpeculativeExecution(target, Sampler(config, target.n_vocab), speculator)
    tokens = [t for step in execution.generate(prompt, n) for t in step]
    # the KV the run leaves behind must be plain decoding's too: forward the pending token
    probe = target.spec_forward(tokens[-1:]).logits
    return tokens, probe, execution.stats


ROLLBACKS = ("snapshots", "snapshots-host", "reforward")  # a recurrent trunk's three rollback paths
RECURRENT_ARCHS = ("qwen35", "qwen35moe")  # TARGET_ARCHS with a recurrent trunk


@pytest.fixture(scope="module")
def tiny_targets(tiny_model, tmp_path_factory):
    from tests.fixtures.tiny_eagle3 import write_tiny_eagle3_for

    targets = {(arch, dtype, None): ggspec.load(tiny_model(arch, dtype), n_ctx=512, n_threads=2)
               for arch in ATTENTION_ARCHS for dtype in ("f32", "q8_0")}
    targets |= {(arch, dtype, rollback): ggspec.load(tiny_model(arch, dtype), n_ctx=512, n_threads=2,
                                                     recurrent_rollback=rollback)
                for arch in RECURRENT_ARCHS for dtype in ("f32", "q8_0") for rollback in ROLLBACKS}
    root = tmp_path_factory.mktemp("eagle3")
    for (arch, dtype, rollback), target in targets.items():
        # a draft model: the same weights at the other type (most drafts land, not all)
        target.attach_draft_model(tiny_model(arch, "q8_0" if dtype == "f32" else "f32"))
        # an EAGLE-3 head of random weights (most drafts miss), in place of a qwen35 file's own
        target.attach_draft_head(write_tiny_eagle3_for(target, root / f"{arch}-{dtype}-{rollback}.gguf"))
    return targets


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=st.sampled_from(TARGET_ARCHS), rollback=st.sampled_from(ROLLBACKS), dtype=st.sampled_from(["f32", "q8_0"]),
       kind=st.sampled_from(["garbage", "noisy-oracle", "ngram", "draft", "eagle3"]), window=st.integers(1, 12),
       sampled=st.booleans(), top_k=st.sampled_from([0, 40]), seed=st.integers(0, 2**32 - 1), error_rate=st.floats(0.0, 0.6))
def test_speculative_output_is_plain_output(tiny_targets, arch, rollback, dtype, kind, window, sampled, top_k, seed,
                                           error_rate):
    target = tiny_targets[(arch, dtype, rollback if arch in RECURRENT_ARCHS else None)]
    config = SamplerConfig(temperature=0.8, top_p=0.95, top_k=top_k, min_p=0.0, seed=seed) if sampled else GREEDY
    rng = np.random.default_rng(seed)
    prompt = rng.integers(3, target.n_vocab, size=int(rng.integers(1, 40))).tolist()
    prompt += prompt[: len(prompt) // 2]  # something for n-gram to find
    plain, plain_probe, _ = decode(target, config, prompt, 40)
    speculator = {
        "garbage": lambda: GarbageSpeculator(target.n_vocab, window, seed),
        "noisy-oracle": lambda: NoisyOracleSpeculator(prompt + plain, target.n_vocab, window, error_rate, seed),
        "ngram": lambda: NGramSpeculator(max_draft_tokens=window),
        "draft": lambda: DraftModelSpeculator(target.draft_model, target.n_vocab, max_draft_tokens=window,
                                              min_draft_prob=0.0),
        "eagle3": lambda: DraftHeadSpeculator(target.draft_head, max_draft_tokens=window, min_draft_prob=0.0),
    }[kind]()
    spec, spec_probe, stats = decode(target, config, prompt, 40, speculator)
    assert spec == plain
    assert np.array_equal(spec_probe, plain_probe)
    if kind == "noisy-oracle" and error_rate == 0.0:
        assert stats.draft_n_accepted == stats.draft_n  # a perfect drafter is never rejected
    if kind in ("draft", "eagle3"):
        assert stats.draft_n > 0  # ungated, it drafts every step


# ---- rejection mode ----------------------------------------------------------------


class FixedDistributionDrafter(ScriptedSpeculator):
    """Draws one draft from its own distribution q and reports q."""

    def __init__(self, ids, q, seed):
        super().__init__([])
        self.ids, self.q = np.asarray(ids), np.asarray(q)
        self.rng = np.random.default_rng(seed)

    def propose(self, ctx, out):
        out.append(int(self.rng.choice(self.ids, p=self.q)))
        return 1

    def draft_probabilities(self, index):
        return self.ids, self.q


def test_rejection_mode_samples_follow_the_target_distribution(tiny_model):
    """Chi-square over many one-draft steps: the first emitted token's frequencies
    match the target's own sampling distribution at that row, not the drafter's."""
    target = ggspec.load(tiny_model("llama", "f32"), n_ctx=64, n_threads=2)
    prompt = [5, 17, 42, 99, 7]
    config = SamplerConfig(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    target.reset()
    row = target.spec_forward(prompt + [11], top_k=6)
    ids, weights = Sampler(config, target.n_vocab).distribution(row.logits[0], row.ids[0])
    p = weights / weights.sum()
    q = np.roll(p, 2)  # a drafter that is confidently wrong about the order
    drafter = FixedDistributionDrafter(ids, q, seed=1)
    trials, counts = 4000, dict.fromkeys(ids.tolist(), 0)
    accepted = 0
    target.reset()
    target.spec_forward(prompt)
    for t in range(trials):
        sampler = Sampler(dataclasses.replace(config, seed=t), target.n_vocab)
        execution = SpeculativeExecution(target, sampler, drafter, accept="rejection")
        emitted = execution.step(prompt + [11], budget=2)
        counts[emitted[0]] += 1
        accepted += execution.stats.draft_n_accepted
        target.rewind(len(prompt))
    observed = np.array([counts[i] for i in ids.tolist()])
    chi2 = float((((observed - trials * p) ** 2) / (trials * p)).sum())
    assert chi2 < 20.5, (chi2, observed, trials * p)  # df = 5: p-value 0.001
    expected_acceptance = float(np.minimum(p, q).sum())
    assert abs(accepted / trials - expected_acceptance) < 0.04


@pytest.mark.parametrize("kind", ["draft-head", "eagle3", "gemma4-assistant", "block", "dspark",
                                  "dspark-bonus-anchor"])
def test_rejection_mode_with_a_learned_drafters_q(tiny_model, tmp_path, kind):
    """A NextN head, an EAGLE-3 head, a Gemma 4 assistant, a DFlash block and a DSpark
    block draw their drafts from q (the request's chain over their rows) and report it:
    the emitted token follows the target's row (chi-square), and drafts land at the rate
    sum(min(p, q)) for the q they report."""
    from ggspec.speculators.block import BlockDraftSpeculator
    from tests.fixtures.tiny_dflash import write_tiny_dflash

    if kind in ("draft-head", "eagle3", "gemma4-assistant"):
        arch = {"draft-head": "qwen35", "eagle3": "llama", "gemma4-assistant": "gemma4"}[kind]
        target = ggspec.load(tiny_model(arch, "f32"), n_ctx=64, n_threads=2)
        if kind == "eagle3":
            from tests.fixtures.tiny_eagle3 import write_tiny_eagle3_for

            target.attach_draft_head(write_tiny_eagle3_for(target, tmp_path / "eagle3.gguf"))
        elif kind == "gemma4-assistant":
            from tests.fixtures.tiny_gemma4 import write_tiny_gemma4_assistant

            target.attach_draft_head(write_tiny_gemma4_assistant(tmp_path / "assistant.gguf"))
        speculator = DraftHeadSpeculator(target.draft_head, max_draft_tokens=1, min_draft_prob=0.0)
    else:
        target = ggspec.load(tiny_model("qwen3", "f32"), n_ctx=64, n_threads=2)
        drafter = target.attach_drafter(write_tiny_dflash(tmp_path / "drafter.gguf", target_layers=(0, 1),
                                                          dspark={"dspark": {}, "dspark-bonus-anchor": dict(
                                                              sample_from_anchor=False)}.get(kind)))
        speculator = BlockDraftSpeculator(drafter, max_draft_tokens=1, min_draft_prob=0.0)
    prompt, config = [5, 17, 42, 99, 7], SamplerConfig(temperature=4.0, top_k=0, top_p=1.0, min_p=0.0)
    ids, weights = Sampler(config, target.n_vocab).distribution(target.spec_forward(prompt + [11]).logits[0], None)
    p = dict(zip(ids.tolist(), (weights / weights.sum()).tolist()))
    trials, first, accepted, q = 2000, [], 0, None
    for t in range(trials):
        target.reset()
        speculator.reset()
        execution = SpeculativeExecution(target, Sampler(dataclasses.replace(config, seed=t), target.n_vocab),
                                         speculator, accept="rejection")
        execution.prefill(prompt)  # commits the prompt's rows to the drafter; its sampled token is not used
        first.append(execution.step(prompt + [11], budget=2)[0])
        assert execution.stats.draft_n == 1
        accepted += execution.stats.draft_n_accepted
        q_ids, q_probs = speculator.draft_probabilities(0)
        assert q is None or (np.array_equal(q[0], q_ids) and np.array_equal(q[1], q_probs))  # one row, one q
        q = (q_ids, q_probs)
    expected = sum(min(p[t], qt) for t, qt in zip(q[0].tolist(), q[1].tolist()))
    assert len(q[0]) > 10 and 0.05 < expected < 0.95, expected
    top = list(ids[:5].tolist())
    observed = np.array([first.count(t) for t in top] + [sum(t not in top for t in first)])
    want = trials * np.array([p[t] for t in top] + [1.0 - sum(p[t] for t in top)])
    chi2 = float((((observed - want) ** 2) / want).sum())
    assert chi2 < 20.5, (chi2, observed, want)  # df = 5: p-value 0.001
    assert abs(accepted / trials - expected) < 0.045, (accepted / trials, expected)
