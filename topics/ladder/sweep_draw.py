"""Prefill across the ridge, drawn from its record (topics.ladder.sweep.PrefillSweep): sweep in, figure out.

    sweep_figure    ms per prompt token against s (both log scales): the measured prefill, its two lower bounds
                    per token (the weights' bytes spread over s tokens fall as 1/s; the arithmetic per token stays
                    flat), and the ridge marked where they cross: left of it memory-bound, right of it compute-bound
    sweep_caption   the chart in one sentence, from its numbers

The bounds are estimates (FLOPs and bytes from the model's figures); the times are measured.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from drawing.latency import note_box
from drawing.palette import ESTIMATE, GREY, PREFILL, layout
from engine.measure.caveats import sweep_note
from topics.ladder.draw import log_ticks, short_device
from topics.ladder.sweep import PrefillSweep


SHORT = {"memory-bound": "memory", "compute-bound": "compute", "memory side": "mem. side",
         "compute side": "comp. side", "overhead-bound": "overhead"}  # each s's label on the chart, short


def sweep_figure(sweep: PrefillSweep, scale: float = 1.0, height: int = 430) -> go.Figure:
    """ms per prompt token against s, with both bounds per token and the ridge; each point hovers its label."""
    pts = sweep.points
    xs = [p.s for p in pts]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=xs, y=[p.memory_ms / p.s for p in pts], name="memory bound per token (estimate)", mode="lines",
        line=dict(color=ESTIMATE, width=2, dash="dash"), hovertemplate="s = %{x}: %{y:.3g} ms<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=xs, y=[p.compute_ms / p.s for p in pts], name="compute bound per token (estimate)", mode="lines",
        line=dict(color=ESTIMATE, width=2, dash="dot"), hovertemplate="s = %{x}: %{y:.3g} ms<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=xs, y=[p.per_token_ms for p in pts], name="prefill, measured: per prompt token", mode="lines+markers+text",
        line=dict(color=PREFILL, width=4), marker=dict(size=11), text=[p.label for p in pts],
        texttemplate=[SHORT.get(p.kind, p.kind) for p in pts], textposition="top center",
        textfont=dict(size=11 * scale),
        error_y=dict(type="data", symmetric=False, thickness=2, array=[(p.high_ms - p.median_ms) / p.s for p in pts],
                     arrayminus=[(p.median_ms - p.low_ms) / p.s for p in pts]),
        hovertemplate="s = %{x}: %{y:.3g} ms per prompt token (median; bar: min–max)<br>%{text}<extra></extra>"))
    last = pts[-1]
    for y, words in ((last.memory_ms / last.s, "memory bound"), (last.compute_ms / last.s, "compute bound")):
        fig.add_annotation(x=math.log10(last.s), y=math.log10(y), text=words, showarrow=False, xanchor="right",
                           yanchor="top", font=dict(size=12 * scale, color=ESTIMATE))  # each bound named on its line
    crossing = sweep.crossing_s
    if crossing:
        fig.add_vline(x=crossing, line=dict(color=GREY, width=2, dash="dot"))
        fig.add_annotation(x=math.log10(crossing), y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=f"ridge {sweep.ridge:.0f} FLOP/byte<br>(s ≈ {crossing:.0f})",
                           font=dict(size=12 * scale))
    ys = [v for p in pts for v in (p.per_token_ms, p.memory_ms / p.s, p.compute_ms / p.s, p.low_ms / p.s)]
    lo, hi = min(ys), max(ys)
    vals, texts = log_ticks(lo / 1.6, hi * 1.6)
    fig.update_yaxes(type="log", title="ms per prompt token", tickmode="array", tickvals=vals, ticktext=texts,
                     range=[math.log10(lo / 1.6), math.log10(hi * 1.6)])
    fig.update_xaxes(type="log", title="s: prompt tokens in one prefill (log scale)", tickmode="array", tickvals=xs,
                     ticktext=[f"{s:,}" for s in xs], range=[math.log10(min(xs) / 1.4), math.log10(max(xs) * 1.4)])
    layout(fig, f"Prefill across the ridge: {sweep.rung}", height=height, scale=scale)
    fig.update_layout(title=dict(subtitle=dict(
        text=f"{sweep.weights} · {short_device(sweep.device)}, {sweep.dtype}<br>{sweep.how}",
        font=dict(size=12 * scale))), margin=dict(t=int(116 * scale), b=int(40 * scale)),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0, traceorder="normal"))
    note = sweep_note(sweep)
    if note:  # a busy server said under the chart, with the spread that shows it (STYLE 24)
        note_box(fig, note, scale, chars=64)
    return fig


def sweep_caption(sweep: PrefillSweep) -> str:
    """What the chart shows, from its numbers (never more)."""
    pts = sweep.points
    if not pts:
        return "No prefill was timed."
    first, last = pts[0], pts[-1]
    parts = [f"{sweep.rung} ({sweep.weights}) on {sweep.device}, {sweep.dtype}: a prompt token cost "
             f"{first.per_token_ms:.3g} ms at s = {first.s} ({first.label}) and {last.per_token_ms:.3g} ms at "
             f"s = {last.s} ({last.label})."]
    if sweep.crossing_s:
        parts.append(f"The intensity (estimate) meets this device's ridge of {sweep.ridge:.0f} FLOP/byte near "
                     f"s ≈ {sweep.crossing_s:.0f}: below it the weights' bytes set a prefill's time, above it the "
                     "arithmetic does.")
    else:
        side = "above" if first.intensity >= sweep.ridge else "below"
        parts.append(f"Every s timed is {side} this device's ridge of {sweep.ridge:.0f} FLOP/byte (estimate).")
    if sweep.measured_crossing_s:
        parts.append(f"Measured, the label turns from memory-bound to compute-bound at s = {sweep.measured_crossing_s}.")
    if sweep.left_out:
        parts.append(f"Not timed: {'; '.join(sweep.left_out)}.")
    return " ".join(parts)
