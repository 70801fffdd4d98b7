"""Synthetic acceptance (bench/synthetic_acceptance.py) changes what is emitted, so
only benchmarks may use it: no ggspec CLI flag and no environment variable turns it
on, and the package never imports it."""

import json
import re

from tests.conftest import REPO
from tests.test_cli import ggspec

# the names other engines and a careless port would use
SWITCHES = ("GGSPEC_SPEC_SYNTH_RATES", "GGSPEC_SYNTH_RATES", "GGSPEC_SYNTHETIC_ACCEPTANCE",
            "GGSPEC_SPEC_SYNTHETIC", "GGSPEC_MTP_SYNTH_RATES", "LLAMA_ARG_SPEC_SYNTH_RATES")


def package_sources():
    return [*(REPO / "python" / "ggspec").rglob("*.py"), *(REPO / "csrc").rglob("*.[ch]*")]


def test_the_package_never_reaches_it():
    for path in package_sources():
        text = path.read_text()
        assert not re.search(r"^\s*(from|import)\s+bench\b", text, re.M), path
        assert "synth" not in text.lower(), path
        for name in re.findall(r"GGSPEC_[A-Z0-9_]+", text):
            assert "SYNTH" not in name, (path, name)


def test_no_flag_or_environment_variable_turns_it_on(tiny_model):
    common = ["generate", "-m", tiny_model("qwen35", "q8_0"), "-p", "a b c", "--temp", "0", "-n", "24", "-t", "2",
              "-c", "256", "--ignore-eos", "--json"]
    # the governor off: it could park a random head before its first draft, and the test needs drafts
    args = [*common, "--spec-type", "draft-head", "--spec-pmin", "0", "--spec-governor", "off"]
    plain = ggspec(*common, "--no-spec")
    base = ggspec(*args)
    assert plain.returncode == 0 and base.returncode == 0, plain.stderr + base.stderr
    env = {name: "0.9" for name in SWITCHES}
    switched = ggspec(*args, env=env)
    assert switched.returncode == 0, switched.stderr
    runs = [json.loads(p.stdout) for p in (plain, base, switched)]
    assert runs[0]["tokens"] == runs[1]["tokens"] == runs[2]["tokens"]
    # a random head's drafts are never the trunk's tokens: anything accepted was synthetic
    assert runs[1]["stats"]["draft_n"] > 0
    assert runs[1]["stats"]["draft_n_accepted"] == runs[2]["stats"]["draft_n_accepted"] == 0
    flag = ggspec(*args, "--spec-synth-rates", "0.9")
    assert flag.returncode != 0 and "--spec-synth-rates" in flag.stderr
