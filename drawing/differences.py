"""Two computations of the same numbers set side by side, in words: identical where they are, the largest gap and
its cause (float rounding, another order of the arithmetic) where they are not. A zero is never said to be rounding.
"""

from __future__ import annotations


def cache_match_words(key_diff: float, value_diff: float) -> str:
    """How the cached K and V compare with recomputing every position: 'identical to what the cache holds, bit for
    bit', or 'within **2e-07** ... (float rounding)' for what differs."""
    if key_diff == 0 and value_diff == 0:
        return "keys and values **identical** to what the cache holds, bit for bit"
    keys = "keys **identical**" if key_diff == 0 else f"keys within **{key_diff:.1g}**"
    values = "values **identical**" if value_diff == 0 else f"values within **{value_diff:.1g}**"
    return f"{keys} and {values} of what the cache holds (float rounding)"


def logit_gap_words(diff: float) -> str:
    """The largest logit difference of two runs of the same tokens: 0 is identical, anything else rounding."""
    if diff == 0:
        return "0: identical, bit for bit"
    return f"{diff:.2g} (floating-point rounding; the computation order differs)"
