"""NGramSpeculator: what it proposes, how its window adapts, and that a propose's
work does not grow with the context."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ggspec.speculators.base import DraftContext
from ggspec.speculators.ngram import NGramSpeculator


def ngram(**options) -> NGramSpeculator:
    """Orders 1..4 unless a test says otherwise: short keys make small cases readable."""
    return NGramSpeculator(**{"min_order": 1, "max_order": 4, **options})


def test_the_default_orders():
    spec = NGramSpeculator()
    assert (spec.min_order, spec.max_order, spec.required_order) == (3, 12, 3)


def propose(spec: NGramSpeculator, history: Sequence[int], max_draft: int = 64) -> list[int]:
    out: list[int] = []
    n = spec.propose(DraftContext(history=history, position=len(history) - 1, max_draft=max_draft), out)
    assert n == len(out)
    return out


def accept(spec: NGramSpeculator, history: list[int], draft: list[int], n_accepted: int, next_token: int) -> None:
    """What the runtime does after a verify: commits [last, accepted drafts], then
    the sampled token becomes the history's new last."""
    spec.commit([history[-1]] + draft[:n_accepted], None, len(history) - 1)
    history += draft[:n_accepted] + [next_token]


PASSAGE = list(range(100, 300))  # distinct tokens: any suffix of it matches exactly once


def test_what_it_declares():
    spec = ngram()
    assert (spec.name, spec.min_draft_prob, spec.max_draft_tokens) == ("ngram", 0.0, 64)
    assert spec.can_arm_after_prefix_reuse and not spec.needs_hidden_state
    with pytest.raises(ValueError):
        NGramSpeculator(min_order=3, max_order=2)
    with pytest.raises(ValueError):
        ngram(window=0)


def test_proposes_the_continuation_of_a_repeated_passage():
    a, b = list(range(100, 120)), list(range(200, 230))
    assert propose(ngram(window=10), a + b + a[:5]) == a[5:15]


def test_the_longest_match_wins():
    # (6, 7, 8) was followed by 1; the lone 8, more recently, by 2
    history = [6, 7, 8, 1, 5, 8, 2, 6, 7, 8]
    assert propose(ngram(window=2), history) == [1, 5]
    assert propose(ngram(window=2, max_order=1), history) == [2, 6]


def test_the_most_recent_occurrence_wins():
    assert propose(ngram(window=2), [1, 2, 3, 5, 1, 2, 3, 6, 9, 1, 2, 3]) == [6, 9]


def test_never_the_suffix_itself():
    assert propose(ngram(), [7, 8, 9]) == []
    assert propose(ngram(), [7]) == []
    assert propose(ngram(), []) == []


def test_a_continuation_that_reaches_the_present_repeats_its_loop():
    assert propose(ngram(window=8), [5, 5]) == [5] * 8
    assert propose(ngram(window=8), [1, 2, 3, 1, 2, 3]) == [1, 2, 3, 1, 2, 3, 1, 2]
    # the most recent (9, 1, 2, 3) ended one period ago: period 5, drafted past the present
    assert propose(ngram(window=7), [0, 9, 1, 2, 3, 4, 9, 1, 2, 3]) == [4, 9, 1, 2, 3, 4, 9]
    assert propose(ngram(window=3), [1, 2, 3, 1, 2, 3]) == [1, 2, 3]


def test_the_draft_length_limits():
    history = PASSAGE + PASSAGE[:3]
    assert len(propose(ngram(), history)) == 4  # the adaptive window's start
    assert len(propose(ngram(window=7), history)) == 7
    assert len(propose(ngram(window=7), history, max_draft=3)) == 3
    assert len(propose(ngram(window=7, max_draft_tokens=5), history)) == 5

    fixed = ngram(window=7)
    for _ in range(4):
        draft = propose(fixed, history)
        assert len(draft) == 7
        accept(fixed, history, draft, len(draft), PASSAGE[len(history) - len(PASSAGE) + len(draft)])


def test_pmin_scales_the_required_match_length():
    three = [1, 2, 3, 9, 5, 1, 2, 3]
    four = [4, 1, 2, 3, 9, 5, 4, 1, 2, 3]
    assert propose(ngram(window=1), three) == [9]
    assert propose(ngram(window=1, min_draft_prob=1.0), three) == []
    assert propose(ngram(window=1, min_draft_prob=1.0), four) == [9]
    # 1 + round(0.5 * 3) = 3: a 3-gram is enough, a 2-gram is not
    assert ngram(min_draft_prob=0.5).required_order == 3
    assert propose(ngram(window=1, min_draft_prob=0.5), three) == [9]
    assert propose(ngram(window=1, min_draft_prob=0.5), [2, 3, 9, 5, 2, 3]) == []


def test_the_window_grows_on_full_acceptance_and_shrinks_on_rejection():
    spec = ngram(max_draft_tokens=20)
    history = PASSAGE + PASSAGE[:2]

    def step(n_accepted: int | None = None) -> int:
        draft = propose(spec, history)
        n = len(draft) if n_accepted is None else n_accepted
        accept(spec, history, draft, n, PASSAGE[len(history) - len(PASSAGE) + n])
        return len(draft)

    assert [step() for _ in range(4)] == [4, 8, 16, 20]  # doubling, capped at max_draft_tokens
    assert step(n_accepted=2) == 20
    assert step() == 3  # accepted + 1
    assert step(n_accepted=0) == 6
    assert step() == 1
    assert step() == 2


class CountingHistory(Sequence):
    """A history that counts the tokens read from it."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens
        self.reads = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i):
        got = self.tokens[i]
        self.reads += len(got) if isinstance(i, slice) else 1
        return got


def steady_state_work(context: int) -> list[tuple[int, int, int]]:
    """(index probes, index insertions, tokens read) of each propose while one token
    a step is appended after `context` tokens: first a passage seen at the start
    (matches of every order), then tokens never seen (no match at all)."""
    seen = list(range(10_000, 10_040))
    rng = random.Random(0)
    history = CountingHistory(seen + [rng.randrange(5000) for _ in range(context - len(seen))])
    spec = ngram()
    propose(spec, history)  # the first propose indexes the whole context once
    work = []
    for token in seen + list(range(20_000, 20_040)):
        history.tokens.append(token)
        history.reads = 0
        propose(spec, history)
        work.append((spec.index_probes, spec.index_insertions, history.reads))
    return work


def test_propose_work_is_flat_in_the_context_length():
    at_1k, at_32k = steady_state_work(1_000), steady_state_work(32_000)
    assert at_1k == at_32k
    assert max(probes for probes, _, _ in at_32k) == 4 and max(reads for _, _, reads in at_32k) <= 16


def naive_proposal(history: list[int], spec: NGramSpeculator, limit: int) -> list[int]:
    """The definition, by scanning: what followed the latest earlier end of the
    longest suffix match, read on through the drafts themselves when it reaches
    the present (the text predicted to go on as it did then)."""
    end = len(history)
    for n in range(min(spec.max_order, end), spec.required_order - 1, -1):
        for pos in range(end - 2, n - 2, -1):
            if history[pos + 1 - n:pos + 1] == history[end - n:]:
                extended = list(history)
                for i in range(pos + 1, pos + 1 + limit):
                    extended.append(extended[i])
                return extended[end:]
    return []


@settings(max_examples=200, deadline=None)
@given(data=st.data(), min_order=st.integers(1, 3), extra_orders=st.integers(0, 3),
       pmin=st.sampled_from([0.0, 0.5, 1.0]), window=st.integers(1, 6))
def test_the_incremental_index_equals_one_built_at_once(data, min_order, extra_orders, pmin, window):
    def make():
        return NGramSpeculator(min_draft_prob=pmin, min_order=min_order, max_order=min_order + extra_orders,
                               window=window)

    spec = make()
    history = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=10))
    for _ in range(data.draw(st.integers(1, 30))):
        if data.draw(st.booleans()):
            history += data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
            continue
        draft = propose(spec, history)
        assert draft == propose(make(), history) == naive_proposal(history, spec, window)
        accept(spec, history, draft, data.draw(st.integers(0, len(draft))), data.draw(st.integers(0, 3)))


def test_reset_then_another_sequence():
    spec = ngram(window=3)
    first = PASSAGE + PASSAGE[:5]
    assert propose(spec, first) == PASSAGE[5:8]
    spec.reset()
    other = [9, 8, 7, 6, 9, 8]
    assert propose(spec, other) == [7, 6, 9]
    # a shorter history without reset is a new sequence too: the index is rebuilt
    assert propose(spec, [1, 2, 1]) == [2, 1, 2]


def test_shadow_proposals_teach_the_window_nothing():
    spec = ngram(max_draft_tokens=64)
    history = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    out = []
    assert spec.propose(DraftContext(history, len(history) - 1, 64), out) > 0
    spec.commit([history[-1], *out], None, len(history) - 1)  # all accepted: the window doubles
    window = spec.window.size
    history += out
    shadow = []
    spec.propose(DraftContext(history, len(history) - 1, 1, shadow=True), shadow)
    spec.commit([history[-1]], None, len(history) - 1)  # a plain step: not a rejection of the shadow
    assert spec.window.size == window
