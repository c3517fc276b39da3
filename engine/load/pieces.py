"""What a token stands for, as a reader can see it: its text, or its bytes when it is only part of a character.

A byte-level tokenizer (GPT-2's, this app's bundled models') has tokens for bytes, not characters: an emoji, a CJK
or a Cyrillic letter it has no token for is cut into several tokens of one or two UTF-8 bytes each. Decoded alone,
such a token is not a character, and the tokenizer writes "�". Here it is written as its bytes instead, in hex
between ⟨ ⟩ ("⟨F0 9F⟩"), so a student sees what the model sees, and `split_characters` finds the characters that
took several tokens, from the pieces alone (a follower's page has the pieces, not the tokenizer).

    piece(tokenizer, id)       the token's text, or its bytes where it is not whole characters
    split_characters(pieces)   the characters written across several pieces: [(char, positions, its bytes)]
"""

from __future__ import annotations

import re
from functools import cache

REPLACEMENT = "\ufffd"  # what a tokenizer writes for bytes that are not a whole character
SEP = "\u202f"  # between two bytes: a narrow no-break space (show_piece marks real spaces, not this one)
_BYTES = re.compile("⟨([0-9A-F]{2}(?:" + SEP + "[0-9A-F]{2})*)⟩")
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a SentencePiece byte-fallback token


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, read back: the printable character each of the 256 bytes is written as in the
    vocabulary (printable Latin-1 as itself, the rest shifted past 255), to its byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes a token stands for: a byte-fallback token's byte, a byte-level token's bytes, else its text's."""
    name = tokenizer.convert_ids_to_tokens(int(token_id))
    if isinstance(name, str):
        if m := _BYTE_TOKEN.fullmatch(name):
            return bytes([int(m.group(1), 16)])
        table = _byte_decoder()
        if name and all(c in table for c in name):
            return bytes(table[c] for c in name)
    return tokenizer.decode([int(token_id)]).encode("utf-8")


def readable(data: bytes) -> str:
    """Bytes as text where they are whole UTF-8 characters, and as ⟨hex⟩ where they are not."""
    out, loose, i = [], [], 0
    while i < len(data):
        for n in (1, 2, 3, 4):
            try:
                ch = data[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if loose:
                out.append("⟨" + SEP.join(loose) + "⟩")
                loose = []
            out.append(ch)
            i += n
            break
        else:
            loose.append(f"{data[i]:02X}")
            i += 1
    if loose:
        out.append("⟨" + SEP.join(loose) + "⟩")
    return "".join(out)


def piece(tokenizer, token_id: int) -> str:
    """What one token stands for: its text, or (where it is only part of a character) its bytes, '⟨E6 9D⟩'."""
    text = tokenizer.decode([int(token_id)])
    if REPLACEMENT not in text:
        return text
    return readable(token_bytes(tokenizer, token_id))


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
