"""python -m tests.fuzz [--mutants N] [--state DIR] [--seed S] [--jobs J] [--seconds T] [--replay FILE]

Mutates the project's tiny GGUF files and exercises each mutant in a forked child
(4 GiB address space, 20 s deadline). Resumable: a run continues from
DIR/progress.json (same seed). Prints the counts per outcome as JSON; exits 1 if
any mutant crashed, hung, blew up or raised something other than a ValueError
or OSError. The long run: python -m tests.fuzz --mutants 100000 --state ~/.cache/ggspec/fuzz
"""

import argparse
import json
import sys
from pathlib import Path

from tests.fuzz.run import PASSING, exercise, run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mutants", type=int, default=2000)
    p.add_argument("--state", default="bench/results/fuzz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seconds", type=float, help="stop after this long (resume later)")
    p.add_argument("--replay", help="exercise one saved mutant in this process")
    p.add_argument("--target", help="with --replay of a drafter mutant: its target file")
    args = p.parse_args()
    if args.replay:
        exercise(Path(args.replay), args.target)  # in this process: a traceback or a debugger shows it
        return 0
    progress = run(args.mutants, Path(args.state), seed=args.seed, jobs=args.jobs, seconds=args.seconds,
                   log=lambda line: print(line, file=sys.stderr))
    summary = {"mutants": progress["next"], "counts": progress["counts"],
               "findings": len(progress["findings"]), "refusals": progress["refusals"]}
    print(json.dumps(summary, indent=1))
    failed = sum(n for outcome, n in progress["counts"].items() if outcome not in PASSING)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
