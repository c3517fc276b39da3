"""The characters a tokenizer cut into several tokens, read back from the pieces alone (a follower's page has
the pieces, not the tokenizer): a piece that is only part of a character is written as its bytes, '⟨F0 9F⟩'
(engine/load/pieces.py), and its bytes join the next pieces' to make the character again.

    piece_bytes(piece)         a piece back to the bytes it stands for
    split_characters(pieces)   the characters written across several pieces: [(char, positions, its bytes)]
"""

from __future__ import annotations

import re

from engine.load.pieces import SEP

_BYTES = re.compile("⟨([0-9A-F]{2}(?:" + SEP + "[0-9A-F]{2})*)⟩")


def piece_bytes(text: str) -> bytes:
    """A piece (`piece`) back to the bytes it stands for."""
    out, at = bytearray(), 0
    for m in _BYTES.finditer(text):
        out += text[at:m.start()].encode("utf-8") + bytes(int(h, 16) for h in m.group(1).split(SEP))
        at = m.end()
    return bytes(out + text[at:].encode("utf-8"))


def split_characters(pieces: list[str]) -> list[tuple[str, list[int], bytes]]:
    """The characters that took more than one token: (the character, the positions of its tokens, its UTF-8
    bytes), in order. Read from the pieces' bytes, so it holds for any tokenizer `piece` wrote them for."""
    data, owner = bytearray(), []
    for pos, p in enumerate(pieces):
        b = piece_bytes(p)
        data += b
        owner += [pos] * len(b)
    out, i = [], 0
    while i < len(data):
        lead = data[i]
        n = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 \
            else 1
        chunk = bytes(data[i:i + n])
        try:
            ch = chunk.decode("utf-8")
        except UnicodeDecodeError:
            i += 1
            continue
        positions = sorted(set(owner[i:i + n]))
        if len(positions) > 1:
            out.append((ch, positions, chunk))
        i += n
    return out
