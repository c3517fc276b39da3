"""GPT-2's own tokenizer, bundled, so a prompt is counted the way GPT-2 counts it.

The Shapes view shows GPT-2 (124M)'s shapes, the usual worked example: "A red jacket compliments any outfit." is 7 GPT-2 tokens,
so prefill's q is [1, 12, 7, 64], a decode step's [1, 12, 1, 64], and the cache after it
[1, 12, 8, 64]. The live model's tokenizer cuts the same text differently (and may add a start
marker), so its count is not GPT-2's. assets/tokenizers/gpt2/README.md says where the file came
from; no network, no GPT-2 weights.
"""

from __future__ import annotations

from functools import lru_cache

from engine.paths import ASSETS

TOKENIZER = ASSETS / "tokenizers" / "gpt2" / "tokenizer.json"


@lru_cache(maxsize=1)
def tokenizer():
    """GPT-2's byte-level BPE (50,257 tokens), read once per process."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER))


def pieces(text: str) -> list[str]:
    """The text of each GPT-2 token of `text` (no start marker: GPT-2 adds none)."""
    tok = tokenizer()
    return [tok.decode([i]) for i in tok.encode(text).ids]


def count(text: str) -> int:
    """How many tokens GPT-2 reads for `text`: its pos at prefill."""
    return len(tokenizer().encode(text).ids)
