"""Speed on the part of a generation that copies, speculation on and off.

    python -m bench.copy_part --model M.gguf --prompt prose-then-copy [--rounds 5]
    python -m bench.copy_part --model M.gguf --session [--rounds 4]

For a prompt that starts as prose and turns to copying: the copied part begins at
the first output token from which COPY_RUN tokens repeat a run that ended
before them, in the prompt or in the output (small models copy their own loops;
greedy output is the same with speculation on and off, so both sides split at
the same token). Its speed is the tokens after that point over the time since it
was emitted, taken from each token's emit time. Rounds alternate which side runs
first, in one process; prints medians, the per-round ratios, and where the copy
began.

--session: the same question across two turns of one `ggspec.Session`, for models
that will not turn from prose to copying within one generation: turn 1 is free
prose (prose-essay, 128 tokens), turn 2 asks for the document back (doc-repeat).
The session keeps its KV and its governor across the turns, so turn 2 shows
whether speculation re-arms after prose; each turn's speed comes from its stats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import ggspec
from bench.harness import alternating
from bench.spec_prompts import by_name
from bench.spec_run import prompt_ids, run

COPY_RUN = 16


def copy_start(prompt: list[int], output: list[int]) -> int | None:
    """The first output index from which COPY_RUN tokens repeat a run found earlier in
    the context: in the prompt, or in the output itself (a model that loops copies itself)."""
    context = prompt + output
    seen: set[tuple[int, ...]] = set()
    for begin in range(COPY_RUN, len(context) - COPY_RUN + 1):
        seen.add(tuple(context[begin - COPY_RUN:begin]))  # the runs that end by `begin`
        if begin >= len(prompt) and tuple(context[begin:begin + COPY_RUN]) in seen:
            return begin - len(prompt)
    return None


def timed_generation(model: ggspec.Model, prompt: str, speculate: bool, n: int) -> tuple[list[int], list[float]]:
    """The tokens, and the moment each was emitted."""
    times: list[float] = []
    result = run(model, prompt, "auto" if speculate else "none", n,
                 on_token=lambda _: times.append(time.perf_counter()))
    return result.tokens, times


def session_turns(model: ggspec.Model, speculate: bool, n: int) -> tuple[float, float]:
    """Tokens per second of the prose turn and of the copying turn."""
    chat = model.has_chat_template
    session = ggspec.Session(model, chat=chat, spec=speculate, temperature=0)
    prose, copy = by_name("prose-essay"), by_name("doc-repeat")
    first = session.generate(prose.chat if chat else prose.raw, max_tokens=128, ignore_eos=True)
    second = session.generate(copy.chat if chat else "\n\n" + copy.raw, max_tokens=n, ignore_eos=True)
    return first.stats["gen_tokens_per_second"], second.stats["gen_tokens_per_second"]


def compare_sessions(model: ggspec.Model, rounds: int, n: int) -> dict:
    rates: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    session_turns(model, True, n)  # warm-up: builds the graphs both sides use
    for _, speculate in alternating(rounds, False, True):
        rates[speculate].append(session_turns(model, speculate, n))
    ratio = [[b[i] / a[i] for a, b in zip(rates[False], rates[True])] for i in (0, 1)]
    return {"prose_turn_ratio_median": statistics.median(ratio[0]),
            "copy_turn_ratio_median": statistics.median(ratio[1]),
            "plain_copy_tps": statistics.median(r[1] for r in rates[False]),
            "spec_copy_tps": statistics.median(r[1] for r in rates[True]), "copy_turn_ratios": ratio[1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", default="prose-then-copy")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("-n", type=int, default=256)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--session", action="store_true", help="prose in turn 1, the copy in turn 2 of one Session")
    args = p.parse_args()

    model = ggspec.Model(args.model, n_ctx=4096, n_threads=args.threads)
    if args.session:
        print(json.dumps(compare_sessions(model, args.rounds, args.n), indent=1))
        return
    ids = prompt_ids(model, args.prompt)
    reference, _ = timed_generation(model, args.prompt, False, args.n)  # warm-up, and where the copy starts
    start = copy_start(ids, reference)
    if start is None or start >= args.n - COPY_RUN:
        raise SystemExit(f"the output never repeats {COPY_RUN} earlier tokens in a row: no copied part to time")
    rates: dict[bool, list[tuple[float, float]]] = {False: [], True: []}  # copied part, part before
    for _, speculate in alternating(args.rounds, False, True):
        tokens, times = timed_generation(model, args.prompt, speculate, args.n)
        if tokens != reference:
            raise SystemExit("speculation changed the output")
        rates[speculate].append(((len(times) - 1 - start) / (times[-1] - times[start]),
                                 start / (times[start] - times[0]) if start > 0 else float("nan")))
    ratios = [b[0] / a[0] for a, b in zip(rates[False], rates[True])]
    print(json.dumps({
        "prompt": args.prompt, "copy_start": start, "n": args.n,
        "prose": model.tokenizer.decode(reference[:start])[-300:],
        "plain_copy_tps": statistics.median(r[0] for r in rates[False]),
        "spec_copy_tps": statistics.median(r[0] for r in rates[True]),
        "ratio_median": statistics.median(ratios), "ratios": ratios,
        "before_copy_ratio_median": statistics.median(b[1] / a[1] for a, b in zip(rates[False], rates[True]))},
        indent=1))


if __name__ == "__main__":
    main()
