"""Bytes are time, drawn: the storages' times against their weights' bytes, and one decode step against its
context; each a pure function of a `records.Record` (the words beside them are topics/bytes/draw.py's)."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from drawing.palette import DECODE, ESTIMATE, GREY, PREFILL, layout, legend_under_title, log_ticks
from topics.bytes.records import Record

DODGE = 0.035  # storages of the same bytes (bf16, fp16, the bf16 model) are drawn this share of the axis apart


def dodged(rec: Record) -> dict[str, tuple[float, str]]:
    """Per storage: (where its points are drawn on the bytes axis, in MB; where its label goes). Storages of the
    same bytes are set side by side (the first on the left, its label on its left; the last on the right, its label
    on its right; one between, its label above), so that no point hides another; the axis says so."""
    bytes_of = {s: rec.get(s, "decode").weight_bytes / 1e6 for s in rec.storages() if rec.get(s, "decode")}
    step = DODGE * max(bytes_of.values(), default=0)
    out = {}
    for mb_ in sorted(set(round(b) for b in bytes_of.values())):
        same = [s for s, b in bytes_of.items() if round(b) == mb_]
        for i, s in enumerate(same):
            at = ("top center" if len(same) == 1 or 0 < i < len(same) - 1 else
                  "middle left" if i == 0 else "middle right")
            out[s] = (bytes_of[s] + (i - (len(same) - 1) / 2) * step, at)
    return out


def storage_figure(rec: Record, scale: float = 1.0) -> go.Figure:
    """Time against the weights' bytes: decode and prefill, measured (filled, bars min–max) and their bounds (open),
    each point labelled with its storage."""
    fig = go.Figure()
    times, drawn = [], dodged(rec)
    pad = "\u00a0\u00a0"  # a label beside its marker, not touching it
    for kind, colour in (("decode", DECODE), ("prefill", PREFILL)):
        for s in rec.storages():
            p = rec.get(s, kind)
            if p is None or s not in drawn:
                continue
            bound = p.memory_ms(rec.rounds) if kind == "decode" else p.compute_ms(rec.rounds)
            times += [p.median_ms, max(p.samples_ms), bound]
            x, at = drawn[s]
            label = s + pad if at == "middle left" else pad + s if at == "middle right" else s
            hover = f"{s} {kind}: {p.median_ms:.1f} ms, {p.weight_bytes / 1e6:,.0f} MB of weights<extra></extra>"
            fig.add_trace(go.Scatter(x=[x], y=[p.median_ms], mode="markers+text", text=[label],
                                     textposition=at, name=f"{kind} {s} measured", hovertemplate=hover,
                                     marker=dict(color=colour, size=12),
                                     error_y=dict(type="data", symmetric=False,
                                                  array=[max(p.samples_ms) - p.median_ms],
                                                  arrayminus=[p.median_ms - min(p.samples_ms)]),
                                     showlegend=False))
            if bound > p.median_ms:  # beaten: the probe's rate, not a bound (why_prefill says so)
                continue
            fig.add_trace(go.Scatter(x=[x], y=[bound], mode="markers", name=f"{kind} {s} bound",
                                     hovertemplate=f"{s} {kind}, its bound: {bound:.1f} ms<extra></extra>",
                                     marker=dict(color=ESTIMATE, size=10, symbol="circle-open"), showlegend=False))
    for name, colour, symbol in (("decode, measured", DECODE, "circle"),  # one legend row beside lesson 12's test
                                 ("prefill, measured", PREFILL, "circle"), ("its bound (estimate)", ESTIMATE, "circle-open")):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(color=colour, size=10, symbol=symbol)))
    if times:  # room above the highest label and below the lowest (a log axis: its range in powers of ten), and
        lo, hi = min(times) / 1.6, max(times) * 2.6  # ticks labelled whole (plotly's own read "5, 2, 100, 5")
        vals, texts = log_ticks(lo, hi)
        fig.update_yaxes(range=[math.log10(lo), math.log10(hi)], tickmode="array", tickvals=vals, ticktext=texts)
    fig.update_yaxes(type="log", title="ms per pass (log)<br>median, bars min–max")
    same = any(at != "top center" for _x, at in drawn.values())  # some storages share their bytes
    fig.update_xaxes(title="weight bytes read (MB, counted)"  # two short lines: whole on a phone
                     + ("<br>equal bytes drawn side by side" if same else ""))
    return legend_under_title(layout(fig, "Time per pass against the weights' bytes", scale=scale), scale)


def context_figure(rec: Record, scale: float = 1.0) -> go.Figure:
    pts = rec.context_passes()
    line = rec.line()
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[p.context for p in pts], y=[p.median_ms for p in pts], mode="markers",
                             name="decode step, measured (median, bars min–max)", marker=dict(color=DECODE, size=10),
                             error_y=dict(type="data", symmetric=False, color=DECODE,
                                          array=[max(p.samples_ms) - p.median_ms for p in pts],
                                          arrayminus=[p.median_ms - min(p.samples_ms) for p in pts])))
    if line:
        xs = [0, max(p.context for p in pts)]
        fig.add_trace(go.Scatter(x=xs, y=[line.intercept_ms + line.slope_ms * x for x in xs], mode="lines",
                                 name="line fitted", line=dict(color=DECODE, dash="dot")))
        own = line.cache_probed
        fig.add_trace(go.Scatter(x=xs, y=[line.intercept_ms + line.predicted_slope_ms * x for x in xs],
                                 mode="lines", name="predicted slope (K/V bytes / "
                                 + ("the cache's plain read)" if own else "read rate)"),
                                 line=dict(color=ESTIMATE, dash="dash")))
        if line.compute_slope_ms > 0:
            both = line.predicted_slope_ms + line.compute_slope_ms
            fig.add_trace(go.Scatter(x=xs, y=[line.intercept_ms + both * x for x in xs], mode="lines",
                                     name="bytes' time + arithmetic's (estimate)",
                                     line=dict(color=ESTIMATE, dash="dot", width=2)))
        fitted = "K/V time = the step at no context (fitted" + (", past the data)" if line.crossing > xs[1] else ")")
        for x, slope, name, colour in ((line.crossing, line.slope_ms, fitted, DECODE),
                                       (line.predicted_crossing, line.predicted_slope_ms,
                                        "K/V bytes = weights' (estimate)", ESTIMATE)):
            if x < 2 * xs[1]:  # each on its own line: the fitted one's, the predicted slope's
                fig.add_vline(x=x, line=dict(color=colour, dash="dot", width=1))
                fig.add_trace(go.Scatter(x=[x], y=[line.intercept_ms + slope * x], mode="markers",
                                         name=name, marker=dict(color=colour, size=12, symbol="x")))
    pair = rec.evicted()
    if pair:
        e, full = pair
        fig.add_trace(go.Scatter(x=[full.context], y=[e.median_ms], mode="markers",
                                 name=f"the step at {full.context:,}, its cache evicted to {e.context:,}",
                                 marker=dict(color=GREY, size=13, symbol="star")))
    fig.update_xaxes(title=f"context (positions cached, {pts[0].arith if pts else rec.reference})")
    fig.update_yaxes(title="ms per decode step", rangemode="tozero")
    # taller than the default: its legend (seven entries) takes four rows on a phone, and the plot keeps its own room
    return legend_under_title(layout(fig, "The context's bytes: one decode step's time", height=460, scale=scale),
                              scale)
