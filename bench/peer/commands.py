"""Pinned llama.cpp plain-decode command lines, and the metric spec that reads each one.

Pinned: threads, context, flash attention off, weight repacking off, greedy, EOS
ignored (always n tokens), no conversation mode, no auto-fitting of parameters.

    python -m bench.peer.commands completion --model M.gguf   # prints a shell command
"""

from __future__ import annotations

import argparse
import os
import shlex

from bench.peer.peer import FLAVORS, tool

# This llama.cpp prints the decode line from common_perf_print (llama-completion) or
# llama_perf_context_print (examples), after a timestamp when stderr is not a tty;
# `\w+:\s+eval` skips the "prompt eval time" line.
COMPLETION_EVAL_TPS = r"\w+:\s+eval time =.*?([\d.]+) tokens per second"
# llama-bench -o json prints one object per test; with -p 0 the only test is tg<n>.
BENCH_TG_TPS = "json:0.avg_ts"

DEFAULT_PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time,"


def _generation_args(model, prompt: str, n_predict: int, threads: int, ctx: int) -> list[str]:
    return [
        "-m", str(model),
        "-p", prompt,
        "-n", str(n_predict),
        "-t", str(threads),
        "-tb", str(threads),
        "-c", str(ctx),
        "-fa", "off",
        "--no-repack",
        "-fit", "off",
        "--temp", "0",
        "--seed", "0",
        "--ignore-eos",
    ]  # fmt: skip


def completion_cmd(
    model: str | os.PathLike,
    prompt: str = DEFAULT_PROMPT,
    n_predict: int = 128,
    threads: int = 2,
    ctx: int = 512,
    flavor: str = "wheel",
    extra: tuple[str, ...] = (),
) -> list[str]:
    return [str(tool("llama-completion", flavor)), *_generation_args(model, prompt, n_predict, threads, ctx),
            "-no-cnv", *extra]


def speculative_cmd(
    model: str | os.PathLike,
    prompt: str,
    spec_type: str,
    n_predict: int = 256,
    threads: int = 2,
    ctx: int = 2048,
    flavor: str = "wheel",
    draft_model: str | os.PathLike | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """llama-speculative-simple with one of llama.cpp's modes: the n-gram ones (ngram-*), or
    draft-simple with a draft model (its threads the target's, its other settings llama.cpp's
    defaults)."""
    draft = [] if draft_model is None else ["-md", str(draft_model), "-td", str(threads), "-tbd", str(threads)]
    return [str(tool("llama-speculative-simple", flavor)), *_generation_args(model, prompt, n_predict, threads, ctx),
            "--spec-type", spec_type, *draft, *extra]


def bench_cmd(
    model: str | os.PathLike,
    n_gen: int = 128,
    threads: int = 2,
    reps: int = 5,
    flavor: str = "wheel",
    extra: tuple[str, ...] = (),
) -> list[str]:
    return [
        str(tool("llama-bench", flavor)),
        "-m", str(model),
        "-t", str(threads),
        "-p", "0",
        "-n", str(n_gen),
        "-r", str(reps),
        "-fa", "off",
        "--repack", "0",
        "-o", "json",
        *extra,
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("completion", "bench"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--flavor", choices=FLAVORS, default="wheel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("-n", type=int, default=128, help="tokens to generate")
    args = parser.parse_args()
    if args.kind == "completion":
        cmd = completion_cmd(args.model, n_predict=args.n, threads=args.threads, flavor=args.flavor)
    else:
        cmd = bench_cmd(args.model, n_gen=args.n, threads=args.threads, flavor=args.flavor)
    print(shlex.join(cmd))


if __name__ == "__main__":
    main()
