"""One pass, n rows, drawn from its record (topics.ladder.curve.Curve): curve in, figure and words out.

    curve_figure    ms per pass against n rows (both log scales): the prefill of n tokens and the decode step for
                    n sequences, measured (medians, min-max bars); the two lower bounds of the prefill, a flat line
                    (bytes ÷ bandwidth) and a slope (FLOPs ÷ peak), estimates; the predicted knee (the ridge in
                    rows) and each kind's measured knee marked
    curve_caption   the chart in sentences, every figure read off the same record
    curve_claim     what a lesson quotes of it

The times are measured; FLOPs, bytes and so both bounds are estimates, said so on the chart.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from drawing.latency import note_box
from drawing.palette import DECODE, ESTIMATE, GREY, PREFILL, layout
from engine.measure.caveats import curve_note
from engine.measure.roofline import DeviceRoof, percent
from topics.ladder.curve import KNEE, Curve
from topics.ladder.draw import log_ticks

NAMES = {"prefill": "prefill of n tokens", "batch": "decode step for n sequences"}
COLOURS = {"prefill": PREFILL, "batch": DECODE}
SHORT_DEVICE = {"cpu": "this CPU", "cuda": "this GPU"}


def _ms(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def curve_figure(curve: Curve, roof: DeviceRoof, where: str, scale: float = 1.0, height: int = 430) -> go.Figure:
    """ms per pass against n, both kinds, with the prefill's two bounds and the knees. `where` says where it was
    measured, under the title ('measured on this server (…)', 'a recording made on …, 2026-11-28')."""
    fig = go.Figure()
    pre = curve.of("prefill")
    xs = sorted({p.rows for p in curve.points})
    fig.add_trace(go.Scatter(
        x=[p.rows for p in pre], y=[p.memory_ms for p in pre], name="memory bound: bytes ÷ bandwidth (estimate)",
        mode="lines", line=dict(color=ESTIMATE, width=2, dash="dash"),
        hovertemplate="n = %{x}: %{y:.3g} ms (memory bound)<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[p.rows for p in pre], y=[p.compute_ms for p in pre], name="compute bound: FLOPs ÷ peak (estimate)",
        mode="lines", line=dict(color=ESTIMATE, width=2, dash="dot"),
        hovertemplate="n = %{x}: %{y:.3g} ms (compute bound)<extra></extra>"))
    for kind in ("prefill", "batch"):
        pts = curve.of(kind)
        if not pts:
            continue
        fig.add_trace(go.Scatter(
            x=[p.rows for p in pts], y=[p.median_ms for p in pts], name=f"{NAMES[kind]}, measured",
            mode="lines+markers", line=dict(color=COLOURS[kind], width=4), marker=dict(size=10),
            error_y=dict(type="data", symmetric=False, thickness=2, array=[p.high_ms - p.median_ms for p in pts],
                         arrayminus=[p.median_ms - p.low_ms for p in pts]),
            customdata=[[p.median_ms / pts[0].median_ms, percent(p.share), "bandwidth" if p.bound == "memory"
                         else "matmul peak"] for p in pts],
            hovertemplate="n = %{x}: %{y:.3g} ms (median; bar: min–max)<br>×%{customdata[0]:.2f} the one-row pass"
                          "<br>%{customdata[1]} of the %{customdata[2]}<extra>" + NAMES[kind] + "</extra>"))
    for p in curve.of("decode"):  # the rung's own decode step, on the kernel a one-row step runs best with
        fig.add_trace(go.Scatter(
            x=[p.rows], y=[p.median_ms], name="the decode step, its one-row kernel", mode="markers",
            marker=dict(color=DECODE, size=15, symbol="star", line=dict(color="#222", width=1)),
            hovertemplate="one decode step: %{y:.3g} ms (median)<extra>its one-row kernel</extra>"))
    knee = curve.predicted_knee("prefill", roof)
    if knee:
        fig.add_vline(x=knee, line=dict(color=GREY, width=2, dash="dot"))
        fig.add_annotation(x=math.log10(knee), y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=f"ridge ≈ {knee:.0f} rows (predicted)", font=dict(size=12 * scale))
    for kind in ("prefill", "batch"):
        n = curve.measured_knee(kind)
        p = next((p for p in curve.of(kind) if p.rows == n), None)
        if p is not None:
            fig.add_annotation(x=math.log10(n), y=math.log10(p.median_ms), text=f"×{KNEE:g} at n = {n}",
                               showarrow=True, arrowhead=2, ax=(-46 if kind == "prefill" else 40) * scale,
                               ay=(-30 if kind == "prefill" else 34) * scale,
                               font=dict(size=12 * scale, color=COLOURS[kind]))
    ys = [v for p in curve.points for v in (p.low_ms, p.high_ms, p.memory_ms, p.compute_ms)]
    lo, hi = min(ys), max(ys)
    lo = max(lo, min(p.low_ms for p in curve.points) / 30)  # the compute bound may enter from below (an H200's
    #                                                          one-row bound lies three decades under its pass)
    vals, texts = log_ticks(lo / 1.5, hi * 1.5)
    fig.update_yaxes(type="log", title="ms per pass (median, measured)", tickmode="array", tickvals=vals,
                     ticktext=texts, range=[math.log10(lo / 1.5), math.log10(hi * 1.5)])
    ticks = [n for n in xs if n & (n - 1) == 0]  # the doublings; the context's own pass (384) keeps its point
    fig.update_xaxes(type="log", title="n: rows in one pass (log scale)", tickmode="array", tickvals=ticks,
                     ticktext=[tick(n) for n in ticks], tickangle=0,
                     range=[math.log10(min(xs) / 1.4), math.log10(max(xs) * 1.4)])
    layout(fig, f"One pass over n rows: {curve.rung}, {curve.dtype}", height=height, scale=scale)
    # the legend one entry a row at the figure's foot, under the x axis's ticks and title, in a margin sized for
    # it: where it lies does not move with the plot's height (a note over the plot takes some of that)
    entries = sum(1 for t in fig.data if t.name)
    legend_px = entries * 20 * scale + 8
    fig.update_layout(title=dict(subtitle=dict(text=where, font=dict(size=12 * scale))),
                      margin=dict(t=int(84 * scale), b=int(56 * scale + legend_px)),
                      legend=dict(orientation="v", yref="container", yanchor="bottom", y=0, x=0, traceorder="normal",
                                  font=dict(size=12 * scale)))
    note = curve_note(curve)
    if note:  # a busy server said on the chart, with the figures that show it (STYLE 24): over the plot and the
        note_box(fig, note, scale, chars=64, above_px=22 * scale)  # ridge's label, since the legend lies under it
    return fig


def tick(n: int) -> str:
    """An x tick short enough to stay level beside its neighbours: 512, 1k, 4k."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def _at(curve: Curve, kind: str, rows: int):
    return next((p for p in curve.of(kind) if p.rows == rows), None)


def eight(curve: Curve) -> int:
    """The n the captions quote for 'several rows in one pass': 8 where timed, else the nearest timed n above 1."""
    ns = [p.rows for p in curve.of("prefill") if p.rows > 1]
    return 8 if 8 in ns else min(ns, key=lambda n: abs(math.log2(n / 8)), default=1)


def curve_caption(curve: Curve, roof: DeviceRoof) -> str:
    """The chart in sentences: the flat stretch, the knee (predicted and measured), the slope; each a figure off the
    record, and one sentence of reading that says whether this run showed the roofline or did not."""
    n = eight(curve)
    pre, bat = curve.ratio("prefill", n), curve.ratio("batch", n)
    if pre is None:
        return "Fewer than two row counts were timed: there is no curve to read."
    said = (f"One pass over {n} rows took ×{pre:.2f} the one-row time as a prefill of {n} tokens"
            + (f" and ×{bat:.2f} as a decode step for {n} sequences" if bat is not None else "")
            + f", for ×{n} the arithmetic.")
    knee = curve.predicted_knee("prefill", roof)
    measured = {k: curve.measured_knee(k) for k in ("prefill", "batch")}
    if knee:
        said += (f" The roofline predicts the knee at ~{knee:.0f} rows, where the pass's intensity meets the "
                 f"ridge ({roof.ridge:.1f} FLOP/byte in {roof.dtype}).")
    found = [f"{m} rows ({'prefill' if k == 'prefill' else 'batch'})" for k, m in measured.items() if m]
    if found:
        said += f" Measured, the time first reached ×{KNEE:g} the one-row time at " + " and ".join(found) + "."
    star, one = next(iter(curve.of("decode")), None), _at(curve, "batch", 1)
    if star is not None and one is not None and star.median_ms < one.median_ms:
        said += (f" Every pass here runs on the kernel that multiplies many rows; the rung's own decode step (the "
                 f"star) runs a one-row kernel that streams its weights faster: {_ms(star.median_ms)} ms against "
                 f"{_ms(one.median_ms)} ms for one row on the many-row kernel.")
    last = curve.of("prefill")[-1]
    said += (f" At {last.rows} rows the prefill took {_ms(last.median_ms)} ms, ×{last.median_ms / last.compute_ms:.2f} "
             f"its compute bound ({percent(last.compute_ms / last.median_ms)} of the matmul peak).")
    if knee and measured["prefill"] and 1 / 3 <= measured["prefill"] / knee <= 3:
        said += (" The knee sits where the ridge puts it: below it a pass waits on reading its weights "
                 "(memory-bound), past it on its arithmetic (compute-bound).")
    elif knee:
        said += (" The measured knee is not within ×3 of the predicted one: this run does not show the roofline "
                 "cleanly (a busy machine, or kernels far from their roofs); measure again.")
    return said


def curve_claim(curve: Curve, roof: DeviceRoof, phase: str, where: str) -> str:
    """What lessons 2 (prefill) and 3 (decode) quote: the pass over n rows at the big rung, in its own numbers, with
    the verdict's own label (roofline.verdict), so it says what was measured, whatever the lesson expects."""
    from engine.measure.roofline import verdict

    n = eight(curve)
    knee = curve.predicted_knee("prefill", roof)
    weights = f"Measured on {where} at {curve.rung} ({curve.weights})"
    if phase == "decode":
        one = next(iter(curve.of("decode")), None) or _at(curve, "batch", 1) or _at(curve, "prefill", 1)
        v = verdict(one.median_ms, one.flops, one.bytes_moved, roof)
        batch = curve.ratio("batch", n)
        many = (f"the same step for {n} sequences at once took ×{batch:.2f} the time of one" if batch else  # timed
                f"one pass over {n} rows (a prefill of {n} tokens; the step for {n} sequences was not timed here) "
                f"took ×{curve.ratio('prefill', n):.2f} the time of one row")
        return (f"{weights}: one decode step took {_ms(one.median_ms)} ms against {_ms(one.memory_ms)} ms to read "
                f"its weights once at the bandwidth measured here: **{v.label}**. On the kernel that runs many rows, "
                f"{many}, for ×{n} the arithmetic"
                + (f"; the ridge puts the knee near {knee:.0f} rows." if knee else "."))
    last = curve.of("prefill")[-1]
    v = verdict(last.median_ms, last.flops, last.bytes_moved, roof)
    m = curve.measured_knee("prefill")
    return (f"{weights}: a prefill of {n} tokens took ×{curve.ratio('prefill', n):.2f} the time of one token"
            + (f"; the time first reached ×{KNEE:g} the one-token time at {m} tokens (the ridge predicts "
               f"~{knee:.0f})" if m and knee else "")
            + f". A prefill of {last.rows} tokens took {_ms(last.median_ms)} ms against a compute bound of "
            f"{_ms(last.compute_ms)} ms: **{v.label}**.")
