"""What a token stands for, as a reader can see it: its text, or its bytes when it is only part of a character.

A byte-level tokenizer (GPT-2's, this app's bundled models') has tokens for bytes, not characters: an emoji, a CJK
or a Cyrillic letter it has no token for is cut into several tokens of one or two UTF-8 bytes each. Decoded alone,
such a token is not a character, and the tokenizer writes "�". Here it is written as its bytes instead, in hex
between ⟨ ⟩ ("⟨F0 9F⟩"), so a student sees what the model sees; drawing/characters.py reads the pieces back to
the characters that took several tokens.

    piece(tokenizer, id)       the token's text, or its bytes where it is not whole characters
"""

from __future__ import annotations

import re
from functools import cache

REPLACEMENT = "\ufffd"  # what a tokenizer writes for bytes that are not a whole character
SEP = "\u202f"  # between two bytes: a narrow no-break space (show_piece marks real spaces, not this one)
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
