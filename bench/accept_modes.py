"""Acceptance of a draft model's drafts, match mode against rejection mode, sampled.

    python -m bench.accept_modes                   # each model's F16 target with its Q4_0 draft
    python -m bench.accept_modes --models smollm2-135m-q4_1 --seeds 0 1 2 -n 96
    python -m bench.accept_modes --draft-type q4_k_m        # another 4-bit draft of the same weights

Match mode keeps a draft when the target's own (seed, position) draw equals it:
a draft of the draft's argmax lands with probability p(d). Rejection mode draws
each draft from q (the request's chain over the draft's row) and keeps it with
probability min(1, p/q), so it lands with probability sum(min(p, q)), which is
higher wherever the two models agree on more than their top token. Per model,
every prompt of the suites (its first --prompts-per-suite) and seed runs once in
each mode, the governor off (acceptance is the draft's own), at llama.cpp's
default chain (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05). Prints a table
of pooled acceptance (accepted / drafted) and the median tokens/s per mode.
"""

from __future__ import annotations

import argparse
import statistics

import ggspec
from bench import spec_run
from bench.compare_decode import model_paths
from bench.spec_prompts import SUITES
from bench.suite import DRAFT_PAIR
from bench.variants import variant
from ggspec.speculators.options import SpecOptions

MODES = ("match", "rejection")


def measure(target: str, draft: str, prompts: list[str], seeds: list[int], n: int, threads: int,
            temperature: float, pmin: float | None = None) -> dict[str, dict]:
    model = ggspec.Model(target, n_ctx=2048, n_threads=threads)
    out = {mode: {"drafted": 0, "accepted": 0, "tps": []} for mode in MODES}
    with ggspec.Engine(model) as engine:
        engine.submit([1, 2, 3], max_tokens=4, spec=SpecOptions(draft_model=draft, governor=False)).result  # warm-up
        for name in prompts:
            ids = spec_run.prompt_ids(model, name)
            for seed in seeds:
                for mode in MODES:
                    r = engine.submit(ids, max_tokens=n, temperature=temperature, seed=seed, ignore_eos=True,
                                      spec=SpecOptions(draft_model=draft, governor=False, accept=mode,
                                                       pmin=pmin)).result
                    out[mode]["drafted"] += r.stats["draft_n"]
                    out[mode]["accepted"] += r.stats["draft_n_accepted"]
                    out[mode]["tps"].append(r.stats["gen_tokens_per_second"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", help="subset of model names (default: all)")
    p.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    p.add_argument("--prompts-per-suite", type=int, default=1)
    p.add_argument("-n", type=int, default=64)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--pmin", type=float, help="the draft's confidence gate (default: the draft model's, 0.5)")
    p.add_argument("--draft-type", default=DRAFT_PAIR[1], help=f"the draft's type (default {DRAFT_PAIR[1]})")
    args = p.parse_args()
    prompts = [pr.name for suite in SUITES.values() for pr in suite.prompts[:args.prompts_per_suite]]
    print(f"{len(prompts)} prompts x {len(args.seeds)} seeds, {args.n} tokens, temperature {args.temperature}, "
          f"{args.threads} threads, governor off, pmin {args.pmin if args.pmin is not None else 'default'}")
    print("| pair | mode | acceptance | drafted | tok/s (median) |")
    print("|---|---|---|---|---|")
    for name, path in model_paths().items():
        if args.models and name not in args.models:
            continue
        # llama-quantize writes the same bits in either peer build: the test command's (wheel) will do
        target = str(variant(path, DRAFT_PAIR[0], flavor="wheel"))
        draft = str(variant(path, args.draft_type, flavor="wheel"))
        result = measure(target, draft, prompts, args.seeds, args.n, args.threads, args.temperature, args.pmin)
        for mode in MODES:
            r = result[mode]
            print(f"| {name} {DRAFT_PAIR[0].upper()} / {args.draft_type.upper()} | {mode} | "
                  f"{r['accepted'] / max(1, r['drafted']):.3f} | {r['drafted']} | "
                  f"{statistics.median(r['tps']):.1f} |", flush=True)


if __name__ == "__main__":
    main()
