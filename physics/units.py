"""How quantities are written, once for every page: bytes in binary units (KiB = 1,024 B), FLOPs in SI units, a
sub-millisecond time in µs."""

from __future__ import annotations

import math


def human_bytes(n: float, decimals: int = 1) -> str:
    """'512 B', '3.0 KiB', '1.5 MiB', '16.0 GiB': binary units everywhere (the KV calculator, the stage, the CLI).
    decimals=2 where figures side by side must keep their ratio ('1.97 GiB' and '3.94 GiB', not 2.0 and 3.9)."""
    if not math.isfinite(n):
        return str(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.{decimals}f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n:.{decimals}f}"


def human_flops(x: float) -> str:
    """'7.9 MFLOP': a count of floating-point operations (not a rate)."""
    for unit, div in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if x >= div:
            return f"{x / div:.1f} {unit}"
    return f"{x:.0f} FLOP"


def human_ms(ms: float) -> str:
    """'12.1 ms', '156 µs', '0.633 µs', '1.23 s', '3.2 min': three significant figures (two in minutes), in µs below
    a millisecond (a datasheet GPU's bound for a small model is a few µs, never '0.00246 ms'), in seconds from one
    (a slow CPU's prefill, never '1.23e+03 ms') and in minutes from 100 s (a measurement run)."""
    if abs(ms) >= 100e3:
        return f"{ms / 60e3:.2g} min" if abs(ms) < 600e3 else f"{ms / 60e3:.0f} min"
    if abs(ms) >= 1e3:
        return f"{ms / 1e3:.3g} s"
    return f"{ms:.3g} ms" if abs(ms) >= 1 or ms == 0 else f"{ms * 1e3:.3g} µs"


def apart(a: float, b: float, digits: int = 1) -> tuple[str, str]:
    """a and b to `digits` decimals, or to as many more (up to 4) as it takes for the printed pair to differ: a step
    at 7.16 FLOP/byte beside a ridge at 7.24 read '7.2' and '7.2'; a range 1.058–1.064 read '1.06–1.06'."""
    for places in range(digits, 5):
        x, y = f"{a:.{places}f}", f"{b:.{places}f}"
        if x != y:
            break
    return x, y


def times(x: float) -> str:
    """A ratio with the digits it earns: ×0.45, ×13.4, ×2305 ('×2304.55' said more than a timing knows)."""
    return f"×{x:.0f}" if x >= 100 else f"×{x:.1f}" if x >= 10 else f"×{x:.2f}"
