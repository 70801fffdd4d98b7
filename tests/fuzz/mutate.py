"""Mutations of a GGUF file in its header, its metadata and its tensor table.

The file is walked once into slots (each field's offset, size and kind); a mutant
rewrites one to three slots with values chosen to reach edge cases (zero, -1, the
extremes, NaN and infinities, another value type, another tensor type), or flips
random bytes, or truncates the file. A mutant is a pure function of (base, seed),
so a run can be resumed and any finding replayed.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from gguf import GGUFValueType

_SCALAR = {  # value type → struct code
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}
_FLOATS = (float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e-30, 1e30, -1e-6, 3.0e38)
_N_GGML_TYPES = 42  # a little past ggml's last type id: unknown ids must be refused too


@dataclass(frozen=True)
class Slot:
    offset: int
    code: str   # struct code of the field ("I", "Q", "f", ...), or "s" for string bytes
    size: int
    kind: str   # header, key, value_type, value, array_type, array_count, tensor_name, n_dims, dim, type, data_offset


def layout(data: bytes) -> list[Slot]:
    """The slots of a well-formed little-endian GGUF (v2/v3)."""
    slots: list[Slot] = []
    pos = 4  # magic

    def take(code: str, kind: str):
        nonlocal pos
        size = struct.calcsize("<" + code)
        (value,) = struct.unpack_from("<" + code, data, pos)
        slots.append(Slot(pos, code, size, kind))
        pos += size
        return value

    def string(kind: str) -> None:
        nonlocal pos
        n = take("Q", kind + "_length")
        slots.append(Slot(pos, "s", n, kind))
        pos += n

    take("I", "header")
    n_tensors = take("Q", "header")
    n_kv = take("Q", "header")
    for _ in range(n_kv):
        string("key")
        vtype = take("I", "value_type")
        if vtype == GGUFValueType.ARRAY:
            item = take("I", "array_type")
            count = take("Q", "array_count")
            for _ in range(count):
                if item == GGUFValueType.STRING:
                    string("value")
                else:
                    take(_SCALAR[item], "value")
        elif vtype == GGUFValueType.STRING:
            string("value")
        else:
            take(_SCALAR[vtype], "value")
    for _ in range(n_tensors):
        string("tensor_name")
        n_dims = take("I", "n_dims")
        for _ in range(n_dims):
            take("Q", "dim")
        take("I", "type")
        take("Q", "data_offset")
    return slots


def _edge_int(code: str, rng: random.Random, current: int) -> int:
    bits = struct.calcsize(code) * 8
    signed = code.islower()
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    choices = [0, 1, 2, lo, hi, current + 1, current - 1, current * 2, current // 2, rng.randint(lo, hi),
               -1 if signed else hi, 7, 64, 255, 256, 4096, 1 << 20]
    return min(hi, max(lo, rng.choice(choices)))


def _rewrite(buf: bytearray, slot: Slot, rng: random.Random) -> None:
    if slot.code == "s":
        if slot.size:
            i = slot.offset + rng.randrange(slot.size)
            buf[i] = rng.choice([0x00, 0xFF, 0x80, 0xC3, rng.randrange(256)])  # also breaks UTF-8
        return
    fmt = "<" + slot.code
    (current,) = struct.unpack_from(fmt, buf, slot.offset)
    if slot.code in "fd":
        value = rng.choice(_FLOATS) if rng.random() < 0.8 else current * rng.choice([-1, 0.5, 2, 1000])
    elif slot.code == "?":
        value = not current
    elif slot.kind in ("value_type", "array_type"):
        value = rng.randrange(0, 14)
    elif slot.kind == "type":
        value = rng.randrange(0, _N_GGML_TYPES)
    else:
        value = _edge_int(slot.code, rng, current)
    struct.pack_into(fmt, buf, slot.offset, value)


def mutate(data: bytes, slots: list[Slot], seed: int) -> bytes:
    """One mutant of `data` (whose layout is `slots`)."""
    rng = random.Random(seed)
    buf = bytearray(data)
    operator = rng.random()
    if operator < 0.08:  # truncate: inside the metadata, the tensor table or the weights
        return bytes(buf[:rng.randrange(4, len(buf))])
    if operator < 0.16:  # flip random bytes before the weights
        end = slots[-1].offset + slots[-1].size
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(end)] ^= 1 << rng.randrange(8)
        return bytes(buf)
    # rewrite 1-3 slots, biased toward what changes the math: values, tensor types and dims
    weighted = [s for s in slots if s.kind in ("value", "type", "dim", "n_dims", "array_count")]
    for _ in range(rng.randint(1, 3)):
        pool = weighted if weighted and rng.random() < 0.75 else slots
        _rewrite(buf, rng.choice(pool), rng)
    return bytes(buf)


__all__ = ["Slot", "layout", "mutate"]
