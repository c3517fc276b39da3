"""One request as one picture: its steps left to right, each with the time it took on this device.

Drawn from physics.request's measured steps; prefill and decode keep their colours (blue, orange),
the CPU's steps and the copies are grey. Under the steps, one bar shows each step's share of the request.
"""

from __future__ import annotations

import textwrap
from html import escape

from drawing.palette import DECODE, GREY, PREFILL
from drawing.svg import INK, SOFT, W, arrow, defs, picture_html, text, text_width
from physics.request import RequestTimeline

COLOURS = {"prefill": PREFILL, "decode loop": DECODE}


def _wrap(words: str, width: int) -> list[str]:
    return textwrap.wrap(words, width, break_long_words=False, break_on_hyphens=False)


def _ms(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 1000 else (f"{ms:.1f} ms" if ms >= 1 else f"{ms:.3f} ms")


def _spread(runs_ms: tuple[float, ...]) -> tuple[str, str]:
    """How the request's time was taken, and its spread: ('each step's median of 3 runs', 'whole runs 11.8–13.0 ms;
    a warm-up run excluded'), or ('one run', '')."""
    if len(runs_ms) < 2:
        return "one run", ""
    low, high = _ms(min(runs_ms)), _ms(max(runs_ms))
    unit = high.split()[-1]
    low = low.removesuffix(f" {unit}")  # '41.2–98.9 ms', the unit said once where both share it
    return (f"each step's median of {len(runs_ms)} runs",
            f"whole runs {low}–{high}; a warm-up run before them excluded; ")


def request_svg(timeline: RequestTimeline) -> str:
    steps = timeline.steps
    n = len(steps)
    gap = 12
    bw = (W - 20 - gap * (n - 1)) / n
    y = 8
    out = [defs()]
    for i, s in enumerate(steps):
        x = 10 + i * (bw + gap)
        colour = COLOURS.get(s.name, GREY)
        lines = _wrap(s.note, int((bw - 16) / text_width("x", 11)))[:4]  # inside its box's edge
        title = _wrap(f"{i + 1}. {s.name}", 13)[:2]
        dash = "" if s.per_request else ' stroke-dasharray="6 4"'  # once per server, not per request
        out.append(f'<g data-role="request-step" data-step="{escape(s.name)}" data-ms="{s.ms:.4f}">'
                   f'<rect x="{x:.1f}" y="{y}" width="{bw:.1f}" height="176" rx="7" fill="{colour}" '
                   f'fill-opacity="{0.16 if s.per_request else 0.06}" stroke="{colour}" stroke-width="2"{dash}/>'
                   + "".join(text(x + 8, y + 24 + 18 * k, line, 12.5, weight="bold") for k, line in enumerate(title))
                   + text(x + 8, y + 72, _ms(s.ms), 18, weight="bold", fill=INK)
                   + text(x + 8, y + 94, s.where, 11, fill=SOFT)
                   + "".join(text(x + 8, y + 118 + 16 * k, line, 11, fill=SOFT) for k, line in enumerate(lines))
                   + '</g>')
        if i < n - 1:
            out.append(arrow(x + bw + 1, y + 160, x + bw + gap - 1, y + 160, width=2))
    # the request's own time (loading happens once per server, not per request): one bar, shared out by step
    per = [s for s in steps if s.per_request]
    total = timeline.per_request_ms or 1.0
    y += 200
    how, spread = _spread(timeline.runs_ms)
    out.append(text(10, y + 4, f"one request: {_ms(total)} measured here, {how}", 14, weight="bold"))
    out.append(text(10, y + 24, f"{spread}loading the weights is once per server", 12, fill=SOFT))
    y += 20
    x = 10.0
    for s in per:
        w = (W - 20) * s.ms / total
        out.append(f'<rect data-role="share" x="{x:.1f}" y="{y + 14}" width="{max(0.0, w):.1f}" height="22" '
                   f'fill="{COLOURS.get(s.name, GREY)}" fill-opacity="0.75"/>')
        if w > 90:
            out.append(text(x + 6, y + 31, f"{s.name} {s.ms / total:.0%}", 12, fill="#fff", weight="bold"))
        x += w
    height = y + 46
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" width="100%" role="img" '
            f'data-role="request">' + "".join(out) + '</svg>')


def request_html(timeline: RequestTimeline) -> str:
    alt = "One request, measured: " + "; ".join(f"{s.name} {_ms(s.ms)}" for s in timeline.steps)
    return picture_html(request_svg(timeline), alt, "dl-request")
