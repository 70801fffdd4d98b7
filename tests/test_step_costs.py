"""Step costs and the decisions made from them: the first probe planned from a
measured cost model, and each slot of a batch charged what its rows cost the batch."""

import numpy as np
import pytest

import ggspec
from ggspec.engine.batch_costs import BatchRowCosts, slot_costs
from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.planner import plan_speculation
from ggspec.engine.step_costs import StepCosts, measure_step_costs
from ggspec.speculators.options import SpecOptions
from tests.test_governor import PLAIN_S, run

# a block drafter's shape: 8 rows cost 3x one, and a pass costs half a step
BLOCK = StepCosts(rows=((1, PLAIN_S), (2, 0.014), (8, 0.030)), passes=((1, 0.003), (7, 0.005)),
                  pass_per_draft=False, window=7)


def drive(governor, steps, landed, costs=BLOCK):
    """`steps` steps of a drafter that lands landed(i, n) of its n drafts, on a machine
    with `costs`. Returns (drafting steps, tokens, seconds)."""
    def drafting_step(i):
        n = governor.draft_limit or costs.window
        return 1 + landed(i, n), costs.step(n), n
    return run(governor, steps, drafting_step)


def test_the_curve_interpolates_and_extends_the_measured_points():
    assert BLOCK.plain == PLAIN_S
    assert BLOCK.verify(2) == pytest.approx(0.014)
    assert BLOCK.verify(5) == pytest.approx(0.014 + 3 * (0.030 - 0.014) / 6)
    assert BLOCK.verify(14) == pytest.approx(0.030 + 6 * (0.030 - 0.014) / 6)  # the last slope, extended
    assert BLOCK.step(4) == pytest.approx(BLOCK.verify(5) + 0.003 + 3 * 0.002 / 6)  # a longer block costs more
    head = StepCosts(BLOCK.rows, ((1, 0.002),), True, 3)
    assert head.step(3) == pytest.approx(head.verify(4) + 3 * 0.002)  # a pass per draft
    # every draft landing: the best window's tokens per plain-step time
    assert BLOCK.best_gain(1.0) == pytest.approx(max((w + 1) * PLAIN_S / BLOCK.step(w) for w in range(1, 8)))
    assert BLOCK.best_gain(0.0) < 1.0
    assert BLOCK.extra(1) == pytest.approx(0.7)


def test_a_useless_drafter_costs_one_cheap_probe_in_a_short_run():
    g = SpeculationCostGovernor(costs=BLOCK)
    park = int(np.ceil(BLOCK.extra(1) / g.overhead))  # the probe lost 0.7 plain steps: earned back at 0.5%
    drafting, tokens, seconds = drive(g, 3 + park, lambda i, n: 0)
    assert drafting == 1 and g.parked_steps == park  # one one-draft probe, then parked until it is earned back
    assert tokens / seconds >= 0.985 / PLAIN_S
    uncosted = SpeculationCostGovernor()
    drafting_uncosted, tokens_u, seconds_u = drive(uncosted, 3 + park, lambda i, n: 0)
    assert drafting_uncosted > drafting and tokens_u / seconds_u < tokens / seconds
    # over a long run, probing stays within the overhead budget (and the backoff cap)
    g = SpeculationCostGovernor(costs=BLOCK)
    _, tokens, seconds = drive(g, 5000, lambda i, n: 0)
    assert tokens / seconds >= (1 - 1.5 * g.overhead) / PLAIN_S


def test_a_good_drafter_is_armed_after_its_probe_with_its_whole_window():
    g = SpeculationCostGovernor(costs=BLOCK)
    drafting, tokens, seconds = drive(g, 200, lambda i, n: n)  # every draft lands
    assert g.parked_steps == 0 and g.draft_limit is None
    assert tokens / seconds > 2.0 / PLAIN_S
    # a one-draft probe step, slower than plain, does not park a drafter whose drafts land
    g = SpeculationCostGovernor(costs=BLOCK)
    drive(g, 2, lambda i, n: 0)
    assert g.should_draft() and g.draft_limit == 1
    g.observe(True, 2, BLOCK.step(1), drafts=1)
    assert not g.parked


def test_a_probe_that_cost_more_than_planned_parks_longer():
    """A per-token head first catches up on every row it missed while parked: the probe's
    measured loss, not the planned one, sets the parking, up to its cap."""
    for step_seconds, expected in ((2 * PLAIN_S, 400), (20 * PLAIN_S, 512)):
        g = SpeculationCostGovernor(costs=BLOCK)
        drive(g, 2, lambda i, n: 0)
        assert g.should_draft()
        g.observe(True, 1, step_seconds, drafts=1)
        parked = 0
        while not g.should_draft():
            g.observe(False, 1, PLAIN_S)
            parked += 1
        assert parked == expected == min(g.max_budget_park, round((step_seconds / PLAIN_S - 1) / g.overhead))


def test_a_drafter_that_could_not_pay_even_when_perfect_is_never_probed():
    hopeless = StepCosts(rows=((1, PLAIN_S), (2, 0.021), (8, 0.090)), passes=((1, 0.002),), pass_per_draft=False,
                         window=7)
    assert hopeless.best_gain(1.0) < 1.0
    g = SpeculationCostGovernor(costs=hopeless)
    drafting, _, _ = drive(g, 500, lambda i, n: n, costs=hopeless)
    assert drafting == 0 and g.parked_steps > 490


def test_a_probe_is_judged_by_acceptance_even_in_a_warm_up_step():
    g = SpeculationCostGovernor(costs=BLOCK)
    drive(g, 2, lambda i, n: 0)
    assert g.should_draft()
    g.observe(True, 1, 50 * PLAIN_S, warmup=True, drafts=1)  # a graph build: timing says nothing, acceptance does
    assert g.parked


def test_a_pass_that_proposes_nothing_is_a_drafting_step(tiny_model):
    """The drafter ran and found nothing: its pass still cost time, so the governor
    counts the step against drafting (a per-token head whose confidence gate declines
    would otherwise cost every step for nothing)."""
    from ggspec.engine.execution import SpeculativeExecution
    from ggspec.engine.sampling import Sampler, SamplerConfig
    from ggspec.speculators.base import Speculator

    class Silent(Speculator):
        name = "silent"

        def propose(self, ctx, out):
            return 0

    class Cheap(Silent):
        proposes_cheaply = True

    seen = []

    class Recording(SpeculationCostGovernor):
        def observe(self, drafted, tokens, seconds, **kwargs):
            seen.append(drafted)
            super().observe(drafted, tokens, seconds, **kwargs)

    target = ggspec.load(tiny_model("llama"))
    for speculator, expected in ((Silent(4), True), (Cheap(4), False)):
        seen.clear()
        target.reset()
        sampler = Sampler(SamplerConfig(temperature=0), target.n_vocab)
        execution = SpeculativeExecution(target, sampler, speculator, governor=Recording(min_plain_samples=0))
        list(execution.generate([1, 2, 3], 6))
        # the last step has room for no draft: the drafter does not run
        assert len(seen) == 5 and seen[:-1] == [expected] * 4 and seen[-1] is False


def test_measuring_leaves_the_sequence_empty_and_the_output_unchanged(tiny_model):
    """Measured on the sequence a request is about to use (a recurrent trunk here): it is
    left empty, and the drafter's state with it."""
    tiny_qwen35_path = tiny_model("qwen35")
    head = SpecOptions(spec_type="draft-head")
    model = ggspec.Model(tiny_qwen35_path, prefix_cache_mb=None)
    plan = plan_speculation(model.target, head)
    costs = plan.governor.costs
    assert costs is not None and costs.window == plan.speculator.max_draft_tokens and costs.pass_per_draft
    assert [r for r, _ in costs.rows] == [1, 2, costs.window + 1] and all(s > 0 for _, s in costs.rows)
    assert model.target.cache_seq_len == 0 and plan.setup_seconds > 0
    fresh = ggspec.Model(tiny_qwen35_path, prefix_cache_mb=None)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    with ggspec.Engine(model) as engine:
        after = engine.submit(ids, max_tokens=12, temperature=0, ignore_eos=True, spec=head).result
    with ggspec.Engine(fresh) as engine:
        before = engine.submit(ids, max_tokens=12, temperature=0, ignore_eos=True, spec=False).result
    assert after.tokens == before.tokens
    assert after.stats["setup_ms"] > 0  # a new plan; the costs themselves were kept for the target
    model.target.spec_forward([1, 2])
    assert measure_step_costs(model.target, plan.speculator) is not None and model.target.cache_seq_len == 0


def test_a_slot_is_charged_what_its_rows_cost_the_batch():
    rows_cost = BatchRowCosts()
    assert rows_cost.slot_rows(4, 0.003) is None  # the batch's plain step is not measured yet
    # four slots: a step of one row each takes 40 ms; the first extra row adds 6 ms and
    # each later one 3 ms (a multi-row kernel's row groups), which a straight line undercharges
    for rows in (4, 5, 8, 4, 5, 8):
        rows_cost.observe(4, rows, 0.040 + (0.006 + 0.003 * (rows - 5) if rows > 4 else 0.0))
    curve = rows_cost.slot_rows(4, None)
    ngram = StepCosts(BLOCK.rows, ((1, 0.0), (7, 0.0)), False, 7)  # free passes
    costs = slot_costs(curve, ngram)
    assert costs.plain == pytest.approx(0.010)  # the batch's plain step, split evenly
    assert costs.verify(2) == pytest.approx(0.016) and costs.verify(5) == pytest.approx(0.025)
    assert costs.verify(3) == pytest.approx(0.019)  # between measured totals, on their line
    slope = rows_cost.slope(4, None)
    assert costs.verify(7) == pytest.approx(0.025 + 2 * slope)  # past them, at the fitted slope
    assert slot_costs(curve, BLOCK).step(1) == pytest.approx(0.016 + BLOCK.draft(1))  # its own drafter's pass
    # a one-draft step that lands half its drafts: 1.5 tokens for its 16 ms, where the
    # batch's plain step gives 1 for 10: a loss for the batch, and its governor parks
    g = SpeculationCostGovernor(costs=ngram)
    g.use_costs(costs)
    assert g.probe_window == 1
    for i in range(40):
        if g.should_draft():
            g.observe(True, 1 + i % 2, costs.verify(2), drafts=1, plain_seconds=costs.plain)
        else:
            g.observe(False, 1, costs.plain, plain_seconds=costs.plain)
    assert g.parked
    # on the sequence's own costs (a row a third of a step) the same drafts would pay
    assert ngram.best_gain(0.5) > 1.0 > costs.best_gain(0.5)
    # its plain steps ran in a batch of one (25 ms a token); judged against them its
    # drafting in a batch of four looks 2.3x faster, judged against the same batch's plain
    # step it loses
    for baseline, parked in ((None, False), (costs.plain, True)):
        g = SpeculationCostGovernor()
        for _ in range(4):
            g.observe(False, 1, 0.025)
        for i in range(20):
            if g.should_draft():
                g.observe(True, 1 + i % 2, costs.verify(2), drafts=1, plain_seconds=baseline)
        assert g.parked == parked
    # without a prior and before the rows vary, an extra row costs the average row
    plain_only = BatchRowCosts()
    for _ in range(2):
        plain_only.observe(2, 2, 0.020)
    assert plain_only.slot_rows(2, None) == ((1, pytest.approx(0.010)), (2, pytest.approx(0.020)))
    assert plain_only.slot_rows(2, 0.004)[1] == (2, pytest.approx(0.014))
