"""The package's layers: imports run one way, downward (user API → engine → model →
speculators → native adapters and text), checked by import-linter's contracts in
pyproject.toml; and only the native adapters call into the C++ core."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "python" / "ggspec"


def lint_imports(source_root: Path) -> subprocess.CompletedProcess:
    """lint-imports over the ggspec package found under source_root, with the project's contracts."""
    env = dict(os.environ, PYTHONPATH=str(source_root))
    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else ["lint-imports"]
    return subprocess.run([*command, "--no-cache", str(REPO / "pyproject.toml")], cwd=source_root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    proc = lint_imports(REPO / "python")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 4 kept, 0 broken." in proc.stdout, proc.stdout


def test_an_upward_import_breaks_them(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "ggspec", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    target = tmp_path / "ggspec" / "native" / "target.py"
    target.write_text(target.read_text() + "\nimport ggspec.engine.engine  # deliberately upward\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "ggspec.native is not allowed to import ggspec.engine" in proc.stdout, proc.stdout


def test_only_the_native_adapters_import_the_core():
    """import-linter cannot see the compiled ggspec._core (it reads Python sources), so this walks them."""
    importers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if "ggspec._core" in names:
                importers.add(path.relative_to(PACKAGE).as_posix())
    assert importers and all(name.startswith("native/") for name in importers), importers
