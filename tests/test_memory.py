"""Memory goes back after a big run: a session's cache-off run is freed on Reset."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from engine import Stepper
from tests.models import GOOD

# ------------------------------------------------------------------ memory goes back after a big run


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.slow
def test_memory_goes_back_after_a_cache_off_run(bundled_lm):
    """A cache-off run of 150 tokens holds every step's trace; Reset (free) and release_memory give it back.

    Compared with the run's own peak, not with a fixed figure: at least half of what the run added is returned.
    """
    from physics.machine import release_memory

    release_memory()
    before = rss()
    s = Stepper(bundled_lm, GOOD, use_cache=False, max_new_tokens=150, stop_on_eos=False, repeats=1)
    s.run()
    peak = rss()
    s.free()
    del s
    release_memory()
    after = rss()
    grew = peak - before
    assert grew > 8 * 2**20, f"the run added only {grew / 2**20:.1f} MiB: nothing to measure"
    assert after - before < grew / 2, (before / 2**20, peak / 2**20, after / 2**20)
