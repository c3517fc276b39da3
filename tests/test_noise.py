"""A measurement that contradicts the lesson gets a sentence on its chart; a quiet run gets none (synthetic traces)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from drawing.caveats import BUSY, compare_note, headline, latency_note
from engine.forward.run import Timing


@dataclass(frozen=True)
class T:
    """The fields of a StepTrace the rule reads."""

    step: int
    phase: str
    timing: Timing
    flops_estimate: float
    use_cache: bool = True

    @property
    def latency_ms(self) -> float:
        return self.timing.forward_ms + self.timing.sample_ms


def step(i: int, *runs: float, cache: bool = True, flops: float | None = None) -> T:
    phase = "prefill" if i == 0 else "decode"
    work = flops if flops is not None else (5e7 if i == 0 else (1e7 if cache else 1e7 * (5 + i)))
    return T(i, phase, Timing(tuple(runs), None), work, cache)


def quiet_run(cache: bool = True) -> list[T]:
    """A prefill of 8 ms, then decode steps of 4 ms (cache on) or climbing (cache off), repeats within 10%."""
    out = [step(0, 8.0, 8.2, 8.4, cache=cache)]
    for i in range(1, 9):
        ms = 4.0 if cache else 4.0 + 0.5 * i
        out.append(step(i, ms, ms * 1.05, ms * 1.1, cache=cache))
    return out


def test_a_quiet_run_gets_no_note():
    assert latency_note(quiet_run()) is None
    assert latency_note(quiet_run(cache=False)) is None
    assert compare_note(quiet_run(), quiet_run(cache=False)) is None


def test_a_decode_step_slower_than_the_prefill_is_said_with_the_spread_that_shows_the_busy_server():
    run = quiet_run()
    run[8] = step(8, 27.3, 9.0, 88.0)  # the walk-through's busy server: 27.3 ms beside a 21.8 ms prefill
    run[0] = step(0, 21.8, 21.0, 22.5)
    note = latency_note(run)
    assert note.startswith(BUSY)
    assert "step 8's 3 timed runs ranged 9.0–88.0 ms" in note  # the spread, in numbers
    assert "decode step 8 (27.3 ms) took longer than the prefill (21.8 ms)" in note
    assert headline(note) == f"{BUSY}: step 8's 3 timed runs ranged 9.0–88.0 ms (×9.8)"


def test_a_whole_step_slower_without_a_wide_spread_is_called_timing_noise_not_a_busy_server():
    run = quiet_run()
    run[5] = step(5, 8.9, 9.0, 9.3)  # every repeat slow: the spread cannot show a busy server
    note = latency_note(run)
    assert note.startswith("Timing noise: decode step 5 (9.0 ms) took longer than the prefill (8.2 ms)")
    assert BUSY not in note


def test_one_wide_spread_alone_says_the_server_was_busy():
    run = quiet_run()
    run[3] = step(3, 4.0, 3.9, 12.0)
    note = latency_note(run)
    assert note == f"{BUSY}: step 3's 3 timed runs ranged 3.9–12.0 ms (×3.1). The bars are as measured; the work " \
                   "did not change."


def test_cache_off_steps_getting_faster_while_their_work_grows_is_said():
    run = [step(0, 8.0, 8.1, 8.2, cache=False)]
    for i, ms in enumerate([24.8, 24.0, 23.5, 20.0, 15.0, 14.8, 14.5, 14.2], start=1):  # "watch the work grow"...
        run.append(step(i, ms * 0.98, ms, ms * 1.02, cache=False))
    note = latency_note(run)
    assert "cache-off decode steps got faster (24.1 ms on average for the first three, 14.5 ms for the last three)" \
        in note
    assert "while their work grew" in note


def test_cache_off_faster_than_cache_on_is_said_in_a_comparison():
    on, off = quiet_run(), quiet_run(cache=False)
    off[5] = step(5, 3.0, cache=False)  # one pass each, as the race times them
    note = compare_note(on, off)
    assert "at 1 of 8 steps the cache-off pass was timed faster, e.g. step 5: 3.0 ms against 4.2 ms" in note
    assert note.startswith("Timing noise")


def test_a_cache_off_run_faster_in_total_with_a_wide_spread_across_cached_steps_is_a_busy_server():
    on = [step(0, 8.0)] + [step(i, 30.0 if i in (2, 3, 4) else 4.0) for i in range(1, 9)]  # one pass each
    off = [step(0, 8.0, cache=False)] + [step(i, 5.0, cache=False) for i in range(1, 9)]
    note = compare_note(on, off)
    assert note.startswith(f"{BUSY}: cached decode steps ranged 4.0–30.0 ms around a median of 4.0 ms")
    assert "in total the cache-off decode steps took 40 ms, the cached ones 110 ms" in note


@pytest.mark.parametrize("runs", [(), (4.0,)])
def test_nothing_to_compare_gives_no_note(runs):
    one = [step(0, 8.0)] + ([step(1, *runs)] if runs else [])
    assert compare_note(one, []) is None


def test_a_compare_notes_headline_keeps_its_example_whole():
    """Lesson 5's chart note read "…the cache-off pass was timed faster, e.g" and stopped: the headline cut at the
    full stop of "e.g.". It ends where the clause does, with the step it gives and its times."""
    off = quiet_run(cache=False)
    off[7] = step(7, 2.0, 2.05, 2.1, cache=False)  # ×12 the cached step's work, timed at half its time
    note = compare_note(quiet_run(), off)
    said = headline(note)
    assert "e.g. step 7:" in said and said.endswith("the work (estimate)"), said
    assert said == note.split("; ")[0].rstrip("."), note


def test_a_lesson_that_quotes_a_steps_time_without_a_chart_never_points_at_bars(monkeypatch):
    """Lessons 2 and 3 quote their steps' times beside the stage, with no chart: their busy note ended "The bars
    are as measured", pointing at bars nowhere on the page."""
    from lessons import course

    run = quiet_run()
    run[3] = step(3, 4.0, 3.9, 12.0)
    said = []
    monkeypatch.setattr(course.st, "warning", lambda text, **_: said.append(text))
    course.busy(run)
    assert said and said[0].startswith(BUSY) and "bars" not in said[0] and said[0].endswith(
        "The times are as measured; the work did not change.")
