"""The operator surface for speculation: flags, their environment variables, and
the historical --mtp-* spellings. A flag beats its environment variable; an
out-of-range value is an error that names the flag or variable it came from.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Callable, Mapping

from ggspec.speculators.registry import SpeculatorOptions, registry

SPEC_TYPES = tuple(registry.names())
ACCEPT_MODES = ("match", "rejection")  # engine.acceptance implements them
MAX_DRAFT = 64


@dataclass(frozen=True)
class SpecOptions:
    enabled: bool = True
    spec_type: str = "auto"
    draft: int | None = None        # cap on the draft window; None = per algorithm
    pmin: float | None = None       # confidence gate; None = per algorithm
    draft_model: str | None = None  # a drafter GGUF; its general.architecture says what it is
    governor: bool = True
    accept: str = "match"
    draft_threads: int | None = None  # a draft model's threads; None = the target's
    # comparison switches (GGSPEC_MTP_FOLD_CATCHUP, GGSPEC_DFLASH_*): the head's catch-up
    # folded into its first step; DFlash2's conv and selector; the drafter's one-graph passes
    mtp_fold_catch_up: bool = True
    dflash_conv: bool = True
    dflash_selector: bool = True
    dflash_fused: bool = True

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "SpecOptions":
        """The options the GGSPEC_SPEC_* (and GGSPEC_MTP_*) variables give."""
        return spec_options_from(None, environ)

    def speculator_options(self) -> SpeculatorOptions:
        return SpeculatorOptions(max_draft_tokens=self.draft, min_draft_prob=self.pmin,
                                 fold_catch_up=self.mtp_fold_catch_up)

    def drafter_switches(self) -> dict[str, bool]:
        """Target.attach_drafter's switches."""
        return {"conv": self.dflash_conv, "selector": self.dflash_selector, "fused": self.dflash_fused}

    def __post_init__(self):
        _check("spec_type", self.spec_type, SPEC_TYPES)
        _check("accept", self.accept, ACCEPT_MODES)
        if self.draft is not None and not 1 <= self.draft <= MAX_DRAFT:
            raise ValueError(f"spec draft window must be in 1..{MAX_DRAFT}, got {self.draft}")
        if self.pmin is not None and not 0.0 <= self.pmin <= 1.0:
            raise ValueError(f"spec pmin must be in [0, 1], got {self.pmin}")
        if self.draft_threads is not None and (isinstance(self.draft_threads, bool) or
                                               not isinstance(self.draft_threads, int) or self.draft_threads < 1):
            raise ValueError(f"draft threads must be a positive integer, got {self.draft_threads!r}")


def _check(what: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "on", "true", "yes"):
        return True
    if lowered in ("0", "off", "false", "no"):
        return False
    raise ValueError(f"expected on/off, got {text!r}")


def _draft(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_DRAFT:
        raise ValueError(f"must be in 1..{MAX_DRAFT}, got {value}")
    return value


def _threads(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def _pmin(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be in [0, 1], got {value}")
    return value


def _choice(allowed) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return text
    return parse


# field → (parse, environment variables, newest first). Only four fields have
# historical GGSPEC_MTP_* spellings; the comparison switches have no flags.
_ENV: dict[str, tuple[Callable[[str], object], tuple[str, ...]]] = {
    "enabled": (_boolean, ("GGSPEC_SPEC", "GGSPEC_MTP_SPEC")),
    "spec_type": (_choice(SPEC_TYPES), ("GGSPEC_SPEC_TYPE",)),
    "draft": (_draft, ("GGSPEC_SPEC_DRAFT", "GGSPEC_MTP_DRAFT")),
    "pmin": (_pmin, ("GGSPEC_SPEC_PMIN", "GGSPEC_MTP_PMIN")),
    "draft_model": (str, ("GGSPEC_SPEC_DRAFT_MODEL", "GGSPEC_MTP_DRAFT_MODEL")),
    "draft_threads": (_threads, ("GGSPEC_SPEC_DRAFT_THREADS",)),
    "governor": (_boolean, ("GGSPEC_SPEC_GOVERNOR",)),
    "accept": (_choice(ACCEPT_MODES), ("GGSPEC_SPEC_ACCEPT",)),
    "mtp_fold_catch_up": (_boolean, ("GGSPEC_MTP_FOLD_CATCHUP",)),
    "dflash_conv": (_boolean, ("GGSPEC_DFLASH_CONV",)),
    "dflash_selector": (_boolean, ("GGSPEC_DFLASH_SELECTOR",)),
    "dflash_fused": (_boolean, ("GGSPEC_DFLASH_FUSED",)),
}


def _argparse_type(parse: Callable[[str], object]) -> Callable[[str], object]:
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert


def add_spec_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("speculative decoding (each flag beats its environment variable)")
    on = g.add_mutually_exclusive_group()
    on.add_argument("--spec", "--mtp-spec", dest="spec_enabled", action="store_const", const=True,
                    help="speculative decoding on (default; GGSPEC_SPEC)")
    on.add_argument("--no-spec", dest="spec_enabled", action="store_const", const=False,
                    help="plain decoding")
    g.add_argument("--spec-type", dest="spec_type", type=_argparse_type(_choice(SPEC_TYPES)), metavar="T",
                   help=f"{' | '.join(SPEC_TYPES)} (default auto: the model's drafter, else ngram; GGSPEC_SPEC_TYPE)")
    g.add_argument("--spec-draft", "--mtp-draft", dest="spec_draft", type=_argparse_type(_draft), metavar="N",
                   help=f"cap the draft window, 1..{MAX_DRAFT} (default: per algorithm; GGSPEC_SPEC_DRAFT)")
    g.add_argument("--spec-pmin", "--mtp-pmin", dest="spec_pmin", type=_argparse_type(_pmin), metavar="F",
                   help="confidence gate: 0 for n-gram (scales the match length), 0.75 for a draft head, "
                        "0.5 for a draft model, 0.35 for a block drafter (GGSPEC_SPEC_PMIN)")
    g.add_argument("--spec-draft-model", "--draft-model", "--mtp-draft-model", dest="spec_draft_model",
                   metavar="PATH", help="a drafter GGUF: a smaller language model of the same vocabulary "
                                        "(--spec-type draft), an EAGLE-3 head or a Gemma 4 assistant (draft-head) or a DFlash drafter "
                                        "(block); the file's architecture decides (GGSPEC_SPEC_DRAFT_MODEL)")
    g.add_argument("--threads-draft", "-td", "--spec-draft-threads", dest="spec_draft_threads",
                   type=_argparse_type(_threads), metavar="N",
                   help="a draft model's threads (default: the target's; the two take turns on the same "
                        "cores; GGSPEC_SPEC_DRAFT_THREADS)")
    g.add_argument("--spec-governor", dest="spec_governor", type=_argparse_type(_boolean), metavar="on|off",
                   help="park drafting while it loses (default on; GGSPEC_SPEC_GOVERNOR)")
    g.add_argument("--spec-accept", dest="spec_accept", type=_argparse_type(_choice(ACCEPT_MODES)),
                   metavar="MODE", help="match (default: seed-identical to plain) | rejection (GGSPEC_SPEC_ACCEPT)")


_FLAG_FIELDS = {"enabled": "spec_enabled", "spec_type": "spec_type", "draft": "spec_draft", "pmin": "spec_pmin",
                "draft_model": "spec_draft_model", "draft_threads": "spec_draft_threads",
                "governor": "spec_governor", "accept": "spec_accept"}


def spec_options_from(args: argparse.Namespace | None = None,
                      environ: Mapping[str, str] = os.environ) -> SpecOptions:
    values = {}
    for name, (parse, variables) in _ENV.items():
        flag = getattr(args, _FLAG_FIELDS.get(name, ""), None) if args is not None else None
        if flag is not None:
            values[name] = flag
            continue
        for variable in variables:
            if environ.get(variable, "") != "":
                try:
                    values[name] = parse(environ[variable])
                except ValueError as e:
                    raise ValueError(f"{variable}: {e}") from None
                break
    return SpecOptions(**values)


__all__ = ["SpecOptions", "SPEC_TYPES", "ACCEPT_MODES", "add_spec_arguments", "spec_options_from"]
