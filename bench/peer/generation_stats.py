"""What llama.cpp's generation tools report, read into the columns ggspec reports.

llama-completion (plain decode) and llama-speculative-simple (n-gram modes) print
their counters to stderr. Each speculative-simple step decodes [last, drafts...]
in one target call and emits 1 + its accepted drafts (on a target without
recurrent state, where no partial acceptance is retried), so

    target calls = decoded tokens - accepted drafts

exactly. Which of those calls carried drafts is not printed: llama.cpp counts a
one-token decode as an "eval run", but the first one after the prompt is synced
together with the prompt and counted as prompt tokens. Verify calls are taken as
target calls - eval runs, so they may count that first call too (one too many
at most, when it carried no draft).
"""

from __future__ import annotations

import re


def _int(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    if not m:
        raise ValueError(f"llama.cpp output lacks {pattern!r}:\n{text[-1500:]}")
    return int(m.group(1))


def _float(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    if not m:
        raise ValueError(f"llama.cpp output lacks {pattern!r}:\n{text[-1500:]}")
    return float(m.group(1))


EVAL_RUNS = r"\w+:\s+eval time =\s+[\d.]+ ms /\s+(\d+) runs"
EVAL_MS = r"\w+:\s+eval time =\s+([\d.]+) ms"


def completion_stats(output: str) -> dict:
    """llama-completion: the first token comes with the prompt, each later one is an eval run."""
    runs, eval_ms = _int(EVAL_RUNS, output), _float(EVAL_MS, output)
    return {"tokens_per_second": 1000.0 * runs / eval_ms, "call_tokens": runs, "target_calls": runs,
            "ms_per_call": eval_ms / runs, "draft_n": 0, "draft_n_accepted": 0, "verify_steps": 0}


def speculative_stats(output: str) -> dict:
    n_tokens = _int(r"decoded\s+(\d+) tokens", output)
    seconds = _float(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds", output)
    drafted, accepted = _int(r"n_drafted\s*=\s*(\d+)", output), _int(r"n_accept\s*=\s*(\d+)", output)
    calls = n_tokens - accepted
    return {"tokens_per_second": _float(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", output),
            "call_tokens": n_tokens, "target_calls": calls, "ms_per_call": 1000.0 * seconds / calls,
            "draft_n": drafted, "draft_n_accepted": accepted,
            "verify_steps": min(drafted, max(0, calls - _int(EVAL_RUNS, output)))}


def whole_log(output: str) -> dict:
    """The log as it is, once its closing counters show it arrived whole."""
    _int(EVAL_RUNS, output)
    return {"log": output}


def run_for_stats(cmd: list[str], parse=speculative_stats, attempts: int = 5, timeout: float = 120) -> dict:
    """Runs a llama.cpp tool and parses its stats. A failing exit raises.

    The tools log through a worker thread of a logger that is never flushed at exit
    (common/log.cpp leaks it on purpose), so on a busy machine a short run can exit
    before the worker prints its last lines: counters and generated text alike (seen
    on cold starts, and three times in a row on a loaded CI host). Such a run is
    repeated, after a pause that doubles each time (0.5 s to 4 s), so that the tries
    span a burst of load rather than fall inside it."""
    import subprocess
    import time

    for attempt in range(attempts):
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
        try:
            return parse(proc.stdout + proc.stderr)
        except ValueError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


__all__ = ["completion_stats", "speculative_stats", "whole_log", "run_for_stats"]
