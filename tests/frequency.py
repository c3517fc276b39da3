"""Is a sampler drawing from the distribution it claims? Pearson's chi-square, computed here by hand.

Every check uses three outcomes, so 2 degrees of freedom, where the chi-square tail is exactly exp(-x / 2): no
statistics library is needed. A seeded test passes at p > 1e-3 and would fail 1 time in 1,000 if it were not seeded.
"""

from __future__ import annotations

import math

import torch

SIGNIFICANCE = 1e-3


def chi_square(counts: torch.Tensor, p: torch.Tensor) -> tuple[float, float]:
    """(statistic, p-value) of three outcome counts against the probabilities p."""
    assert counts.numel() == p.numel() == 3, "the tail exp(-x / 2) holds for 3 outcomes (2 degrees of freedom)"
    expected = p.double() * counts.sum()
    x = float(((counts.double() - expected) ** 2 / expected).sum())
    return x, math.exp(-x / 2)


def assert_drawn_from(counts: torch.Tensor, p: torch.Tensor, what: str) -> None:
    x, p_value = chi_square(counts, p)
    assert p_value > SIGNIFICANCE, (f"{what}: counts {counts.tolist()} of {int(counts.sum())} draws are not drawn "
                                    f"from {[round(v, 4) for v in p.tolist()]} (chi-square {x:.1f}, p = {p_value:.1e})")
