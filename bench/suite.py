"""Speculative decoding side by side: ggspec against llama.cpp over the prompt suites.

    python -m bench.suite --quick          # one prompt per suite, Gemma, 3 rounds, n=64 (~4 min)
    python -m bench.suite                  # every prompt, every llama.cpp n-gram mode
    python -m bench.suite --draft-pairs    # draft models: each model's F16 target, its Q4_0 draft
    python -m bench.suite_report DIR/runs.json   # redraw the table and plots from a run

--draft-pairs runs real target/draft pairs of the same weights, re-quantized by the
peer build's llama-quantize (bench.variants): the F16 target with its Q4_0 draft.
Its configurations are ggspec plain, ggspec draft (the governor on) and
draft-ungoverned (off: acceptance is the draft's own), llama.cpp plain and
llama.cpp draft-simple (llama-speculative-simple -md, its defaults: 3 drafts, no
confidence gate), with the draft's threads the target's on both sides.

Per model and prompt, each round runs every configuration once, the order rotated
by one each round so that no configuration always follows the same neighbour:
ggspec plain and ggspec n-gram (in this process, the model loaded once),
llama.cpp plain (llama-completion) and llama.cpp's n-gram modes
(llama-speculative-simple --spec-type MODE). Same GGUF, prompt tokens (checked),
threads, context; greedy; EOS ignored. The first prompt of each model gets an
unmeasured warm-up round. Writes DIR/runs.json (every run, with the machine's
copy bandwidth and each model's weight bytes; rewritten after every prompt, so an
interrupted run keeps what it measured), DIR/table.md and DIR/*.png. Stops if
ggspec's configurations disagree on the greedy output.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import ggspec
from bench import spec_run
from bench.bandwidth import copy_bandwidth_gbs, weight_bytes
from bench.compare_decode import model_paths
from bench.harness import rotated, run_in_process, run_once
from bench.peer.commands import completion_cmd, speculative_cmd
from bench.peer.generation_stats import completion_stats, speculative_stats
from bench.peer.peer import FLAVORS, peer_tokenize
from bench.spec_prompts import CANNOT_PAY, SUITES, Prompt
from ggspec.engine.stats import PHASES

LLAMA_MODES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
QUICK_LLAMA_MODES = ("ngram-simple",)
QUICK_MODELS = ("gemma3-270m-q4_k_m",)  # ggspec's default model; both models take ~6 min
GGSPEC_SPECULATOR = {"plain": "none", "ngram": "ngram", "garbage": "garbage", "draft": "draft",
                     "draft-ungoverned": "draft"}
DRAFT_PAIR = ("f16", "q4_0")  # --draft-pairs: the target's type and the draft's


@dataclass(frozen=True)
class Config:
    engine: str  # "ggspec" or "llama.cpp"
    name: str    # "plain", "ngram", "garbage", or a llama.cpp --spec-type

    @property
    def label(self) -> str:
        return f"{self.engine} {self.name}"


def configs_for(prompt: Prompt, modes: tuple[str, ...], garbage: bool, draft_model: str | None = None) -> list[Config]:
    if draft_model is not None:
        return [Config("ggspec", c) for c in ("plain", "draft", "draft-ungoverned")] + \
            [Config("llama.cpp", m) for m in ("plain", "draft-simple")]
    ours = ["plain", "ngram"] + (["garbage"] if garbage and prompt.kind == CANNOT_PAY else [])
    return [Config("ggspec", c) for c in ours] + [Config("llama.cpp", m) for m in ("plain", *modes)]


def ggspec_run(model: ggspec.Model, prompt: Prompt, config: Config, n: int, draft_model: str | None = None) -> dict:
    result, wall_s, other_cores = run_in_process(
        lambda: spec_run.run(model, prompt.name, GGSPEC_SPECULATOR[config.name], n,
                             governor=config.name != "draft-ungoverned", draft_model=draft_model))
    s = result.stats
    calls = s["verify_steps"] + s["plain_steps"]
    # the first token comes with the prompt's forward, the rest from `calls`
    return {"tokens_per_second": s["gen_tokens_per_second"], "call_tokens": len(result.tokens) - 1,
            "target_calls": calls, "ms_per_call": 1000.0 * s["gen_seconds"] / calls,
            "draft_n": s["draft_n"], "draft_n_accepted": s["draft_n_accepted"], "verify_steps": s["verify_steps"],
            "phases_ms": {p: s[f"{p}_ms"] for p in PHASES}, "gen_ms": 1000.0 * s["gen_seconds"],
            "phase_sum_over_gen": sum(s[f"{p}_ms"] for p in PHASES) / (1000.0 * s["gen_seconds"]),
            "draft_n_per_position": s["draft_n_per_position"],
            "draft_n_accepted_per_position": s["draft_n_accepted_per_position"],
            "governor_parked_steps": s["governor_parked_steps"], "wall_s": wall_s, "other_cores": other_cores,
            "output": result.tokens}


def llama_run(path: str, text: str, config: Config, n: int, threads: int, ctx: int,
              draft_model: str | None = None, flavor: str = "wheel") -> dict:
    if config.name == "plain":
        cmd, parse = completion_cmd(path, text, n, threads, ctx, flavor=flavor), completion_stats
    else:
        cmd = speculative_cmd(path, text, config.name, n, threads, ctx, flavor=flavor,
                              draft_model=draft_model if config.name == "draft-simple" else None)
        parse = speculative_stats
    record = run_once(cmd, None)
    return {**parse(record["stdout_tail"] + record["stderr_tail"]), "wall_s": record["wall_s"],
            "other_cores": record["other_cores"]}


def run_prompt(model: ggspec.Model, path: str, prompt: Prompt, configs: list[Config], rounds: int, n: int,
               warmup: bool, progress, max_other_cores: float | None = None, retries: int = 2,
               draft_model: str | None = None, flavor: str = "wheel") -> list[dict]:
    """Every configuration once per round. A run during which other processes kept more
    than max_other_cores cores busy is redone, up to `retries` times (the last try stands).
    Stops if ggspec's configurations do not all emit the same (greedy) tokens."""
    text = spec_run.prompt_text(model, prompt.name)
    ids = spec_run.prompt_ids(model, prompt.name)
    if peer_tokenize(path, text) != ids:
        raise SystemExit(f"{path} / {prompt.name}: llama.cpp tokenizes the prompt differently")
    threads, ctx = model.target.n_threads, model.n_ctx
    records = []
    reference_output = None  # greedy: every ggspec configuration must emit the same tokens
    for round_ in range(-1 if warmup else 0, rounds):
        for config in rotated(configs, round_):
            for attempt in range(retries + 1):
                if config.engine == "ggspec":
                    r = ggspec_run(model, prompt, config, n, draft_model)
                else:
                    r = llama_run(path, text, config, n, threads, ctx, draft_model, flavor)
                disturbed = max_other_cores is not None and (r["other_cores"] or 0.0) > max_other_cores
                progress(f"{'warm-up' if round_ < 0 else f'round {round_ + 1}/{rounds}'} {config.label}: "
                         f"{r['tokens_per_second']:.1f} tok/s ({r['wall_s']:.1f} s wall, other load "
                         f"{r['other_cores'] or 0:.2f} cores{', redone' if disturbed and attempt < retries else ''})")
                if not disturbed:
                    break
            r["redone"] = attempt
            if config.engine == "ggspec":
                output = r.pop("output")
                reference_output = reference_output or output
                if output != reference_output:
                    raise SystemExit(f"{path} / {prompt.name}: {config.label} changed the greedy output")
            if round_ >= 0:
                records.append({"suite": prompt.suite, "prompt": prompt.name, "kind": prompt.kind,
                                "prompt_tokens": len(ids), "engine": config.engine, "config": config.name,
                                "round": round_, **r})
    return records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help=f"the first prompt of each suite, llama.cpp mode {', '.join(QUICK_LLAMA_MODES)}, n=64, "
                        f"model {', '.join(QUICK_MODELS)} unless --models says otherwise")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds (pairs) per prompt")
    p.add_argument("-n", type=int, help="tokens per generation (default 256; 64 with --quick)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=2048)
    p.add_argument("--models", nargs="*", help="subset of model names (default: all; --quick: Gemma)")
    p.add_argument("--suites", nargs="*", choices=list(SUITES), help="subset of suites")
    p.add_argument("--prompts", nargs="*", help="subset of prompt names")
    p.add_argument("--modes", nargs="*", help="llama.cpp n-gram modes (default: all; --quick: ngram-simple)")
    p.add_argument("--draft-pairs", action="store_true",
                   help=f"each model's {DRAFT_PAIR[0].upper()} target with its {DRAFT_PAIR[1].upper()} draft "
                        "(bench.variants): ggspec's draft model against llama.cpp's draft-simple")
    p.add_argument("--flavor", choices=FLAVORS, default="wheel",
                   help="llama.cpp's build: wheel (the same ggml as ggspec's, default) or usual (OpenMP, "
                        "llamafile, repacking: what its users run)")
    p.add_argument("--garbage", action="store_true",
                   help="add ggspec with a drafter of random tokens (governor on) on the prompts that cannot pay")
    p.add_argument("--max-other-cores", type=float, default=0.25,
                   help="redo a run while other processes kept more cores than this busy (negative: never)")
    p.add_argument("--retries", type=int, default=2, help="redos per run at most")
    p.add_argument("--out-dir", default="bench/results/suite")
    args = p.parse_args()
    n = args.n or (64 if args.quick else 256)
    modes = tuple(args.modes if args.modes is not None else QUICK_LLAMA_MODES if args.quick else LLAMA_MODES)
    models = args.models or (QUICK_MODELS if args.quick else None)
    prompts = [pr for name, suite in SUITES.items() if not args.suites or name in args.suites
               for pr in (suite.prompts[:1] if args.quick else suite.prompts)
               if not args.prompts or pr.name in args.prompts]

    started = time.time()
    meta = {"threads": args.threads, "n": n, "ctx": args.ctx, "rounds": args.rounds, "quick": args.quick,
            "max_other_cores": args.max_other_cores, "llama_flavor": args.flavor,
            "llama_modes": list(modes), "machine": platform.processor() or platform.machine(),
            "copy_bandwidth_gbs": copy_bandwidth_gbs(args.threads), "models": {}}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []

    def save(complete: bool) -> None:
        # after every prompt, so that an interrupted run keeps what it measured
        meta.update(seconds=time.time() - started, complete=complete)
        (out / "runs.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1))

    for model_name, path in model_paths().items():
        if models and model_name not in models:
            continue
        draft_model = None
        if args.draft_pairs:
            from bench.variants import variant

            path, draft_model = str(variant(path, DRAFT_PAIR[0])), str(variant(path, DRAFT_PAIR[1]))
            meta["draft_models"] = {**meta.get("draft_models", {}),
                                    model_name: {"path": draft_model, "weight_bytes": weight_bytes(draft_model)}}
        meta["models"][model_name] = {"path": path, "weight_bytes": weight_bytes(path)}
        model = ggspec.Model(path, n_ctx=args.ctx, n_threads=args.threads)
        for i, prompt in enumerate(prompts):
            print(f"{model_name} / {prompt.suite} / {prompt.name}", flush=True)
            configs = configs_for(prompt, modes, args.garbage, draft_model)
            for record in run_prompt(model, path, prompt, configs, args.rounds,
                                     n, warmup=i == 0, progress=lambda line: print("  " + line, flush=True),
                                     max_other_cores=args.max_other_cores if args.max_other_cores >= 0 else None,
                                     retries=args.retries, draft_model=draft_model, flavor=args.flavor):
                runs.append({"model": model_name, **record})
            save(complete=False)
        del model
    save(complete=True)

    from bench.suite_report import write_report

    for written in write_report(meta, runs, out):
        print(f"wrote {written}")
    print(f"{meta['seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
