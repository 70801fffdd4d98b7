"""Bad input raises a clear Python exception naming the problem: never a crash.

Each case runs in a child process, so an abort or SIGBUS fails the test
instead of taking the test run down with it.
"""

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from tests.conftest import run_isolated


def expect_error(load_code: str, error: str, *fragments: str) -> None:
    proc = run_isolated(f"""
        import ggspec
        try:
{''.join('            ' + line + chr(10) for line in load_code.strip().splitlines())}
        except {error} as e:
            print("RAISED:", type(e).__name__, e)
        else:
            print("NO ERROR")
    """)
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    out = proc.stdout
    assert "RAISED:" in out, out + proc.stderr
    for fragment in fragments:
        assert fragment in out, out


def copy_gguf(src: str, dst: Path, *, drop: tuple[str, ...] = (), arch: str | None = None,
              tensors: dict | None = None, keys: dict | None = None) -> str:
    """Rewrites a GGUF with tensors dropped, replaced or added (tensors: name → array),
    keys replaced, added or removed (keys: name → (value, GGUFValueType), or None), or
    general.architecture replaced."""
    reader = GGUFReader(src)
    old_arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    writer = GGUFWriter(str(dst), arch or old_arch)
    keys = dict(keys or {})
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture",):
            continue
        name = field.name.replace(old_arch + ".", (arch or old_arch) + ".")
        if name in keys:
            continue
        value = field.contents()
        vtype = field.types[0]
        sub = field.types[-1] if len(field.types) > 1 else None
        writer.add_key_value(name, value, vtype, sub_type=sub)
    for name, typed in keys.items():
        if typed is not None:
            value, vtype = typed
            sub = None
            if vtype == GGUFValueType.ARRAY:
                sub = GGUFValueType.STRING if isinstance(value[0], str) else GGUFValueType.INT32
            writer.add_key_value(name, value, vtype, sub_type=sub)
    replaced = dict(tensors or {})
    for t in reader.tensors:
        if t.name in drop:
            continue
        if t.name in replaced:
            writer.add_tensor(t.name, replaced.pop(t.name))
            continue
        writer.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    for name, array in replaced.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(dst)


def test_missing_file(tmp_path):
    expect_error(f"ggspec.load({str(tmp_path / 'nope.gguf')!r})", "ValueError", "cannot open", "nope.gguf")


def test_not_a_gguf(tmp_path):
    path = tmp_path / "text.gguf"
    path.write_text("this is not a model\n" * 10)
    expect_error(f"ggspec.load({str(path)!r})", "ggspec.ModelFormatError", "not a GGUF file")


def test_truncated_gguf(tiny_model, tmp_path):
    data = Path(tiny_model("llama")).read_bytes()
    path = tmp_path / "truncated.gguf"
    path.write_bytes(data[: len(data) * 2 // 3])
    expect_error(f"ggspec.load({str(path)!r})", "ggspec.ModelFormatError", "truncated", "needs bytes up to")


@pytest.mark.parametrize("cut", [8, 24, 200])
def test_header_cut_short(tiny_model, tmp_path, cut):
    path = tmp_path / f"cut{cut}.gguf"
    path.write_bytes(Path(tiny_model("llama")).read_bytes()[:cut])
    expect_error(f"ggspec.load({str(path)!r})", "ggspec.ModelFormatError", "corrupt GGUF")


def test_corrupt_tensor_count(tiny_model, tmp_path):
    data = bytearray(Path(tiny_model("llama")).read_bytes())
    data[8:16] = (2**62).to_bytes(8, "little")  # n_tensors
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(bytes(data))
    expect_error(f"ggspec.load({str(path)!r})", "ggspec.ModelFormatError", "corrupt GGUF")


def test_unknown_architecture(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("llama"), tmp_path / "mystery.gguf", arch="mystery")
    expect_error(f"ggspec.load({path!r})", "ggspec.ModelFormatError", "unsupported architecture 'mystery'", "llama")


def test_missing_tensor(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("qwen3"), tmp_path / "holey.gguf", drop=("blk.1.attn_k_norm.weight",))
    expect_error(f"ggspec.load({path!r})", "ggspec.ModelFormatError", "blk.1.attn_k_norm.weight")


def test_context_overflow(tiny_model):
    path = tiny_model("llama")
    expect_error(f"""
t = ggspec.load({path!r}, n_ctx=64)
t.spec_forward(list(range(3, 40)))
t.spec_forward(list(range(3, 40)))""", "ggspec.ContextOverflowError", "exceeds the context of 64")


def test_state_survives_an_overflow(tiny_model):
    proc = run_isolated(f"""
        import ggspec
        t = ggspec.load({tiny_model("llama")!r}, n_ctx=64)
        t.spec_forward(list(range(3, 40)))
        try:
            t.spec_forward(list(range(3, 40)))
        except ggspec.ContextOverflowError:
            pass
        assert t.cache_seq_len == 37, t.cache_seq_len
        t.spec_forward([5])
        print("OK")
    """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("code,fragment", [
    ("t.spec_forward([1, 99999])", "outside the vocabulary"),
    ("t.spec_forward([-1])", "outside the vocabulary"),
    ("t.spec_forward([])", "at least one token"),
    ("t.spec_forward([1], hidden_layers=[7])", "hidden tap 7"),
    ("t.spec_forward([1], top_k=-2)", "top_k"),
    ("t.spec_forward([1, 2]); t.rewind(5)", "outside [0, 2]"),
])
def test_bad_calls(tiny_model, code, fragment):
    expect_error(f"t = ggspec.load({tiny_model('llama')!r}, n_ctx=64)\n{code}", "ValueError", fragment)


@pytest.mark.parametrize("kwargs,fragment", [
    ("n_ctx=0", "n_ctx must be positive"),
    ("n_threads=0", "n_threads must be at least 1"),
    ("device='tpu9'", "unknown device 'tpu9'"),
    ("kv_type='q3'", "unsupported KV cache type"),
])
def test_bad_load_options(tiny_model, kwargs, fragment):
    expect_error(f"ggspec.load({tiny_model('llama')!r}, {kwargs})", "ValueError", fragment)


def test_sliding_window_rewind_limit(tiny_model):
    # gemma3's ring keeps window + max(prefill chunk, 65) - 1 slots, rounded up to
    # 256: rewinding further back must refuse rather than attend to overwritten rows.
    path = tiny_model("gemma3")
    expect_error(f"""
t = ggspec.load({path!r}, n_ctx=1024, prefill_chunk=64)
t.spec_forward(list(range(3, 300)) * 2)
t.rewind(100)""", "ValueError", "sliding-window cache keeps only positions")
