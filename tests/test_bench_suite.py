"""The benchmark suites: prompt files, llama.cpp's counters read right, the report's arithmetic, and the
placement probe that tags verify_cost's samples."""

import os

import pytest

from bench.peer.commands import completion_cmd, speculative_cmd
from bench.peer.generation_stats import completion_stats, run_for_stats, speculative_stats, whole_log
from bench.spec_prompts import CANNOT_PAY, DOCUMENT, PROMPTS, SUITES, by_name
from bench.suite_report import summarize, write_report
from bench.verify_cost import placement_cost, placements
from ggspec import _core
from ggspec.engine.stats import PHASES

KINDS = {"document", CANNOT_PAY, "turns-to-copy", "lists", "code"}


def test_suites_hold_three_to_five_complete_prompts():
    assert set(SUITES) == {"prose", "lists", "document", "code", "turns_to_copy"}
    for suite in SUITES.values():
        assert 3 <= len(suite.prompts) <= 5, suite.name
        for p in suite.prompts:
            assert p.kind in KINDS and p.raw.strip() and p.chat.strip(), p.name
            assert "{{" not in p.raw + p.chat, f"{p.name}: an unfilled placeholder"
    names = [p.name for p in PROMPTS]
    assert len(names) == len(set(names))
    assert DOCUMENT in by_name("doc-repeat").chat and "class Inventory" in by_name("code-rename").raw


def _run(prompt, engine, config, round_, tps, **extra):
    return {"model": "m", "suite": "document", "prompt": prompt, "kind": "document", "engine": engine,
            "config": config, "round": round_, "tokens_per_second": tps, "call_tokens": 64, "target_calls": 64,
            "ms_per_call": 1000 / tps, "draft_n": 0, "draft_n_accepted": 0, "verify_steps": 0, "wall_s": 1.0,
            "other_cores": 0.0, **extra}


def test_report_ratios_are_per_round_and_acceptance_is_counted(tmp_path):
    meta = {"threads": 2, "n": 64, "ctx": 512, "rounds": 3, "quick": True, "machine": "x", "seconds": 60,
            "copy_bandwidth_gbs": 20.0, "models": {"m": {"weight_bytes": 100_000_000}}}
    spec = {"draft_n": 40, "draft_n_accepted": 30, "verify_steps": 10, "target_calls": 20, "call_tokens": 50,
            "phases_ms": dict.fromkeys(PHASES, 1.0),
            "draft_n_per_position": [10, 10, 10, 10], "draft_n_accepted_per_position": [10, 9, 7, 4],
            "phase_sum_over_gen": 0.995}
    runs = []
    for r, (plain, ngram) in enumerate([(40, 80), (50, 150), (20, 50)]):
        runs += [_run("doc-repeat", "ggspec", "plain", r, plain),
                 _run("doc-repeat", "ggspec", "ngram", r, ngram, **spec),
                 _run("doc-repeat", "llama.cpp", "plain", r, plain / 2),
                 _run("doc-repeat", "llama.cpp", "ngram-simple", r, plain, **{k: spec[k] for k in
                      ("draft_n", "draft_n_accepted", "verify_steps", "target_calls", "call_tokens")})]
    rows = {(s["engine"], s["config"]): s for s in summarize(meta, runs)}
    ngram = rows["ggspec", "ngram"]
    # per-round ratios 2.0, 3.0, 2.5: their median, not the ratio of medians (80/40)
    assert ngram["x_ggspec_plain"] == pytest.approx(2.5)
    assert (ngram["tps"], ngram["tps_min"], ngram["tps_max"]) == (80, 50, 150)
    assert ngram["mean_acceptance_length"] == pytest.approx(4.0)
    assert ngram["acceptance_rate"] == pytest.approx(0.75)
    assert ngram["tokens_per_call"] == pytest.approx(2.5)
    assert ngram["weight_gbs"] == pytest.approx(0.1 * 80)
    their = rows["llama.cpp", "ngram-simple"]
    assert (their["x_own_plain"], their["x_ggspec_plain"]) == (pytest.approx(2.0), pytest.approx(1.0))
    assert their["phases_ms"] is None
    written = write_report(meta, runs, tmp_path)
    table = (tmp_path / "table.md").read_text()
    assert "| m | document | doc-repeat | ggspec ngram | 80.0 (50.0–150.0) | 2.50 | 2.50 | 4.00 | 75% |" in table
    assert "20.0 GB/s" in table and "sum to 0.995–0.995 of its generation time" in table
    for png in written[1:3]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.peer
@pytest.mark.slow
def test_llama_cpp_counters_are_read(smollm2_path):
    text = by_name("doc-repeat").raw
    n = 48
    out = run_for_stats(speculative_cmd(smollm2_path, text, "ngram-simple", n, ctx=1024), parse=whole_log)["log"]
    spec = speculative_stats(out)
    assert spec["call_tokens"] >= n and spec["tokens_per_second"] > 0
    assert 0 < spec["draft_n_accepted"] <= spec["draft_n"]
    assert spec["target_calls"] == spec["call_tokens"] - spec["draft_n_accepted"]
    assert 1 <= spec["verify_steps"] < spec["target_calls"]
    plain = run_for_stats(completion_cmd(smollm2_path, text, n, ctx=1024), parse=completion_stats)
    assert (plain["call_tokens"], plain["target_calls"]) == (n - 1, n - 1) and plain["tokens_per_second"] > 0
    with pytest.raises(ValueError, match="lacks"):
        speculative_stats(out.replace("n_drafted", "n_proposed"))


def test_verify_cost_splits_sample_sets_by_placement():
    """Each set of one-row and k-row timings carries the round trip measured
    before it; the round trips cluster, and a cluster's cost is its sets'
    median k-row over median one-row time."""
    assert placements([55.0, 60.0, 240.0, 600.0, 290.0, 750.0]) == [(55.0, 60.0), (240.0, 290.0), (600.0, 750.0)]
    # an even spread, no step over 1.6x, still splits where a cluster would pass twice its least
    assert placements([80.0, 120.0, 170.0, 250.0, 360.0, 520.0]) == [(80.0, 120.0), (170.0, 250.0), (360.0, 520.0)]
    sets = [(55.0, {1: 4.0, 8: 6.0}), (60.0, {1: 4.2, 8: 6.4}), (600.0, {1: 3.5, 8: 8.0})]
    assert placement_cost(sets, 8, (55.0, 60.0)) == "1.51 (2)"
    assert placement_cost(sets, 8, (600.0, 600.0)) == "2.29 (1)"
    assert placement_cost(sets, 8, (100.0, 500.0)) == "- (0)"


def test_core_round_trip_is_measured_between_two_pinned_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: no round trip to measure")
    before = os.sched_getaffinity(0)
    assert 0 < _core.core_round_trip_ns(cpus[0], cpus[1], 2000) < 1e6
    assert os.sched_getaffinity(0) == before  # the caller's affinity is given back
    assert _core.core_round_trip_ns(cpus[0], 1 << 20, 10) < 0  # no such CPU: not measured
    with pytest.raises(ValueError, match="trips"):
        _core.core_round_trip_ns(cpus[0], cpus[1], 0)
