"""The fuzzer's driver: mutants of the project's tiny files, each exercised in a
forked child with an address-space cap and a deadline, counted by outcome.

Outcomes: ok (the mutant still runs), refused (a ValueError or OSError: ggspec
named the problem), error (any other exception: a bug), memory (a MemoryError or a
peak RSS above the cap: a blow-up), signal (the child died: a crash), hang (past
the deadline). Only ok and refused pass. Findings are kept under the state
directory for replay (`--replay FILE`).
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import select
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.mutate import Slot, layout, mutate

PASSING = ("ok", "refused")
OUTCOMES = ("ok", "refused", "error", "memory", "signal", "hang")
ADDRESS_SPACE = 4 << 30  # bytes
PEAK_RSS = 1 << 30       # bytes
DEADLINE = 20.0          # seconds


@dataclass
class Base:
    name: str
    data: bytes
    slots: list[Slot]
    target: str | None  # a drafter's (intact) target file; None: the mutant is a target


def write_bases(root: Path) -> list[Base]:
    """The project's tiny files: the fixture writers' llama (one with YaRN), qwen2, qwen3, phi3 (with
    LongRoPE factors and partial rotary), gemma3, gemma4 (shared KV, per-layer embeddings, V = K, experts), muse-glimmer,
    qwen35, qwen35moe, DFlash, DSpark, EAGLE-3 and Gemma 4 assistant files."""
    from tests.fixtures.tiny_dflash import DFLASH2, write_tiny_dflash
    from tests.fixtures.tiny_eagle3 import write_tiny_eagle3
    from tests.fixtures.tiny_gemma4 import MOE as GEMMA4_MOE
    from tests.fixtures.tiny_gemma4 import write_tiny_gemma4, write_tiny_gemma4_assistant
    from tests.fixtures.tiny_models import write_tiny_model
    from tests.fixtures.tiny_qwen35 import write_tiny_qwen35, write_tiny_qwen35moe

    root.mkdir(parents=True, exist_ok=True)
    qwen3 = write_tiny_model(root / "qwen3.gguf", "qwen3", n_layer=2)
    gemma4 = write_tiny_gemma4(root / "gemma4.gguf", dtype="q8_0", k_eq_v=True, **GEMMA4_MOE)
    files = {
        "llama-f32": (write_tiny_model(root / "llama.gguf", "llama", seed=3), None),
        "llama-q8_0": (write_tiny_model(root / "llama-q8.gguf", "llama", dtype="q8_0", seed=4), None),
        "llama-yarn": (write_tiny_model(root / "llama-yarn.gguf", "llama", seed=5, rope_scaling="yarn",
                                        rope_scaling_factor=4.0, rope_original_context=256), None),
        "qwen2-f32": (write_tiny_model(root / "qwen2.gguf", "qwen2", seed=6), None),
        "phi3-q8_0": (write_tiny_model(root / "phi3.gguf", "phi3", dtype="q8_0", seed=7, n_rot=12,
                                       rope_factors=([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0] * 6),
                                       rope_original_context=256, rope_attn_factor=1.2), None),
        "gemma3-f16": (write_tiny_model(root / "gemma3.gguf", "gemma3", dtype="f16", n_layer=3), None),
        "gemma4-q8_0": (gemma4, None),
        "qwen3-f32": (qwen3, None),
        "muse-glimmer-q4_0": (write_tiny_model(root / "muse.gguf", "muse-glimmer", dtype="q4_0", seed=8), None),
        "qwen35-f32": (write_tiny_qwen35(root / "qwen35.gguf"), None),
        "qwen35moe-q8_0": (write_tiny_qwen35moe(root / "qwen35moe.gguf", dtype="q8_0", fused_gate_up=True), None),
        "dflash": (write_tiny_dflash(root / "dflash.gguf"), str(qwen3)),
        "dflash2": (write_tiny_dflash(root / "dflash2.gguf", dflash2=dict(DFLASH2)), str(qwen3)),
        "dspark": (write_tiny_dflash(root / "dspark.gguf", dspark={}, reduced_vocab=96), str(qwen3)),
        "eagle3": (write_tiny_eagle3(root / "eagle3.gguf", reduced_vocab=96), str(qwen3)),
        "gemma4-assistant": (write_tiny_gemma4_assistant(root / "assistant.gguf"), str(gemma4)),
    }
    bases = []
    for name, (path, target) in files.items():
        data = Path(path).read_bytes()
        bases.append(Base(name, data, layout(data), target))
    return bases


def exercise(path: Path, target: str | None) -> None:
    from tests.fuzz.exercise import exercise_drafter, exercise_target

    if target is None:
        exercise_target(str(path))
    else:
        exercise_drafter(target, str(path))


def _child(work, write_fd: int) -> None:
    """Runs in the forked child: do the work, report, exit (never returns)."""
    outcome, detail = "ok", ""
    faulthandler.disable()  # a crash is the parent's to report, not a traceback on the inherited stderr
    try:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        work()
    except MemoryError as e:
        outcome, detail = "memory", repr(e)
    except (ValueError, OSError) as e:
        outcome, detail = "refused", f"{type(e).__name__}: {e}"
    except BaseException as e:  # noqa: BLE001 - anything else is a finding
        outcome, detail = "error", "".join(traceback.format_exception(e))[-2000:]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if outcome in PASSING and peak > PEAK_RSS:
        outcome, detail = "memory", f"peak RSS {peak >> 20} MiB"
    os.write(write_fd, json.dumps({"outcome": outcome, "detail": detail[:4000]}).encode())
    os._exit(0)


class Child:
    """One forked child doing `work` (by default: exercising the mutant at `path`)."""

    def __init__(self, index: int, base: Base, path: Path, work=None):
        self.index, self.base, self.path = index, base, path
        read_fd, write_fd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(read_fd)
            _child(work or (lambda: exercise(path, base.target)), write_fd)
        os.close(write_fd)
        self.fd = read_fd
        self.started = time.monotonic()
        self.report = b""

    def wait(self, deadline: float = DEADLINE) -> tuple[str, str]:
        """(outcome, detail) once the child has reported and exited, or was killed at the deadline."""
        while True:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - (time.monotonic() - self.started)))
            if not ready:
                return self.finish(kill=True)
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return self.finish(kill=False)
            self.report += chunk

    def finish(self, kill: bool) -> tuple[str, str]:
        if kill:
            os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        if kill:
            return "hang", "past the deadline"
        if os.WIFSIGNALED(status):
            return "signal", signal.Signals(os.WTERMSIG(status)).name
        try:
            report = json.loads(self.report.decode())
        except ValueError:
            return "signal", f"exited {os.waitstatus_to_exitcode(status)} without a report"
        return report["outcome"], report["detail"]


def run(n_mutants: int, state_dir: Path, seed: int = 0, jobs: int = 2, seconds: float | None = None,
        log=print) -> dict:
    """Runs mutants [next, n_mutants) of `seed`, resuming from state_dir/progress.json;
    stops early after `seconds`. Returns the progress record."""
    state_dir.mkdir(parents=True, exist_ok=True)
    progress_path = state_dir / "progress.json"
    progress = {"seed": seed, "next": 0, "counts": dict.fromkeys(OUTCOMES, 0), "findings": [], "refusals": {}}
    if progress_path.exists():
        saved = json.loads(progress_path.read_text())
        if saved["seed"] == seed:
            progress = saved
    bases = write_bases(state_dir / "bases")
    scratch = Path(tempfile.mkdtemp(prefix="ggspec-fuzz-"))
    (state_dir / "findings").mkdir(exist_ok=True)
    running: list[Child] = []  # children not yet waited for, killed if the run is interrupted
    start = time.monotonic()
    index = progress["next"]

    def record(job: Child, outcome: str, detail: str) -> None:
        progress["counts"][outcome] += 1
        if outcome == "refused":  # what kinds of refusal: the message's first words, the file's name dropped
            words = [w for w in detail.replace(str(job.path), "FILE").split() if not w.startswith("/")]
            kind = " ".join(words[:6])
            progress["refusals"][kind] = progress["refusals"].get(kind, 0) + 1
        if outcome not in PASSING:
            keep = state_dir / "findings" / f"{job.index:07d}-{job.base.name}-{outcome}.gguf"
            keep.write_bytes(job.path.read_bytes())
            progress["findings"].append({"index": job.index, "base": job.base.name, "outcome": outcome,
                                         "detail": detail[:500], "file": str(keep)})
            log(f"mutant {job.index} ({job.base.name}): {outcome}: {detail[:300]}")
        job.path.unlink(missing_ok=True)

    try:
        while index < n_mutants and not (seconds is not None and time.monotonic() - start > seconds):
            batch = []  # `jobs` children at once; the next batch starts when all have ended
            for _ in range(min(jobs, n_mutants - index)):
                base = bases[index % len(bases)]
                path = scratch / f"mutant-{index}.gguf"
                path.write_bytes(mutate(base.data, base.slots, seed * 1_000_003 + index))
                batch.append(Child(index, base, path))
                index += 1
            running = list(batch)
            outcomes = []
            for job in batch:  # each child's deadline runs from its own start
                outcomes.append(job.wait())
                running.remove(job)
            for job, (outcome, detail) in zip(batch, outcomes):  # a batch counts whole, or not at all
                record(job, outcome, detail)
            progress["next"] = index
            if index % 200 < jobs:
                progress_path.write_text(json.dumps(progress, indent=1))
    finally:
        for job in running:
            job.finish(kill=True)
        progress_path.write_text(json.dumps(progress, indent=1))
    return progress


__all__ = ["run", "exercise", "write_bases", "Child", "OUTCOMES", "PASSING"]
