"""Instruments the peer's source before it is built: llama.cpp's DFlash2 driver
(common/speculative.cpp) logs no candidates for its lattice walk, where every other
drafter logs " - seq_id S, draft candidate K, pos I: ID (P) ..." at -v. This adds
those lines for the walk's pick (K 0) and its runner-up (K 1), with their softmax
probabilities among the row's scores given the chosen predecessor, so that the
draft-parity peer tests compare DFlash2's drafts as they compare the others'.
Nothing else changes: the lines are debug logs.

    python3 bench/peer/instrument.py <llama.cpp source dir>     # idempotent
"""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "ggspec instrumentation"
ANCHOR = """                    predecessor = (int32_t) std::distance(scores,
                            std::max_element(scores, scores + selector_top_k));
"""
ADDED = """                    {  // %s: the walk's pick and runner-up, logged as the other drafters log theirs
                        int32_t second = predecessor == 0 ? 1 : 0;
                        float sum = 0.0f;
                        for (int32_t k = 0; k < selector_top_k; ++k) {
                            if (k != predecessor && scores[k] > scores[second]) second = k;
                            sum += std::exp(scores[k] - scores[predecessor]);
                        }
                        const int32_t ids[2] = {(int32_t) row[predecessor], (int32_t) row[second]};
                        const float ps[2] = {1.0f / sum, std::exp(scores[second] - scores[predecessor]) / sum};
                        for (int c = 0; c < 2 && c < selector_top_k; ++c) {
                            LOG_DBG(" - seq_id %%d, draft candidate %%3d, pos %%3d: %%6d (%%8.3f) ''\\n",
                                    seq_id, c, i - 1, ids[c], ps[c]);
                        }
                    }
""" % MARKER


def instrument(source: Path) -> bool:
    """Adds the lines once; returns whether the file changed."""
    path = source / "common" / "speculative.cpp"
    text = path.read_text()
    if MARKER in text:
        return False
    if text.count(ANCHOR) != 1:
        raise SystemExit(f"{path}: the DFlash2 walk's argmax was not found once; the peer's source moved")
    path.write_text(text.replace(ANCHOR, ANCHOR + ADDED))
    return True


if __name__ == "__main__":
    print("instrumented" if instrument(Path(sys.argv[1])) else "already instrumented")
