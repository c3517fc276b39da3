"""One way to time: `timed(fn, device, repeats, warmup)` returns a `Timing`.

A time is `perf_counter` around a device sync (gpt-fast's `device_sync`): the clock is read only once the device
has finished the work queued before it. The first `warmup` runs pay one-off costs (allocations, a kernel's
choice, a compile) and are reported apart, never in the median; the `repeats` after them give the median and the
spread. `with span(device) as took:` times one block the same way (a step, a token's choice): `took.ms` after it.
`now(device)` is the bare clock read, for a whole run's wall time or a deadline. This module is the only place the
project reads `perf_counter` or syncs a device to read it (tests/test_timing.py checks it).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from engine import device as dev


@dataclass(frozen=True)
class Timing:
    """How long one call took: every timed repeat, and the warm-up apart."""

    samples_ms: tuple[float, ...]  # timed runs of the same call, each between device syncs
    warmup_ms: float | None  # the warm-up runs together (excluded from the median); None when there were none
    sample_ms: float = 0.0  # a forward pass's: choosing the token from the logits (after the pass)

    @property
    def forward_ms(self) -> float:
        """The median of the timed runs."""
        return statistics.median(self.samples_ms)

    median_ms = forward_ms

    @property
    def low_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def high_ms(self) -> float:
        return max(self.samples_ms)

    @property
    def repeats(self) -> int:
        return len(self.samples_ms)

    def describe(self, short: bool = False) -> str:
        """'5.1 ms (median of 3, 4.9–5.6; warm-up 7.0 excluded)' or '5.1 ms (one run)'."""
        if self.repeats == 1:
            return f"{self.forward_ms:.1f} ms (one run)"
        warm = f"; warm-up {self.warmup_ms:.1f} excluded" if self.warmup_ms is not None and not short else ""
        return f"{self.forward_ms:.1f} ms (median of {self.repeats}, {self.low_ms:.1f}–{self.high_ms:.1f}{warm})"


def now(device: torch.device | str | None = None) -> float:
    """Seconds on the clock, read after the device has finished its queued work (no sync without a device)."""
    if device is not None:
        dev.sync(torch.device(device))
    return time.perf_counter()


class span:  # noqa: N801 - read as a verb: `with span(device) as took:`
    """`with span(device) as took: ...`, then `took.ms`: the block's milliseconds, read between device syncs."""

    def __init__(self, device: torch.device | str | None = None):
        self.device, self.ms = device, 0.0

    def __enter__(self) -> span:
        self._started = now(self.device)
        return self

    def __exit__(self, *raised) -> None:
        self.ms = (now(self.device) - self._started) * 1e3


def timed(fn, device: torch.device | str | None = None, repeats: int = 3, warmup: int = 1, between=None) -> Timing:
    """fn() run `warmup` times, then `repeats` times, each between device syncs: a Timing in milliseconds.

    `between()`, where given, runs after every run but the last, outside the clock (a cached pass rolled back so
    that the next run repeats it). The caller keeps whatever fn leaves (the last run's result).
    """
    times = []
    runs = warmup + max(repeats, 1)
    for run in range(runs):
        with span(device) as took:
            fn()
        times.append(took.ms)
        if between is not None and run < runs - 1:
            between()
    return Timing(samples_ms=tuple(times[warmup:]), warmup_ms=sum(times[:warmup]) if warmup else None)
