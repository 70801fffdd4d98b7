"""What a forked child does with one mutant: everything a user would do with the file.

A target mutant is loaded, forwarded over 3 tokens, verified over 4 rows and
rewound; tokenized (encode and decode); and generated for 4 tokens. A drafter
mutant is attached to its (intact) target, its rows run (a block drafter's inject and
draft, a draft head's catch-up and chained step) and generated with.
"""

from __future__ import annotations

import numpy as np

import ggspec
from ggspec.engine.planner import check_draft_model

N_CTX = 64


def exercise_target(path: str) -> None:
    model = ggspec.Model(path, n_ctx=N_CTX, n_threads=1)
    target = model.target
    target.spec_forward([1, 2, 3])
    target.spec_forward([4, 5, 6, 7], all_logits=True)
    target.rewind(5)
    ids = model.tokenizer.encode("hello world", add_special=True, parse_special=True)
    model.tokenizer.decode(ids)
    ggspec.generate(model, "hello", max_tokens=4, temperature=0, ignore_eos=True)


def exercise_drafter(target_path: str, drafter_path: str) -> None:
    model = ggspec.Model(target_path, n_ctx=N_CTX, n_threads=1)
    target, tokens = model.target, list(range(10, 20))
    if check_draft_model(drafter_path) == "draft-head":
        head = target.attach_draft_head(drafter_path)
        rows = target.spec_forward(tokens[:-1], hidden_layers=list(head.trunk_taps)).hidden
        _, ids, row = head.draft_catch_up_and_step(tokens, np.vstack([np.zeros_like(rows[:1]), rows]), 0, 4)
        head.draft_step(int(ids[0]), row, len(tokens), 4)
    else:
        drafter = target.attach_drafter(drafter_path)
        features = target.spec_forward(tokens, hidden_layers=list(drafter.target_layers)).hidden
        drafter.inject(features, 0)
        drafter.draft(11, len(tokens), min(4, drafter.block_size), 4)
    ggspec.generate(model, "hello", max_tokens=4, temperature=0, ignore_eos=True,
                    spec=ggspec.SpecOptions(draft_model=drafter_path))  # the file's kind decides


__all__ = ["exercise_target", "exercise_drafter"]
