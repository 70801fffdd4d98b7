"""Whether a draft model's vocabulary is the target's, as llama.cpp checks a
draft-simple pair (common/speculative.cpp: common_speculative_are_compatible).

A draft model's tokens go straight into the target's verify and the target's
tokens straight into the draft, as ids: the two vocabularies must give every
shared id the same text. llama.cpp's rule, kept here: the same tokenizer model,
the same BOS and EOS use and ids, sizes within 128 of each other, and every
token text equal from id 5 up to the smaller size (ids below 5 are specials
that conversions name differently).

Sizes that differ are pairs whose vocabularies differ only in padding or added
tokens at the end. They are safe because ids are checked where they cross: the
draft never proposes an id the target lacks (its draft stops there), and after
the target emits an id the draft lacks the draft stops drafting until the
sequence is replaced. A pair whose shared ids differ anywhere is refused: an id
meaning different text would draft nonsense at best.
"""

from __future__ import annotations

from ggspec.text.vocab import Vocab

MAX_SIZE_DIFFERENCE = 128
FIRST_COMPARED_ID = 5


def vocabulary_mismatch(target: Vocab, draft: Vocab) -> str | None:
    """Why `draft` cannot draft for `target` (one sentence), or None when it can."""
    if draft.model != target.model:
        return f"its tokenizer model is {draft.model!r}, the target's is {target.model!r}"
    for what, add_d, add_t, id_d, id_t in (("BOS", draft.add_bos, target.add_bos, draft.bos_id, target.bos_id),
                                           ("EOS", draft.add_eos, target.add_eos, draft.eos_id, target.eos_id)):
        if add_d != add_t:
            return (f"it {'adds' if add_d else 'does not add'} a {what} token to a prompt and the target "
                    f"{'does' if add_t else 'does not'}")
        if add_t and id_d != id_t:
            return f"its {what} token is id {id_d}, the target's is id {id_t}"
    difference = abs(draft.n_vocab - target.n_vocab)
    if difference > MAX_SIZE_DIFFERENCE:
        return (f"it has {draft.n_vocab} tokens and the target {target.n_vocab}, more than "
                f"{MAX_SIZE_DIFFERENCE} apart")
    for i in range(FIRST_COMPARED_ID, min(draft.n_vocab, target.n_vocab)):
        if draft.tokens[i] != target.tokens[i]:
            return f"token {i} is {draft.tokens[i]!r} in it and {target.tokens[i]!r} in the target"
    return None


__all__ = ["vocabulary_mismatch", "MAX_SIZE_DIFFERENCE", "FIRST_COMPARED_ID"]
