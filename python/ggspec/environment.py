"""The environment variables the `ggspec` command reads, at its surface only:
the library itself never reads the environment, so two models in one process
can differ. Speculation's variables are SpecOptions.from_environment's."""

from __future__ import annotations

import os
from typing import Mapping


def target_options_from(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`ggspec.load` options the comparison switches select: GGSPEC_Q35_VERIFY_SNAPSHOTS=0
    (the reforward rollback) and GGSPEC_Q35_VERIFY_DEFER_STATE=0 (snapshots through the host)."""
    if environ.get("GGSPEC_Q35_VERIFY_SNAPSHOTS", "1") == "0":
        return {"recurrent_rollback": "reforward"}
    if environ.get("GGSPEC_Q35_VERIFY_DEFER_STATE", "1") == "0":
        return {"recurrent_rollback": "snapshots-host"}
    return {}


__all__ = ["target_options_from"]
