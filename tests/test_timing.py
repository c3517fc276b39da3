"""One way to time (engine/timing.py): `timed(fn, device, repeats, warmup)` returns a Timing with the warm-up apart,
`span(device)` times one block, and no other file of the project reads `perf_counter` or syncs the device itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.timing import Timing, now, span, timed

ROOT = Path(__file__).resolve().parent.parent
CLOCK = "engine/timing.py"
READ = "perf_counter" + "()"  # spelled apart, so that this file is not one of its own hits
SYNCS = ("dev." + "sync(", "synchron" + "ize(")  # a device sync written beside a clock read: a second way to time
DEVICE = "engine/device.py"  # where the sync itself is written, for timing.py to call
# files that still read the clock themselves, each to be moved onto engine.timing; the test fails when one no longer
# does, so that this set only shrinks
STILL_TO_MOVE: set[str] = set()


def project_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every source and text file
        out = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [f for f in out if f.endswith((".py", ".md", ".sh", ".txt", ".ini", ".toml")) or "/" not in f]


def readers(*words: str) -> set[str]:
    """The project's files that spell any of these words."""
    texts = {f: (ROOT / f).read_text(encoding="utf-8", errors="replace") for f in project_files() if (ROOT / f).is_file()}
    return {f for f, text in texts.items() if any(w in text for w in words)}


def clock_readers() -> set[str]:
    return readers(READ)


def test_only_the_timing_module_reads_the_clock():
    readers = clock_readers()
    assert CLOCK in readers
    assert readers - {CLOCK} - STILL_TO_MOVE == set(), "time it with engine.timing (timed, or now for a span)"
    assert STILL_TO_MOVE <= readers, f"these no longer read the clock themselves: {STILL_TO_MOVE - readers}"


def test_only_the_timing_module_syncs_the_device_to_read_the_clock():
    assert readers(*SYNCS) - {CLOCK, DEVICE} == set(), "time a block with engine.timing.span(device)"


def test_a_span_times_its_block_between_syncs_and_keeps_the_milliseconds():
    with span("cpu") as took:
        sum(range(200_000))
    assert took.ms > 0
    with span() as nothing:
        pass
    assert 0 <= nothing.ms < took.ms


def test_timed_runs_the_warm_up_apart_then_the_repeats_with_the_between_step_outside():
    calls, betweens = [], []
    t = timed(lambda: calls.append(len(betweens)), "cpu", repeats=3, warmup=2, between=lambda: betweens.append(1))
    assert isinstance(t, Timing) and t.repeats == 3 and len(calls) == 5
    assert len(betweens) == 4 and calls == [0, 1, 2, 3, 4]  # between every run, never after the last
    assert t.warmup_ms is not None and t.low_ms <= t.forward_ms <= t.high_ms
    assert "warm-up" in t.describe() and "median of 3" in t.describe()
    once = timed(lambda: None, repeats=1, warmup=0)
    assert once.warmup_ms is None and once.describe().endswith("(one run)")


def test_now_moves_forward():
    a = now("cpu")
    assert now() >= a


@pytest.mark.parametrize("repeats", [0, 1])
def test_timed_always_takes_at_least_one_sample(repeats):
    assert timed(lambda: None, repeats=repeats, warmup=0).repeats == 1
