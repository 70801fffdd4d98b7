"""Real-weight variants of a GGUF, re-quantized by the peer build's llama-quantize.

    python -m bench.variants --model M.gguf [--types f16,q8_0] [--flavor usual]

Writes <cache>/variants/<stem>-<TYPE>.gguf (the peer cache: GGSPEC_PEER_DIR or
~/.cache/ggspec/peer) unless it exists, and prints each path: the same weights
at other types, for the benches (bench.prefill, bench.verify_cost) to run on.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from bench.peer.peer import ensure_built, peer_root, tool


def variant(model: str, qtype: str, flavor: str = "usual") -> Path:
    out = peer_root() / "variants" / f"{Path(model).stem}-{qtype.upper()}.gguf"
    if not out.exists():
        ensure_built(flavor)
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_suffix(".part")
        subprocess.run([str(tool("llama-quantize", flavor)), "--allow-requantize", model, str(part), qtype.upper()],
                       check=True, capture_output=True)
        part.rename(out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--types", default="f16,q8_0")
    p.add_argument("--flavor", default="usual")
    args = p.parse_args()
    for qtype in args.types.split(","):
        print(variant(args.model, qtype, args.flavor))


if __name__ == "__main__":
    main()
