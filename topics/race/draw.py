"""The race's charts: cache on (blue, the prefill's colour) against cache off (red: recomputed work), from the race table."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from drawing.latency import PHONE_NOTE_CHARS, note_box
from drawing.palette import PREFILL, RECOMPUTED, layout, legend_under_title, step_axis

MODES = {"cache": ("KV cache on", PREFILL), "nocache": ("KV cache off", RECOMPUTED)}


def latency_figure(df: pd.DataFrame, title: str = "Per-step latency against position", scale: float = 1.0,
                   note: str | None = None) -> go.Figure:
    """Each mode's measured ms per step against its position; `note` (drawing.caveats.compare_note) is said
    on the chart when the measured times contradict the work."""
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[df["mode"] == mode]
        pre, dec = d[d["phase"] == "prefill"], d[d["phase"] == "decode"]
        fig.add_trace(go.Scatter(x=dec["kv_len"], y=dec["latency_ms"], mode="lines+markers", name=name,
                                 line=dict(color=colour, width=4), marker=dict(size=5)))
        fig.add_trace(go.Scatter(x=pre["kv_len"], y=pre["latency_ms"], mode="markers", name=f"prefill ({name})",
                                 marker=dict(color=PREFILL, symbol="diamond", size=12, line=dict(color=colour, width=2))))
    fig.update_xaxes(title="position (kv_len)")
    fig.update_yaxes(title="ms per step (measured)", rangemode="tozero")
    fig = legend_under_title(layout(fig, title, height=420, scale=scale), scale)  # four names: a phone wraps them
    if note:
        note_box(fig, note, scale, chars=PHONE_NOTE_CHARS)  # whole inside a 390-px phone's column
    return fig


def cumulative_figure(df: pd.DataFrame, scale: float = 1.0) -> go.Figure:
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[df["mode"] == mode]
        fig.add_trace(go.Scatter(x=d["step"], y=d["cumulative_ms"], name=name, line=dict(color=colour, width=4)))
    step_axis(fig, list(df["step"]))
    fig.update_yaxes(title="total ms so far (measured)", rangemode="tozero")
    return layout(fig, "Cumulative time (measured)", height=380, scale=scale)


def flops_figure(df: pd.DataFrame, scale: float = 1.0) -> go.Figure:
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[(df["mode"] == mode)]
        fig.add_trace(go.Scatter(x=d["step"], y=d["flops_estimate"].cumsum(), name=f"{name} (estimate)",
                                 line=dict(color=colour, width=4, dash="dash")))
    step_axis(fig, list(df["step"]))
    fig.update_yaxes(title="total FLOPs (estimate)", rangemode="tozero")
    return layout(fig, "Total work (estimate): linear vs quadratic", height=380, scale=scale)  # whole in half a row


def sweep_figure(df: pd.DataFrame, column: str, title: str, scale: float = 1.0) -> go.Figure:
    fig = go.Figure()
    low, high = f"low_{column}", f"high_{column}"  # the repeats' fastest and slowest, where the sweep kept them
    spread = {low, high} <= set(df.columns)
    for mode, (name, colour) in MODES.items():
        d = df[df["mode"] == mode]
        bars = (dict(type="data", symmetric=False, array=d[high] - d[column], arrayminus=d[column] - d[low],
                     color=colour, thickness=1.5) if spread else None)
        fig.add_trace(go.Scatter(x=d["tokens"], y=d[column], mode="lines+markers", name=name, error_y=bars,
                                 line=dict(color=colour, width=4), marker=dict(size=9)))
    fig.update_xaxes(title="new tokens", type="log", tickvals=sorted(set(df["tokens"])))  # the lengths run, no minor
    fig.update_yaxes(title=f"{column.replace('_', ' ')}<br>(median{', bars min–max' if spread else ''}, measured)",
                     type="log",  # labels between them
                     tickvals=log_ticks(df[column].min(), df[column].max()), tickformat="~g")
    return layout(fig, title, height=380, scale=scale)


FLAT = 1.25  # cached time per token that grew more than this many times: why it grows too is said
APART = 1.25  # the two prefills (the same work) timed further apart than this: said to be one timing's noise


def prefill_caption(cache_ms: float, nocache_ms: float) -> str:
    """The prefill, the same work in both modes, timed once in each: where the two times stand apart, said as what
    one timing on a shared machine does, never as a difference between the modes."""
    said = (f"Prefill is the same work in both modes and is timed separately: {cache_ms:.1f} ms (cache on) and "
            f"{nocache_ms:.1f} ms (cache off). Each pass was timed once, as generation runs it; the load's warm-up "
            "passes and one untimed prefill of this prompt (warm-up, dropped) ran before both. Every clock read "
            "follows a device sync.")
    hi, lo = max(cache_ms, nocache_ms), min(cache_ms, nocache_ms)
    if lo > 0 and hi / lo > APART:
        said += (f" The same work timed ×{hi / lo:.1f} apart: one timing each, on a machine shared with other work, "
                 "so the gap is the timing's, not the cache's.")
    return said


def sweep_caption(df: pd.DataFrame) -> str:
    """What the sweep's time-per-token chart shows, read off its own medians (never what it should show), and a busy
    note when a point's repeats spread wider than drawing.caveats.WIDE or the cached time per token grew
    faster than the cache-off one (the cache-off step does more work at every length: the server moved)."""
    from drawing.caveats import BUSY, WIDE

    lo, hi = int(df["tokens"].min()), int(df["tokens"].max())
    if lo == hi:
        return f"One length ({lo} new tokens): run the sweep with two or more lengths to see how the gap grows."
    grew = {}
    words = []
    for mode, (name, _) in MODES.items():
        d = df[df["mode"] == mode].set_index("tokens")["ms_per_token"]
        a, b = float(d.loc[lo]), float(d.loc[hi])
        grew[mode] = b / a if a > 0 else float("inf")
        # the factor, whatever it is: "about flat" for a chart that rose 18% said more than the curve measured
        trend = f"{'rose' if b > a else 'fell' if b < a else 'held'} from {a:.3g} to {b:.3g} ms (×{grew[mode]:.2f})"
        words.append(f"{'with the cache' if mode == 'cache' else 'without it'}, time per token {trend}")
    text = f"From {lo} to {hi} new tokens (medians of the repeats): " + "; ".join(words) + "."
    if grew["cache"] > FLAT and grew["cache"] < grew["nocache"]:
        text += (" With the cache each step still reads every cached key and value, so it grows too, but more slowly "
                 "than recomputing them all.")
    busy = []
    if {"low_ms_per_token", "high_ms_per_token"} <= set(df.columns):
        ratio = df["high_ms_per_token"] / df["low_ms_per_token"]
        if ratio.max() > WIDE:
            row = df.loc[ratio.idxmax()]
            busy.append(f"at {int(row['tokens'])} tokens the {MODES[row['mode']][0]} repeats ranged "
                        f"{row['low_ms_per_token']:.3g}–{row['high_ms_per_token']:.3g} ms per token "
                        f"(×{ratio.max():.1f})")
    if grew["cache"] > FLAT and grew["cache"] >= grew["nocache"]:
        busy.append("the cached time per token grew as fast as the cache-off one, though it does far less work")
    if busy:
        text += f" {BUSY}: " + "; ".join(busy) + ". Run the sweep again when the server is quiet."
    return text


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks for a log axis over [lo, hi], labelled values only (never plotly's minor digits "3 4 5 … 100 2"):
    1-2-5 steps, finer (1-1.5-2-3-5-7) when the range is too short for three of those, else the two ends rounded."""
    import math

    if not (lo > 0 and hi > 0):
        return []
    for mantissas, enough in (((1, 2, 5), 3), ((1, 1.5, 2, 3, 5, 7), 2)):
        out = [float(f"{m * 10**e:.3g}") for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
               for m in mantissas if lo * 0.97 <= m * 10**e <= hi * 1.03]
        if len(out) >= enough:
            return out
    return sorted({float(f"{lo:.2g}"), float(f"{hi:.2g}")})


def progress_html(mode: str, tokens: int, total: int, clock_ms: float, finished: bool) -> str:
    """One run's progress in its own colour (cache on blue, cache off red): a bar, then tokens, time, finished.

    Streamlit's own progress bar takes the theme's colour for both runs; this one keeps one colour per meaning.
    """
    colour = MODES[mode][1]
    share = 100 * tokens / max(1, total)
    return (f'<div style="height:0.6rem;border-radius:0.3rem;background:{colour}22;margin:0.2rem 0 0.5rem 0">'
            f'<div data-testid="race-bar-{mode}" style="height:100%;width:{share:.1f}%;border-radius:0.3rem;'
            f'background:{colour}"></div></div>'
            f'<div data-testid="race-progress-{mode}" style="font-size:1.6rem;font-weight:600">'
            f'{tokens} / {total} tokens · {clock_ms / 1000:.2f} s with the prefill{" · finished" if finished else ""}'
            '</div>')  # the clock counts the prefill; the decode tiles under the race do not
