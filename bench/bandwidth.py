"""The memory bandwidth that bounds plain decode, and the bytes a decode step reads.

Plain decode reads every weight once per token, so tokens/s x weight bytes is the
bandwidth it achieves, and a large-array copy on the same machine is its ceiling.

    python -m bench.bandwidth [--threads 2] [--model M.gguf]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def copy_bandwidth_gbs(threads: int = 2, mib: int = 1024, repeats: int = 5) -> float:
    """Best read+write GB/s of copying `mib` MiB between two arrays, split over
    `threads` threads (numpy releases the GIL while it copies)."""
    src = np.ones(mib * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(lambda b: np.copyto(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))
            best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def weight_bytes(path: str) -> int:
    """Bytes of all tensors in a GGUF: what one plain decode step reads (the
    models here tie their LM head to the token embedding, which it reads whole).
    Walks the header itself: gguf.GGUFReader takes ~14 s over Gemma's 262k-token
    vocabulary."""
    import struct

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

    scalar = {GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
              GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4, GGUFValueType.BOOL: 1,
              GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8}
    with open(path, "rb") as f:
        def u(fmt: str) -> int:
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def skip_value(kind: GGUFValueType) -> None:
            if kind == GGUFValueType.STRING:
                f.seek(u("Q"), 1)
            elif kind == GGUFValueType.ARRAY:
                item, count = GGUFValueType(u("I")), u("Q")
                if item in scalar:
                    f.seek(scalar[item] * count, 1)
                else:
                    for _ in range(count):
                        skip_value(item)
            else:
                f.seek(scalar[kind], 1)

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        _version, n_tensors, n_kv = u("I"), u("Q"), u("Q")
        for _ in range(n_kv):
            f.seek(u("Q"), 1)  # key
            skip_value(GGUFValueType(u("I")))
        total = 0
        for _ in range(n_tensors):
            f.seek(u("Q"), 1)  # name
            n_elements = 1
            for _ in range(u("I")):
                n_elements *= u("Q")
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(u("I"))]
            f.seek(8, 1)  # data offset
            total += n_elements // block * type_size
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model")
    args = p.parse_args()
    print(f"copy bandwidth, {args.threads} threads: {copy_bandwidth_gbs(args.threads):.1f} GB/s")
    if args.model:
        print(f"weight bytes: {weight_bytes(args.model) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
