"""`ggspec info MODEL`: what a file is and what ggspec can do with it."""

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO
from tests.fixtures.tiny_dflash import write_tiny_dflash
from tests.fixtures.tiny_qwen35 import write_tiny_qwen35
from tests.test_bad_input import copy_gguf


def info(*args):
    proc = subprocess.run([sys.executable, "-m", "ggspec", "info", *args], capture_output=True, text=True,
                          timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_json_names_the_shape_the_types_and_the_spec_types(tiny_model):
    out = json.loads(info(tiny_model("llama", "q8_0"), "--json"))
    assert {"architecture", "layers", "context_length", "tokenizer", "types", "drafters", "spec_types",
            "refused"} <= out.keys()
    assert (out["architecture"], out["layers"], out["context_length"]) == ("llama", 2, 1024)
    assert out["tokenizer"]["model"] == "llama" and out["tokenizer"]["tokens"] == 320
    # 7 matrices and 2 norms per layer, token_embd and output_norm (tied: no output.weight)
    assert out["types"] == {"Q8_0": 2 * 7 + 1, "F32": 2 * 2 + 1}
    assert out["spec_types"] == ["auto (ngram)", "ngram", "draft (with --draft-model)", "block (with --draft-model)"]
    assert out["drafters"] == [] and out["refused"] == []


def test_a_model_with_a_head_offers_draft_head(tmp_path):
    out = json.loads(info(str(write_tiny_qwen35(tmp_path / "q35.gguf")), "--json"))
    assert out["drafters"] == ["MTP/NextN head (1 block)"]
    assert out["spec_types"][:3] == ["auto (draft-head)", "ngram", "draft-head"]


def test_what_is_refused_says_why(tiny_model, tmp_path):
    path = copy_gguf(tiny_model("qwen3"), tmp_path / "freqs.gguf", tensors={"rope_freqs.weight": np.ones(16, np.float32)})
    out = json.loads(info(path, "--json"))
    assert out["architecture"] == "qwen3" and out["spec_types"] == []
    assert len(out["refused"]) == 1 and "rope_freqs.weight" in out["refused"][0]
    assert "refused:        " in info(path) and "RoPE frequency factors" in info(path)


def test_a_drafter_file_is_described_as_one(tmp_path):
    from tests.fixtures.tiny_eagle3 import write_tiny_eagle3

    out = json.loads(info(str(write_tiny_dflash(tmp_path / "d.gguf")), "--json"))
    assert out["architecture"] == "dflash" and out["spec_types"] == ["block"] and "drafter" in out["drafters"][0]
    out = json.loads(info(str(write_tiny_eagle3(tmp_path / "e.gguf")), "--json"))
    assert out["architecture"] == "eagle3" and out["spec_types"] == ["draft-head"]
    assert out["drafters"] == ["eagle3 drafter for draft-head (attach it with --draft-model to a target)"]


def test_the_text_form_has_one_line_per_fact(tiny_model):
    lines = info(tiny_model("gemma3", "f16")).splitlines()
    assert [line.split(":")[0] for line in lines] == ["file", "architecture", "layers", "tokenizer", "types",
                                                      "drafters", "--spec-type", "refused"]
