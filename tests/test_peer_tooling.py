"""Unit tests of the paired-run harness logic (tiny shell commands, no llama.cpp)."""

import json
import shlex
import sys

import pytest

import bench.harness
from bench.harness import WALL_METRIC, extract_metric, run_pairs
from bench.peer.commands import COMPLETION_EVAL_TPS

PY = shlex.quote(sys.executable)
TPS_REGEX = r"([\d.]+) tokens per second"


def py_cmd(code: str) -> str:
    return f"{PY} -c {shlex.quote(code)}"


def test_pairs_alternate_after_warmups_and_ratios_are_b_over_a(tmp_path):
    out = tmp_path / "runs.json"
    result = run_pairs(
        py_cmd("print('x 5.0 tokens per second')"),
        py_cmd("import sys; print('y 7.5 tokens per second', file=sys.stderr)"),
        pairs=3,
        metric_a=TPS_REGEX,
        metric_b=TPS_REGEX,
        out=out,
    )
    order = [(r["side"], r["pair"]) for r in sorted(result["runs"], key=lambda r: r["seq"])]
    assert order == [("a", None), ("b", None), ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert result["ratios_b_over_a"] == pytest.approx([1.5] * 3)
    assert result["ratio_median"] == pytest.approx(1.5)
    assert (result["a"]["median"], result["a"]["min"], result["a"]["max"]) == (5.0, 5.0, 5.0)
    assert json.loads(out.read_text())["runs"] == json.loads(json.dumps(result["runs"]))


def test_json_metric_and_wall_time_fallback():
    result = run_pairs(
        py_cmd('import json; print(json.dumps([{"avg_ts": 40.0}]))'),
        py_cmd("pass"),
        pairs=1,
        metric_a="json:0.avg_ts",
        warmup=False,
    )
    assert len(result["runs"]) == 2
    assert result["a"]["median"] == 40.0
    assert result["b"]["metric"] == WALL_METRIC
    run_b = result["runs"][1]
    assert run_b["value"] == pytest.approx(1.0 / run_b["wall_s"])
    assert run_b["other_cores"] is None or run_b["other_cores"] >= 0.0


def test_completion_regex_reads_decode_not_prompt_line():
    log = (
        "0.02.255.795 I common_perf_print: prompt eval time =   10.00 ms /  8 tokens (1.25 ms per token, 800.00 tokens per second)\n"
        "0.02.255.805 I common_perf_print:        eval time = 1000.00 ms / 127 runs   (7.87 ms per token, 127.00 tokens per second)\n"
    )
    assert extract_metric("", log, COMPLETION_EVAL_TPS) == 127.0


def test_failing_command_or_missing_metric_raises():
    with pytest.raises(RuntimeError):
        run_pairs(py_cmd("raise SystemExit(3)"), py_cmd("pass"), pairs=1, warmup=False)
    with pytest.raises(ValueError):
        run_pairs(py_cmd("print('no number')"), py_cmd("pass"), pairs=1, metric_a=TPS_REGEX)


def test_disturbed_pairs_are_redone_and_excluded(monkeypatch):
    # other_cores per run, in order: pair 0 A/B disturbed, then clean pairs.
    loads = iter([0.9, 0.0, 0.0, 0.0, 0.0, 0.0])
    values = iter([1.0, 2.0, 10.0, 20.0, 10.0, 30.0])

    def fake_run_once(cmd, metric, timeout=None):
        return {"value": next(values), "wall_s": 1.0, "other_cores": next(loads)}

    monkeypatch.setattr(bench.harness, "run_once", fake_run_once)
    result = run_pairs("a", "b", pairs=2, warmup=False, max_other_cores=0.5)
    assert [r["discarded"] for r in result["runs"]] == [True, True, False, False, False, False]
    assert result["discarded_runs"] == 2
    assert result["ratios_b_over_a"] == [2.0, 3.0]
    assert result["a"]["median"] == 10.0


def test_a_log_cut_short_is_run_again_after_a_growing_pause(tmp_path, monkeypatch):
    """llama.cpp's tools can exit before their log worker prints the last lines: the
    run is repeated, pausing longer each time, and a run that never arrives whole raises."""
    import bench.peer.generation_stats as stats

    pauses: list[float] = []
    monkeypatch.setattr("time.sleep", pauses.append)
    runs = tmp_path / "runs"
    whole = "common_perf_print:        eval time =       1.76 ms /    23 runs"
    # whole from the third run on
    code = (f"import pathlib; p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() else 0; "
            f"p.write_text('x' * (n + 1)); print({whole!r} if n >= 2 else 'generate: n_ctx = 256')")
    cmd = [sys.executable, "-c", code]
    assert stats.run_for_stats(cmd, parse=stats.completion_stats)["call_tokens"] == 23
    assert pauses == [0.5, 1.0]
    runs.unlink()
    pauses.clear()
    with pytest.raises(ValueError, match="lacks"):
        stats.run_for_stats(cmd, parse=stats.whole_log, attempts=2)
    assert pauses == [0.5]
    with pytest.raises(RuntimeError, match="exited with 3"):
        stats.run_for_stats([sys.executable, "-c", "raise SystemExit(3)"])
