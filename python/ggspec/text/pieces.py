"""The bytes a token stands for (llama.cpp's llama_token_to_piece, without lstrip).

Control and unknown tokens render empty unless `special`; user-defined ones always
render their text. Normal tokens: SentencePiece's "▁" is a space; byte-level BPE
maps its printable stand-in characters back to bytes (GPT-2's table). Byte tokens
<0xXX> are that byte. Unused and undefined tokens render empty.
"""

from __future__ import annotations

from ggspec.text.specials import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED


def _gpt2_char_to_byte() -> dict[str, int]:
    # GPT-2 keeps printable Latin-1 bytes as their own character and moves the
    # rest (controls, space, 0x7F-0xA0, 0xAD) to U+0100 onwards, in byte order.
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    moved = sorted(set(range(256)) - set(printable))
    table.update((chr(256 + i), b) for i, b in enumerate(moved))
    return table


_GPT2_BYTES = _gpt2_char_to_byte()


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _gpt2_decode(text: str) -> bytes:
    out = bytearray()
    for ch in text:
        b = _GPT2_BYTES.get(ch)
        if b is not None:
            out.append(b)
        else:
            # llama.cpp's llama_decode_text spells out a character outside the table.
            out += b"[UNK_BYTE_0x" + _utf8(ch).hex().encode() + _utf8(text) + b"]"
    return bytes(out)


def token_piece(text: str, attr: int, byte_level: bool, special: bool) -> bytes:
    """Piece of a token with vocabulary text `text` and llama.cpp attribute bits `attr`."""
    if attr & (UNKNOWN | CONTROL):
        return _utf8(text) if special else b""
    if attr & USER_DEFINED:
        return _utf8(text)
    if attr & NORMAL:
        return _gpt2_decode(text) if byte_level else _utf8(text.replace("\u2581", " "))
    if attr & BYTE:
        try:
            return bytes([int(text[3:5], 16)])
        except ValueError:
            return b""
    return b""
