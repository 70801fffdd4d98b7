"""The cost governor on a fake clock: it parks a losing drafter and re-arms a winning one."""

from ggspec.engine.governor import GovernorMemory, SpeculationCostGovernor

PLAIN_S = 0.010  # one plain step: 1 token in 10 ms


def run(governor, steps, spec_step):
    """Drives `steps` steps; spec_step(i) -> (tokens, seconds) of a drafting step i, or
    (tokens, seconds, drafts verified). Returns (drafting steps, tokens, seconds)."""
    drafted = tokens = 0
    seconds = 0.0
    for i in range(steps):
        if governor.should_draft():
            t, s, *drafts = spec_step(i)
            governor.observe(True, t, s, drafts=drafts[0] if drafts else 0)
            drafted += 1
        else:
            t, s = 1, PLAIN_S
            governor.observe(False, t, s)
        tokens += t
        seconds += s
    return drafted, tokens, seconds


def test_a_losing_drafter_is_parked_and_costs_under_three_percent():
    g = SpeculationCostGovernor()
    drafted, tokens, seconds = run(g, 2000, lambda i: (1, 3 * PLAIN_S))  # garbage: 1 token at 3x the cost
    plain_rate = 1 / PLAIN_S
    assert tokens / seconds >= 0.97 * plain_rate
    assert drafted < 2000 * 0.02
    assert g.parked_steps > 1800
    assert g.probes >= 2000 // (g.max_park + g.probe_steps)  # it keeps re-probing at the capped backoff


def test_a_winning_drafter_keeps_drafting():
    g = SpeculationCostGovernor()
    drafted, tokens, seconds = run(g, 1000, lambda i: (4, 1.5 * PLAIN_S))
    assert g.parked_steps == 0
    assert drafted >= 1000 - 2 - 1000 // g.plain_refresh - 1  # only the baseline's plain steps
    assert tokens / seconds > 2.5 / PLAIN_S


def test_it_re_arms_when_the_text_turns_predictable():
    g = SpeculationCostGovernor()
    # prose for 500 steps (drafts lose), then copying (drafts win)
    drafted, *_ = run(g, 1000, lambda i: (1, 2 * PLAIN_S) if i < 500 else (5, 1.5 * PLAIN_S))
    g2 = SpeculationCostGovernor()
    run(g2, 500, lambda i: (1, 2 * PLAIN_S))
    parked_before = g2.parked_steps
    steps_to_rearm = 0
    while not g2.should_draft():
        g2.observe(False, 1, PLAIN_S)
        steps_to_rearm += 1
    assert steps_to_rearm <= g2.max_park
    assert drafted > 400  # most of the copying half drafted
    assert parked_before > 400


def test_off_always_drafts():
    g = SpeculationCostGovernor(enabled=False)
    drafted, *_ = run(g, 300, lambda i: (1, 5 * PLAIN_S))
    assert drafted == 300 and g.parked_steps == 0 and g.probes == 0


def test_warmup_steps_do_not_count():
    g = SpeculationCostGovernor()
    g.observe(False, 1, PLAIN_S)
    g.observe(False, 1, PLAIN_S)
    assert g.should_draft()
    for _ in range(10):  # graph builds: slow, but say nothing about steady state
        g.observe(True, 3, 100 * PLAIN_S, warmup=True)
    assert not g.parked and g.should_draft()


def test_the_baseline_is_refreshed_when_the_drafter_never_declines():
    g = SpeculationCostGovernor(plain_refresh=10)
    decisions = []
    for _ in range(60):
        d = g.should_draft()
        decisions.append(d)
        g.observe(d, 3 if d else 1, PLAIN_S)
    assert decisions[:2] == [False, False]  # the first baseline
    plain_after_start = [i for i, d in enumerate(decisions) if not d and i >= 2]
    assert plain_after_start and all(b - a == 11 for a, b in zip(plain_after_start, plain_after_start[1:]))


def test_shadow_hits_end_the_parking_early():
    g = SpeculationCostGovernor()
    run(g, 40, lambda i: (1, 3 * PLAIN_S))  # park a losing drafter
    assert g.parked
    probes = g.probes
    for hit in (True, True, True, False, True, True, True):  # a miss restarts the count
        g.observe_shadow(hit)
    assert g.parked
    g.observe_shadow(True)
    assert not g.parked and g.probes == probes + 1 and g.should_draft()


def test_probes_verify_a_short_window_until_drafting_has_paid():
    g = SpeculationCostGovernor(probe_window=2)
    g.observe(False, 1, PLAIN_S)
    g.observe(False, 1, PLAIN_S)
    assert g.should_draft() and g.draft_limit == 2  # the first drafting steps are a probe
    g.observe(True, 3, 1.2 * PLAIN_S)
    g.observe(True, 3, 1.2 * PLAIN_S)
    assert g.draft_limit is None  # it paid: the speculator's own window from now on
    assert SpeculationCostGovernor(enabled=False).draft_limit is None


def test_what_it_learned_carries_over_to_the_next_request():
    # 20 short requests with a useless drafter: a governor that starts afresh pays its
    # baseline and a probe on each; one resumed from the last request's starts parked
    garbage = lambda i: (1, 3 * PLAIN_S)  # noqa: E731
    fresh = [run(SpeculationCostGovernor(), 96, garbage) for _ in range(20)]
    memory, key, carried = GovernorMemory(), ("ngram", None, 1), []
    for _ in range(20):
        g = SpeculationCostGovernor()
        memory.start(g, key)
        carried.append(run(g, 96, garbage))
        memory.keep(g, key)
    rate = lambda runs: sum(t for _, t, _ in runs) / sum(s for _, _, s in runs)  # noqa: E731
    assert rate(carried) > rate(fresh)
    assert sum(d for d, _, _ in carried[1:]) * 4 < sum(d for d, _, _ in fresh[1:])
    assert all(d <= 1 for d, _, _ in carried[1:])  # parked from the start: at most the backoff's re-probe

    winner = SpeculationCostGovernor()
    run(winner, 50, lambda i: (4, 1.5 * PLAIN_S))
    memory.keep(winner, key)
    resumed = SpeculationCostGovernor()
    memory.start(resumed, key)
    assert resumed.should_draft() and resumed.draft_limit is None  # armed at once, its full window
    assert GovernorMemory.key(type("Plan", (), {"speculator": None})(), 1) is None
