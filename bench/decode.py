"""ggspec's plain greedy decode as a benchmark command: prints one JSON object.

    python -m bench.decode --model M.gguf --prompt "..." -n 128 -t 2 -c 512

The prompt is tokenized by the llama.cpp peer so that both engines start from
the same token ids. Timings cover prompt processing and generation only, the
way llama.cpp's eval time does (model load and warm-up excluded).
"""

from __future__ import annotations

import argparse
import json
import time

import ggspec
from bench.peer.commands import DEFAULT_PROMPT
from bench.peer.peer import peer_tokenize
from ggspec.engine.execution import SpeculativeExecution
from ggspec.engine.sampling import Sampler, SamplerConfig


def timed_generation(execution: SpeculativeExecution, prompt: list[int], n: int) -> tuple[list[int], float, float]:
    """Runs a generation; returns (generated ids, prompt seconds, generation seconds for
    the steps after the prompt's own token)."""
    out: list[int] = []
    t0 = time.perf_counter()
    for step in execution.generate(prompt, n):
        if not out:
            t1 = time.perf_counter()
        out += step
    return out, t1 - t0, time.perf_counter() - t1


def greedy_decode(target: ggspec.Target, prompt: list[int], n: int) -> tuple[list[int], float, float]:
    """timed_generation with ggspec's plain greedy loop, from an empty cache."""
    execution = SpeculativeExecution(target, Sampler(SamplerConfig(temperature=0), target.n_vocab))
    target.reset()
    return timed_generation(execution, prompt, n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("-n", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=512)
    args = p.parse_args()

    prompt = peer_tokenize(args.model, args.prompt)
    target = ggspec.load(args.model, n_ctx=args.ctx, n_threads=args.threads)
    greedy_decode(target, prompt, 8)  # warm-up: page in the weights, build the graphs
    tokens, t_prompt, t_gen = greedy_decode(target, prompt, args.n)
    print(json.dumps({
        "prompt_tokens": len(prompt),
        "gen_tokens": len(tokens),
        "prompt_tokens_per_second": len(prompt) / t_prompt,
        "gen_tokens_per_second": (len(tokens) - 1) / t_gen,
        "graph_builds": target.graph_builds,
        "tokens": tokens,
    }))


if __name__ == "__main__":
    main()
