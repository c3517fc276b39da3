"""When a measurement contradicts the lesson beside it, say so: one sentence, or None.

The numbers stay as measured. A busy server (other users, other tabs, a test run) can make a decode step
slower than the prefill, a cache-off step faster than a cached one, or a cache-off run speed up while its work
grows. A chart that shows that without a word leaves the lecturer to explain it; these functions decide, from
the traces alone, whether the chart needs a sentence and write it, with the spread that shows the noise:

    latency_note(traces)            one run's steps: a wide spread of one step's repeats, a cached decode step
                                    slower than the prefill, cache-off decode steps getting faster
    compare_note(cache, nocache)    the same steps with the cache on and off: the cache-off run faster in
                                    total, or at steps where it does several times the work
    ladder_note(ladder)             a size ladder: a grown rung whose label flipped back against the lesson, or
                                    a pass whose repeats spread wide
    curve_note(curve)               one pass over n rows: more rows measured faster than fewer, or a wide spread

Pure functions of StepTraces (timing.samples_ms, latency_ms, flops_estimate): no clock is read here.
"""

from __future__ import annotations

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


def latency_note(traces) -> str | None:
    """One run: what on its latency chart contradicts the lesson, with the spread; None when nothing does."""
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
    return _compose(list(traces), traces, found, "The bars are as measured; the work did not change.")


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
    """The first clause of a note: what a chart shows in its title (the whole note goes under it)."""
    return note.split("; ")[0].split(". ")[0].rstrip(".")


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


EXPECTED = {"prefill": "compute-bound", "decode": "memory-bound"}  # what a grown rung shows (the lesson)


def on_lessons_side(kind: str, expected: str) -> bool:
    """'memory side' (within ×3 of the memory bound, not within ×2) is weaker than 'memory-bound', not against it."""
    return kind.split("-")[0].split(" ")[0] == expected.split("-")[0]


def ladder_flips(ladder) -> list[tuple[object, str, object]]:
    """Where a ladder contradicts its lesson: a grown rung (random weights) whose prefill is not compute-bound, or
    whose decode is not memory-bound, though a smaller grown rung's was. A bigger model only moves further from
    its overheads, so such a flip is a busy moment, not the hardware. [(rung, "prefill" | "decode", the smaller
    rung that showed the lesson)], smallest first."""
    grown = [r for r in ladder.rungs if not r.trained]
    out = []
    for i, r in enumerate(grown):
        for phase, expected in EXPECTED.items():
            if on_lessons_side(getattr(r, phase).kind, expected):
                continue
            showed = [s for s in grown[:i] if getattr(s, phase).kind == expected]
            if showed:
                out.append((r, phase, showed[-1]))
    return out


def _flip_words(r, phase: str, smaller) -> str:
    m = getattr(r, phase)
    retimed = f", timed {r.timed} times" if getattr(r, "timed", 1) > 1 else ""
    return (f"{r.label}'s {phase} measured {m.median_ms:.1f} ms ({m.low_ms:.1f}–{m.high_ms:.1f} over its {m.runs} "
            f"timed runs{retimed}) and reads {m.label}, though the smaller {smaller.label}'s was "
            f"{EXPECTED[phase]}")


def ladder_note(ladder) -> str | None:
    """A size ladder (topics.ladder.record.Ladder): where it contradicts its lesson (`ladder_flips`), with the
    spread, and the pass whose timed runs spread the widest, when wider than WIDE; its label is then the server's
    noise as much as the hardware. None when every pass held steady and no label flipped."""
    flips = ladder_flips(ladder)
    if flips:
        return (f"{BUSY}: " + "; ".join(_flip_words(*f) for f in flips) + ". A bigger model does not move back "
                "towards its overheads: that label is other work's time as much as the hardware's. Measure again "
                "when the server is quiet.")
    passes = [(r.label, m) for r in ladder.rungs for m in (r.prefill, r.decode, r.nocache, r.lean, r.lean_prefill,
                                                          r.recipe)
              if m is not None and m.runs > 1 and m.low_ms > 0]
    if not passes:
        return None
    label, m = max(passes, key=lambda p: p[1].high_ms / p[1].low_ms)
    return _wide(f"{label}'s {m.what}", m)


ORDER_SLACK = 1.1  # a pass over more rows measured this many times faster than one over fewer contradicts physics


def curve_note(curve) -> str | None:
    """One pass over n rows (topics.ladder.curve.Curve): where a pass over more rows measured faster than one over
    fewer (by more than ORDER_SLACK: more rows read the same weights and do more arithmetic, so that order is not
    the hardware's; a busy server where either pass's repeats spread wider than WIDE, else timing noise), or else
    the pass whose timed runs spread the widest, when wider than WIDE; None when all held."""
    for kind in ("prefill", "batch"):
        pts = curve.of(kind)
        for a, b in zip(pts, pts[1:]):
            if b.median_ms * ORDER_SLACK < a.median_ms:
                what = "prefill of" if kind == "prefill" else "batch of"
                flip = (f"the {what} {b.rows} took {b.median_ms:.1f} ms, less than the {what} {a.rows} "
                        f"({a.median_ms:.1f} ms), though it reads the same weights and does more arithmetic")
                if max(a.high_ms / a.low_ms, b.high_ms / b.low_ms) > WIDE:
                    return (f"{BUSY}: {flip}: other work's time as much as the hardware's. Measure again when the "
                            "server is quiet.")
                graph = " (one row runs a compiled graph of its own)" if a.rows == 1 else ""
                return (f"{NOISE}: {flip}; each pass's repeats agreed, so the two differ by how they ran{graph} and "
                        "by the minute each was timed, not by the hardware's rule. Measure again.")
    points = [p for p in curve.points if len(p.samples_ms) > 1 and p.low_ms > 0]
    if not points:
        return None
    p = max(points, key=lambda p: p.high_ms / p.low_ms)
    return _wide(f"the pass over {p.rows} rows ({p.kind})", _Spread(p.low_ms, p.high_ms, len(p.samples_ms)))


@dataclass(frozen=True)
class _Spread:
    low_ms: float
    high_ms: float
    runs: int


def _wide(what: str, m) -> str | None:
    """The busy note for a measurement (low_ms, high_ms, runs) whose timed runs spread wider than WIDE, else None."""
    ratio = m.high_ms / m.low_ms
    if ratio <= WIDE:
        return None
    return (f"{BUSY}: {what} ranged {m.low_ms:.1f}–{m.high_ms:.1f} ms over its {m.runs} timed runs (×{ratio:.1f}). "
            "A median that far from its fastest run is other work's time as much as the hardware's, and so is its "
            "label: measure again when the server is quiet.")
