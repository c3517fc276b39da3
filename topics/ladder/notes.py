"""When a size ladder or its pass over n rows contradicts the lesson beside it, say so: one sentence, or None.

    ladder_note(ladder)    a size ladder: a grown rung whose label flipped back against the lesson, or a pass whose
                           repeats spread wide
    curve_note(curve)      one pass over n rows: more rows measured faster than fewer, or a wide spread
    noisy(ladder)          the note that flags a whole ladder (its own, or its pass over n rows'), or None: clean

The numbers stay as measured (drawing/caveats.py: the same rule for a run's steps). Pure functions of the records.
"""

from __future__ import annotations

from drawing.caveats import BUSY, NOISE, WIDE, Spread, wide_note

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
    return wide_note(f"{label}'s {m.what}", m)


ORDER_SLACK = 1.1  # a pass over more rows measured this many times faster than one over fewer contradicts physics


def curve_note(curve) -> str | None:
    """One pass over n rows (topics.ladder.curve.Curve): where a pass over more rows measured faster than one over
    fewer by more than ORDER_SLACK (more rows read the same weights and do more arithmetic, so that order is not the
    hardware's; a busy server where either pass's repeats spread wider than WIDE, else timing noise), or else the
    pass whose timed runs spread the widest, when wider than WIDE; None when all held. The one-row pass is left out
    of the order: it runs a graph of its own, and Curve.outlier names it where it is slower."""
    for kind in ("prefill", "batch"):
        pts = curve.of(kind)
        for a, b in zip(pts, pts[1:]):
            if a.rows == 1:  # the one-row pass runs a graph of its own: Curve.outlier names it, the caption says so
                continue
            if b.median_ms * ORDER_SLACK < a.median_ms:
                what = "prefill of" if kind == "prefill" else "batch of"
                flip = (f"the {what} {b.rows} took {b.median_ms:.1f} ms, less than the {what} {a.rows} "
                        f"({a.median_ms:.1f} ms), though it reads the same weights and does more arithmetic")
                if max(a.high_ms / a.low_ms, b.high_ms / b.low_ms) > WIDE:
                    return (f"{BUSY}: {flip}: other work's time as much as the hardware's. Measure again when the "
                            "server is quiet.")
                return (f"{NOISE}: {flip}; each pass's repeats agreed, so the two differ by how they ran and by "
                        "the minute each was timed, not by the hardware's rule. Measure again.")
    points = [p for p in curve.points if len(p.samples_ms) > 1 and p.low_ms > 0]
    if not points:
        return None
    p = max(points, key=lambda p: p.high_ms / p.low_ms)
    return wide_note(f"the pass over {p.rows} rows ({p.kind})", Spread(p.low_ms, p.high_ms, len(p.samples_ms)))


def noisy(ladder) -> str | None:
    """What flags a measured ladder as noisy: its own note (`ladder_note`) or its pass over n rows' (`curve_note`);
    None when both held. A noisy ladder is kept and shown when picked, never put in a clean one's place, and it
    draws no knee verdict."""
    curve = next((r.curve for r in ladder.rungs if r.curve), None)
    return ladder_note(ladder) or (curve_note(curve) if curve is not None else None)
