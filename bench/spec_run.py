"""One ggspec generation as a benchmark command: prints the result's JSON (stats
included) on stdout.

    python -m bench.spec_run --model M.gguf --prompt doc-repeat --speculator ngram -n 256

--speculator: none (plain), ngram, auto, draft (--draft-model, a smaller model of
the same vocabulary), or garbage (a drafter that proposes random tokens, to show
what the cost governor saves). The prompt is a name from
bench.spec_prompts, in its chat form when the model has a chat template.
"""

from __future__ import annotations

import argparse
import json

import ggspec
from bench.spec_prompts import by_name
from ggspec.engine.governor import SpeculationCostGovernor
from ggspec.engine.planner import SpeculationPlan
from ggspec.speculators.options import SpecOptions


def prompt_ids(model: ggspec.Model, name: str) -> list[int]:
    p = by_name(name)
    return model.encode_chat(p.chat) if model.has_chat_template else model.encode_prompt(p.raw)


def prompt_text(model: ggspec.Model, name: str) -> str:
    """What to hand llama.cpp so that it tokenizes to the same ids (checked by the caller)."""
    p = by_name(name)
    return model.chat_text(p.chat) if model.has_chat_template else p.raw


def run(model: ggspec.Model, name: str, speculator: str, n: int, governor: bool = True, on_token=None,
        draft_model: str | None = None):
    ids = prompt_ids(model, name)
    options = SpecOptions(enabled=speculator != "none", spec_type="auto" if speculator == "garbage" else
                          speculator if speculator != "none" else "auto", governor=governor,
                          draft_model=draft_model)
    spec = options
    if speculator == "garbage":
        from tests.fixtures.scripted import GarbageSpeculator

        spec = SpeculationPlan(GarbageSpeculator(model.target.n_vocab, window=8), SpeculationCostGovernor(governor),
                               options)
    with ggspec.Engine(model) as engine:
        return engine.submit(ids, max_tokens=n, temperature=0, ignore_eos=True, spec=spec, on_token=on_token).result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--speculator", default="ngram", choices=["none", "ngram", "auto", "draft", "garbage"])
    p.add_argument("--draft-model", help="a draft model's GGUF (--speculator draft)")
    p.add_argument("--governor", default="on", choices=["on", "off"])
    p.add_argument("-n", type=int, default=256)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=2048)
    args = p.parse_args()
    model = ggspec.Model(args.model, n_ctx=args.ctx, n_threads=args.threads)
    r = run(model, args.prompt, args.speculator, args.n, args.governor == "on", draft_model=args.draft_model)
    print(json.dumps({"stats": r.stats, "n_tokens": len(r.tokens), "n_prompt_tokens": len(r.prompt_tokens)}))


if __name__ == "__main__":
    main()
