"""When a measurement contradicts the lesson beside it, say so: one sentence, or None.

The numbers stay as measured. A busy server (other users, other tabs, a test run) can make a decode step
slower than the prefill, a cache-off step faster than a cached one, or a cache-off run speed up while its work
grows. A chart that shows that without a word leaves the lecturer to explain it; these functions decide, from
the traces alone, whether the chart needs a sentence and write it, with the spread that shows the noise:

    latency_note(traces)            one run's steps: a wide spread of one step's repeats, a cached decode step
                                    slower than the prefill, cache-off decode steps getting faster
    compare_note(cache, nocache)    the same steps with the cache on and off: the cache-off run faster in
                                    total, or at steps where it does several times the work
    wide_note(what, m)              one measurement whose timed runs spread wider than WIDE

(A size ladder's and the pass over n rows' notes are the ladder's own: topics/ladder/notes.py.)

Pure functions of StepTraces (timing.samples_ms, latency_ms, flops_estimate): no clock is read here.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

WIDE = 2.0  # a step whose slowest timed repeat took more than this many times its fastest: the server was busy
MORE_WORK = 2.0  # a comparison is only a contradiction where the slower-looking side does this much less work
BUSY = "The server was busy while these were timed"
NOISE = "Timing noise"  # a comparison flipped against the lesson, though no step's repeats were wide apart


def is_note(text: str) -> bool:
    """Is this one of the notes made here (a page shows them as warnings: the only honest warnings of a run)?"""
    return text.startswith((BUSY, NOISE))


def spread(traces) -> tuple[object, float] | None:
    """The step whose timed repeats spread the widest, and its high/low ratio; None when nothing was repeated."""
    repeated = [t for t in traces if t.timing.repeats > 1 and t.timing.low_ms > 0]
    if not repeated:
        return None
    t = max(repeated, key=lambda t: t.timing.high_ms / t.timing.low_ms)
    return t, t.timing.high_ms / t.timing.low_ms


def _spread_words(t, ratio: float) -> str:
    return (f"step {t.step}'s {t.timing.repeats} timed runs ranged {t.timing.low_ms:.1f}–{t.timing.high_ms:.1f} ms "
            f"(×{ratio:.1f})")


def _across(traces) -> str | None:
    """The spread across a run's cached decode steps, when each was timed once (their work barely changes)."""
    ms = [t.latency_ms for t in traces if t.phase == "decode" and t.use_cache and t.timing.repeats == 1]
    if len(ms) < 3:
        return None
    med = statistics.median(ms)
    if not med or max(ms) <= WIDE * med:
        return None
    return f"cached decode steps ranged {min(ms):.1f}–{max(ms):.1f} ms around a median of {med:.1f} ms"


def latency_note(traces, coda: str = "The bars are as measured; the work did not change.") -> str | None:
    """One run: what on its latency chart contradicts the lesson, with the spread; None when nothing does. `coda`
    names what shows the times: the chart's bars, or (a lesson quoting a step's time, no chart) the times."""
    traces = list(traces)
    pre = next((t for t in traces if t.phase == "prefill"), None)
    found = []
    if pre is not None:
        slower = [t for t in traces if t.phase == "decode" and t.use_cache and t.latency_ms > pre.latency_ms]
        if slower:
            t = max(slower, key=lambda t: t.latency_ms)
            work = pre.flops_estimate / t.flops_estimate if t.flops_estimate else 0
            found.append(f"decode step {t.step} ({t.latency_ms:.1f} ms) took longer than the prefill "
                         f"({pre.latency_ms:.1f} ms), though the prefill does ×{work:.1f} its work (estimate)"
                         + (f"; {len(slower) - 1} more decode step{'s' if len(slower) > 2 else ''} did too"
                            if len(slower) > 1 else ""))
    off = [t for t in traces if t.phase == "decode" and not t.use_cache]
    if len(off) >= 6:
        first, last = statistics.mean(t.latency_ms for t in off[:3]), statistics.mean(t.latency_ms for t in off[-3:])
        grew = sum(t.flops_estimate for t in off[-3:]) / max(1.0, sum(t.flops_estimate for t in off[:3]))
        if last < first:
            found.append(f"cache-off decode steps got faster ({first:.1f} ms on average for the first three, "
                         f"{last:.1f} ms for the last three) while their work grew ×{grew:.1f} (estimate)")
    return _compose(list(traces), traces, found, coda)


def _compose(timed, steady, found: list[str], coda: str) -> str | None:
    """'The server was busy…: <the spread that shows it>; <what contradicts the lesson>. <coda>' when a step's
    repeats (or the cached decode steps of `steady`) spread wider than WIDE; else, when something contradicts the
    lesson, 'Timing noise: <what>; <the plainer cause>. <coda>'; else None. The first clause is the headline."""
    wide = spread(timed)
    evidence = _spread_words(*wide) if wide is not None and wide[1] > WIDE else _across(steady)
    if evidence:
        return f"{BUSY}: " + "; ".join([evidence] + found) + f". {coda}"
    if found:
        return (f"{NOISE}: " + "; ".join(found) + "; at this size a step is mostly fixed costs, and other work "
                f"on the server shifts whole steps. {coda}")
    return None


def headline(note: str) -> str:
    """The first clause of a note: what a chart shows in its title (the whole note goes under it). A sentence ends
    at a full stop before a capital: "e.g. step 7" does not end one."""
    return re.split(r"\.\s+(?=[A-Z])", note.split("; ")[0])[0].rstrip(".")


def compare_note(cache, nocache) -> str | None:
    """The same run with the cache on and off: where the measured times say the opposite of the work.

    A contradiction is the cache-off run faster in total, or a decode step where the cache-off pass does at least
    MORE_WORK times the work (estimate) and was timed faster than the cached one."""
    on = {t.step: t for t in cache if t.phase == "decode"}
    off = {t.step: t for t in nocache if t.phase == "decode"}
    steps = sorted(set(on) & set(off))
    if not steps:
        return None
    total_on, total_off = sum(on[s].latency_ms for s in steps), sum(off[s].latency_ms for s in steps)
    flipped = [s for s in steps if off[s].latency_ms < on[s].latency_ms
               and off[s].flops_estimate >= MORE_WORK * on[s].flops_estimate]
    if total_off >= total_on and not flipped:
        return None
    found = []
    if total_off < total_on:
        found.append(f"in total the cache-off decode steps took {total_off:.0f} ms, the cached ones {total_on:.0f} ms")
    if flipped:
        s = max(flipped, key=lambda s: on[s].latency_ms - off[s].latency_ms)
        work = off[s].flops_estimate / on[s].flops_estimate
        found.append(f"at {len(flipped)} of {len(steps)} steps the cache-off pass was timed faster, e.g. step {s}: "
                     f"{off[s].latency_ms:.1f} ms against {on[s].latency_ms:.1f} ms for ×{work:.1f} the work (estimate)")
    return _compose(list(cache) + list(nocache), cache, found,
                    "The times are as measured; the work (estimate) is what the cache saves.")


@dataclass(frozen=True)
class Spread:
    low_ms: float
    high_ms: float
    runs: int


def wide_note(what: str, m) -> str | None:
    """The busy note for a measurement (low_ms, high_ms, runs) whose timed runs spread wider than WIDE, else None."""
    ratio = m.high_ms / m.low_ms
    if ratio <= WIDE:
        return None
    return (f"{BUSY}: {what} ranged {m.low_ms:.1f}–{m.high_ms:.1f} ms over its {m.runs} timed runs (×{ratio:.1f}). "
            "A median that far from its fastest run is other work's time as much as the hardware's, and so is its "
            "label: measure again when the server is quiet.")
