"""The fuzzer over the project's tiny files: a short run in the test command (the
long one is `python -m tests.fuzz --mutants 100000`, see tests/fuzz/__main__.py)."""

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import REPO
from tests.fuzz.mutate import mutate
from tests.fuzz.run import Child, write_bases


def test_a_short_run_finds_no_crash_hang_blowup_or_stray_exception(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # a fixed count (seed 0), not a time: the same mutants however busy the host is (about 30 s here)
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz", "--mutants", "600", "--state", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    summary = json.loads(proc.stdout)
    assert proc.returncode == 0, (summary, proc.stderr[-3000:])
    counts = summary["counts"]
    assert summary["mutants"] == 600, summary
    # the mutants reach both sides: some still run, and refusals come from several checks
    assert counts["ok"] > 0 and counts["refused"] > 0 and len(summary["refusals"]) >= 5, summary


def test_the_layout_walks_header_metadata_and_tensor_table(tmp_path):
    for base in write_bases(tmp_path):
        kinds = {slot.kind for slot in base.slots}
        assert {"header", "key", "value", "tensor_name", "dim", "type", "data_offset"} <= kinds, base.name
        assert base.slots[-1].kind == "data_offset"
        assert mutate(base.data, base.slots, 7) == mutate(base.data, base.slots, 7)  # replayable
        assert mutate(base.data, base.slots, 7) != base.data or mutate(base.data, base.slots, 8) != base.data


def test_the_child_reports_what_went_wrong(tmp_path):
    base = write_bases(tmp_path)[0]
    path = tmp_path / "unused.gguf"

    def outcome(work, deadline=20.0):
        return Child(0, base, path, work).wait(deadline)[0]

    assert outcome(lambda: None) == "ok"
    assert outcome(lambda: int("x")) == "refused"
    assert outcome(lambda: [][0]) == "error"
    assert outcome(lambda: os.kill(os.getpid(), signal.SIGSEGV)) == "signal"
    assert outcome(lambda: bytearray(8 << 30)) == "memory"  # past the address-space cap
    assert outcome(lambda: time.sleep(30), deadline=1.0) == "hang"
