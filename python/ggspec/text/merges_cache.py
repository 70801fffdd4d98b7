"""On-disk cache of the SentencePiece merges derived from a vocabulary's scores.

Deriving them walks every split of every token: ~1.8 s for Gemma 3's 262144
tokens, while reading them back is a few milliseconds. Entries are keyed by a
hash of what the merges depend on (the token texts and scores, and the format
version below), so a changed vocabulary never reuses a stale entry. Writes go to
a temporary file renamed into place, so a reader never sees half a file; a cache
that cannot be read or written is skipped, never fatal.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

# Bump when spm.py's output changes for the same vocabulary.
FORMAT_VERSION = 1


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ggspec" / "tokenizers"


def vocab_key(tokens: list[str], scores: np.ndarray) -> str:
    h = hashlib.sha256(f"spm-merges-v{FORMAT_VERSION}\0{len(tokens)}\0".encode())
    h.update("\0".join(tokens).encode("utf-8", errors="surrogateescape"))
    h.update(np.ascontiguousarray(scores, dtype="<f4").tobytes())
    return h.hexdigest()[:32]


def load(key: str, n_symbols: int) -> tuple[list[str], np.ndarray] | None:
    """(phantoms, merges) stored under key, or None when absent or unusable."""
    path = cache_dir() / f"spm-{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as data:
            phantoms = [str(c) for c in data["phantoms"]]
            merges = data["merges"].astype(np.int32, copy=False)
    except (OSError, KeyError, ValueError):
        return None
    if merges.ndim != 2 or merges.shape[1] != 2:
        return None
    if merges.size and not (merges.min() >= 0 and merges.max() < n_symbols + len(phantoms)):
        return None
    return phantoms, merges


def store(key: str, phantoms: list[str], merges: np.ndarray) -> None:
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".spm-", suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, phantoms=np.array(phantoms, dtype=str), merges=merges)
            os.replace(tmp, directory / f"spm-{key}.npz")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full disk only costs the next load its time
