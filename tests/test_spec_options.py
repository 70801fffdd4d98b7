"""The operator surface: flags beat environment variables, aliases map, bad values fail clearly."""

import argparse
import json

import pytest

from ggspec.engine.planner import plan_speculation
from ggspec.speculators.registry import SpeculatorOptions, SpeculatorRegistry, registry
from ggspec.speculators.options import SpecOptions, add_spec_arguments, spec_options_from
from tests.test_cli import assert_clear_failure, ggspec


def options(argv=(), env=None):
    parser = argparse.ArgumentParser()
    add_spec_arguments(parser)
    return spec_options_from(parser.parse_args(list(argv)), env or {})


def test_defaults():
    assert options() == SpecOptions(enabled=True, spec_type="auto", draft=None, pmin=None, draft_model=None,
                                    governor=True, accept="match")


def test_every_flag_and_its_variable():
    env = {"GGSPEC_SPEC": "off", "GGSPEC_SPEC_TYPE": "ngram", "GGSPEC_SPEC_DRAFT": "7", "GGSPEC_SPEC_PMIN": "0.5",
           "GGSPEC_SPEC_DRAFT_MODEL": "d.gguf", "GGSPEC_SPEC_GOVERNOR": "0", "GGSPEC_SPEC_ACCEPT": "rejection"}
    from_env = SpecOptions(False, "ngram", 7, 0.5, "d.gguf", False, "rejection")
    assert options(env=env) == from_env
    argv = ["--spec", "--spec-type", "block", "--spec-draft", "3", "--spec-pmin", "0.25",
            "--spec-draft-model", "f.gguf", "--spec-governor", "on", "--spec-accept", "match"]
    assert options(argv, env) == SpecOptions(True, "block", 3, 0.25, "f.gguf", True, "match")  # flags win


def test_historical_spellings():
    assert options(["--mtp-spec", "--mtp-draft", "5", "--mtp-pmin", "0.1", "--mtp-draft-model", "m.gguf"]) == \
        SpecOptions(draft=5, pmin=0.1, draft_model="m.gguf")
    assert options(["--draft-model", "x.gguf"]).draft_model == "x.gguf"
    env = {"GGSPEC_MTP_SPEC": "0", "GGSPEC_MTP_DRAFT": "4", "GGSPEC_MTP_PMIN": "0.3", "GGSPEC_MTP_DRAFT_MODEL": "m"}
    assert options(env=env) == SpecOptions(enabled=False, draft=4, pmin=0.3, draft_model="m")
    # the new name beats the historical one; only those four have GGSPEC_MTP_* spellings
    assert options(env={"GGSPEC_SPEC_DRAFT": "9", "GGSPEC_MTP_DRAFT": "4"}).draft == 9
    assert options(env={"GGSPEC_MTP_TYPE": "ngram", "GGSPEC_MTP_GOVERNOR": "off"}) == SpecOptions()


def test_comparison_switches_come_from_the_environment_only():
    env = {"GGSPEC_MTP_FOLD_CATCHUP": "0", "GGSPEC_DFLASH_CONV": "0", "GGSPEC_DFLASH_SELECTOR": "off",
           "GGSPEC_DFLASH_FUSED": "0"}
    switched = SpecOptions.from_environment(env)
    assert switched == SpecOptions(mtp_fold_catch_up=False, dflash_conv=False, dflash_selector=False,
                                   dflash_fused=False)
    assert switched.speculator_options().fold_catch_up is False
    assert switched.drafter_switches() == {"conv": False, "selector": False, "fused": False}
    assert SpecOptions.from_environment({}) == SpecOptions()


@pytest.mark.parametrize("variable,value", [("GGSPEC_SPEC_DRAFT", "0"), ("GGSPEC_SPEC_DRAFT", "65"),
                                            ("GGSPEC_SPEC_PMIN", "1.5"), ("GGSPEC_SPEC", "maybe"),
                                            ("GGSPEC_SPEC_TYPE", "medusa"), ("GGSPEC_MTP_DRAFT", "x")])
def test_bad_variables_name_themselves(variable, value):
    with pytest.raises(ValueError, match=variable):
        options(env={variable: value})


@pytest.mark.parametrize("argv", [["--spec-draft", "0"], ["--spec-draft", "99"], ["--spec-pmin", "-1"],
                                  ["--spec-type", "medusa"], ["--spec-governor", "sometimes"],
                                  ["--spec-accept", "always"], ["--spec", "--no-spec"]])
def test_bad_flags_are_refused(argv):
    with pytest.raises(SystemExit):
        options(argv)


def test_the_registry_explains_declines():
    assert registry.names() == ["auto", "ngram", "draft-head", "draft", "block"]
    assert registry.needs_drafter("draft-head") and not registry.needs_drafter("ngram")
    assert registry.resolve("auto", object()) == "ngram"
    speculator, reason = registry.create("draft-head", object(), SpeculatorOptions())
    assert speculator is None and "no draft head" in reason
    plan = plan_speculation(object(), SpecOptions(spec_type="block"))
    assert plan.speculator is None and "no block drafter" in plan.decline_reason
    assert plan.new_stats().spec_type == "none"
    plan = plan_speculation(object(), SpecOptions(spec_type="draft"))
    assert plan.speculator is None and "no draft model" in plan.decline_reason
    with pytest.raises(ValueError, match="unknown speculator 'medusa'"):
        SpeculatorRegistry().create("medusa", object(), None)


def test_a_declined_algorithm_runs_plain_and_says_why(tiny_model):
    path = tiny_model("llama", "q8_0")
    proc = ggspec("generate", "-m", path, "-p", "a b c", "-n", "8", "--temp", "0", "--spec-type", "draft-head")
    assert proc.returncode == 0, proc.stderr
    assert "speculation declined (draft-head: no draft head" in proc.stderr
    out = json.loads(ggspec("generate", "-m", path, "-p", "a b c", "-n", "8", "--temp", "0", "--json",
                            "--spec-type", "draft-head").stdout)
    assert out["stats"]["spec_type"] == "none" and "no draft head" in out["stats"]["decline_reason"]
    plain = json.loads(ggspec("generate", "-m", path, "-p", "a b c", "-n", "8", "--temp", "0", "--json",
                              "--no-spec").stdout)
    assert out["tokens"] == plain["tokens"]


def test_bad_spec_input_fails_in_one_line(tiny_model, tmp_path):
    path = tiny_model("llama", "q8_0")
    assert_clear_failure(ggspec("generate", "-m", path, "-p", "x", "--spec-draft", "99"), "--spec-draft")
    assert_clear_failure(ggspec("generate", "-m", path, "-p", "x", env={"GGSPEC_SPEC_DRAFT": "0"}),
                         "GGSPEC_SPEC_DRAFT")
    assert_clear_failure(ggspec("generate", "-m", path, "-p", "x", "--spec-draft-model", str(tmp_path / "d.gguf")),
                         "draft model not found")
    odd = tiny_model("llama", "f32", metadata=(("general.architecture", "bert"),))
    assert_clear_failure(ggspec("generate", "-m", path, "-p", "x", "--draft-model", odd), "not a drafter")
