"""Latency drawn from the record: each step's median with its spread, the trend, and the work per step with the cache off.

Pure builders: records in, plotly Figures / pandas DataFrames / HTML out; pages place them.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from drawing.palette import DECODE, ESTIMATE, PREFILL, RECOMPUTED, layout, legend_under_title, step_axis
from engine.forward.trace import StepTrace


def latency_figure(traces: list[StepTrace], scale: float = 1.0, note: str | None = None,
                   height: int = 226) -> go.Figure:
    """Forward time per step: the median of its timed repeats, the bar's whisker its spread; FLOPs estimate dashed.

    TTFT is the prefill's bar (labelled), TPOT the dotted line at the median decode step. Every bar fits the axis;
    a whisker that does not is cut at the top and listed once, in one line (labels never collide). `note` (from
    drawing.caveats) is said on the chart when the measurements contradict the lesson (`note_box`)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    steps = [t.step for t in traces]
    colours = [PREFILL if t.phase == "prefill" else (DECODE if t.use_cache else RECOMPUTED) for t in traces]
    repeats = traces[0].timing.repeats if traces else 1
    fig.add_trace(go.Bar(
        x=steps, y=[t.latency_ms for t in traces], marker_color=colours,
        name=f"ms (median of {repeats})" if repeats > 1 else "ms per step",
        error_y=dict(type="data", symmetric=False, array=[t.timing.high_ms - t.forward_ms for t in traces],
                     arrayminus=[t.forward_ms - t.timing.low_ms for t in traces], color="#444", thickness=1.5),
        hovertemplate="step %{x}: %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[t.flops_estimate for t in traces], name="FLOPs (estimate)",
                             line=dict(color=ESTIMATE, dash="dash")), secondary_y=True)
    step_axis(fig, steps)
    fig.update_xaxes(range=[-0.6, max(steps, default=0) + 0.6])  # the prefill's bar at 0, nothing left of it
    ceiling, outliers = latency_ceiling(traces)
    fig.update_yaxes(title="ms (measured)", secondary_y=False, range=[0, ceiling])
    if outliers:  # whiskers cut by the robust range: a mark where each leaves the chart, the times said once, as the
        # mark's legend entry: the legend lays its words out apart from every tick and title (a note inside the
        # plot would sit over the right axis's tick labels)
        worst = sorted(outliers, key=lambda o: -o[1])[:3]  # the three tallest, in step order
        listed = ", ".join(f"step {s_}: {ms:.0f} ms" for s_, ms in sorted(worst)) + (" …" if len(outliers) > 3 else "")
        fig.add_trace(go.Scatter(x=[s for s, _ in outliers], y=[ceiling * 0.985] * len(outliers), mode="markers",
                                 marker=dict(symbol="triangle-up", size=9 * scale, color=INK_OUTLIER),
                                 name=f"cut: {listed}", hoverinfo="skip"))
    call = timing_callout(traces)
    if call is not None:
        inside = call["ttft_ms"] > 0.25 * ceiling  # on the prefill's own bar, or just above a short one
        fig.add_annotation(x=0, y=call["ttft_ms"] / 2 if inside else call["ttft_ms"], text="TTFT", showarrow=False,
                           yanchor="middle" if inside else "bottom", textangle=-90 if inside else 0,
                           font=dict(color="#fff" if inside else PREFILL, size=12 * scale))
        if call["tpot_ms"]:
            fig.add_hline(y=call["tpot_ms"], line=dict(color=DECODE, dash="dot", width=2))
            fig.add_annotation(x=max(steps), y=call["tpot_ms"], text="TPOT", showarrow=False, xanchor="right",
                               yanchor="bottom", yshift=1, font=dict(color=DECODE, size=12 * scale),
                               bgcolor="rgba(255,255,255,0.7)")
    fig.update_yaxes(title="FLOPs (estimate)", secondary_y=True, rangemode="tozero", showgrid=False)
    fig = layout(fig, "", height=height, scale=scale)  # no title: the TTFT and TPOT figures above name the chart
    # the legend in one row across the top, not one entry a line: the bars keep the height (a projector's back row);
    # beside the stage a legend the ticks' size takes two rows, so it keeps the theme's 13.5 px
    fig.update_layout(margin=dict(t=int(34 * scale)), legend=dict(y=1.0, yanchor="bottom", orientation="h", x=0,
                                                                  font=dict(size=13.5)))
    if note:
        note_box(fig, note, scale)
    return fig


NOTE_CHARS = 38  # a note's line on a chart in a side column (the sidebar open too), at presenter size, inside its plot
PHONE_NOTE_CHARS = 44  # ... on a chart across the page: 64 ran past a 390-px phone's edge ("cached decode ste")


def note_box(fig: go.Figure, note: str, scale: float, chars: int = NOTE_CHARS, above_px: float | None = None) -> None:
    """Say a note (drawing.caveats) on the chart itself: its headline in a box under the plot, below the x
    axis's title, in a bottom margin of its own (the box covers no bar, line, tick or legend, whatever the screen;
    the figure keeps its height, so a chart that fits a projector's first screen still does). A chart whose legend
    lies under its plot passes `above_px`: the box then goes over the plot instead, that many pixels above its top
    (over the labels drawn there), in a top margin of its own. Call it after `layout`."""
    from drawing.caveats import headline

    lines = textwrap.wrap(headline(note), chars, break_long_words=False, break_on_hyphens=False)  # a chart's words
    # have no wrapping of their own
    size = max(11.0, 10 * scale)  # never under 11 px, a phone's included
    line_px = size * 1.35
    box_px = int(len(lines) * line_px + 10)
    margin = fig.layout.margin
    if above_px is not None:
        fig.update_layout(margin=dict(t=int((margin.t or 10) + box_px + above_px)))
        y, anchor, shift = 1.0, "bottom", above_px
    else:
        below_axis = int(50 * scale)  # the x axis's tick labels and title
        fig.update_layout(margin=dict(b=int((margin.b or 10) + box_px + below_axis)))
        y, anchor, shift = 0.0, "top", -below_axis
    fig.add_annotation(xref="paper", yref="paper", x=0.0, y=y, xanchor="left", yanchor=anchor, align="left",
                       yshift=shift, showarrow=False, text="⚠ " + "<br>".join(lines),
                       font=dict(size=size, color="#5d4200"), bgcolor="rgba(255,246,214,0.95)",
                       bordercolor="#e0b040", borderwidth=1, borderpad=3)



INK_OUTLIER = "#444"  # the whisker's own colour


OUTLIER = 3.0  # a whisker above this many times the median bar is an outlier: marked, not scaled to


def latency_ceiling(traces: list[StepTrace]) -> tuple[float, list[tuple[int, float]]]:
    """A robust top for the latency axis, and the (step, ms) of each whisker above it.

    Every bar (a step's median) fits: a bar cut off would hide the number the chart is for. One slow repeat (a
    240 ms whisker over 5–10 ms bars) must not flatten every other bar, so a whisker above OUTLIER × the median
    decode bar (and above every bar) is cut at the top and its time named instead.
    """
    if not traces:
        return 1.0, []
    bars = [t.latency_ms for t in traces]
    tops = [t.latency_ms + t.timing.high_ms - t.forward_ms for t in traces]  # each whisker's top
    decode = [b for t, b in zip(traces, bars) if t.phase != "prefill"] or bars
    limit = max([OUTLIER * float(np.median(decode))] + bars)
    ceiling = 1.15 * max(x for x in bars + tops if x <= limit)
    return ceiling, [(t.step, top) for t, top in zip(traces, tops) if top > ceiling]


CLIMB = 1.25  # "the steps climb" when the last three decode steps take this many times the first three


def latency_trend(traces: list[StepTrace]) -> dict:
    """Do decode times climb? The mean of the first three decode steps against the last three, as the caption
    says it: a claim the bars beside it can be checked against."""
    dec = [t.latency_ms for t in traces if t.phase == "decode"]
    if len(dec) < 6:
        return {"climbs": None, "first_ms": None, "last_ms": None}
    first, last = float(np.mean(dec[:3])), float(np.mean(dec[-3:]))
    return {"climbs": last > CLIMB * first, "first_ms": first, "last_ms": last}


def timing_callout(traces: list[StepTrace]) -> dict | None:
    """Time to first token (prefill + its choice) vs time per output token (median decode step), each step's whole
    time (`latency_ms`), and a prompt token's share of the same; with the rows a decode step fed (1 with the cache,
    every position without it)."""
    pre = next((t for t in traces if t.phase == "prefill"), None)
    dec = [t for t in traces if t.phase == "decode"]
    if pre is None:
        return None
    return {"ttft_ms": pre.latency_ms, "prefill_ms_per_token": pre.latency_ms / pre.q_len, "prompt_tokens": pre.q_len,
            "tpot_ms": float(np.median([t.latency_ms for t in dec])) if dec else None, "decode_steps": len(dec),
            "tpot_range_ms": (min(t.latency_ms for t in dec), max(t.latency_ms for t in dec)) if dec else None,
            "decode_rows": float(np.median([t.q_len for t in dec])) if dec else 1.0}


LONG_PROMPT_SCENARIO = "TTFT vs TPOT: a long prompt"  # assets/scenarios.json: where the two part
NEAR = 1.5  # TTFT within this factor of TPOT (either way): "about the same"
SHORT_PROMPT = 32  # fewer prompt tokens than this: the sentence points to the long-prompt scenario


def ttft_tpot_sentence(call: dict) -> str | None:
    """TTFT against TPOT, whole and per token, read off the numbers shown beside it (`timing_callout`): a short
    prompt's prefill is little more work than a decode step (TTFT ≈ TPOT); a long prompt parts them, and per token
    the order flips. Each clause is said only where the numbers say it."""
    if not call or not call["tpot_ms"]:
        return None
    n, ttft, tpot, per = call["prompt_tokens"], call["ttft_ms"], call["tpot_ms"], call["prefill_ms_per_token"]
    said = (f"The first token took {ttft:.1f} ms, ×{ttft / tpot:.1f} one decode step ({tpot:.1f} ms): the prefill "
            f"pushed all {n} prompt token{'s' if n != 1 else ''} through in one pass.")
    if tpot > per and n > 1:
        rows = call.get("decode_rows", 1)
        said += (f" Per token it runs the other way: a prompt token cost {per:.2f} ms, a generated one {tpot:.2f} ms "
                 f"(×{tpot / per:.1f}), because ")
        if rows == 1:
            said += ("a pass's fixed costs (reading every weight, launching its kernels, the Python around them) are "
                     f"paid once for the prefill's {n} rows and once for a decode step's one.")
        else:  # the cache off: a generated token is a whole pass over every position so far, for one token
            said += (f"with the cache off each generated token is a pass over every position so far ({rows:g} rows, "
                     f"the median, against the prefill's {n}) that keeps only its last row.")
    if n < SHORT_PROMPT:
        near = ", so TTFT ≈ TPOT here" if 1 / NEAR < ttft / tpot < NEAR else ""
        said += (f" With only {n} prompt token{'s' if n != 1 else ''} the prefill is a short pass{near}; a long "
                 f"prompt (the scenario *{LONG_PROMPT_SCENARIO}*, under More) parts the two.")
    return said


def traces_frame(traces: list[StepTrace]) -> pd.DataFrame:
    """One row per step: what the CSV export and the step tables show."""
    return pd.DataFrame([{
        "step": t.step, "phase": t.phase, "cache": t.use_cache, "q_len": t.q_len, "kv_len": t.kv_len,
        "token": t.token, "token_id": t.token_id, "kv_bytes": t.kv_bytes, "forward_ms": round(t.forward_ms, 3),
        "latency_ms": round(t.latency_ms, 3),
        "forward_ms_low": round(t.timing.low_ms, 3), "forward_ms_high": round(t.timing.high_ms, 3),
        "timed_repeats": t.timing.repeats, "flops_estimate": t.flops_estimate, "bytes_estimate": t.bytes_estimate,
    } for t in traces])


def work_per_step_figure(cache_traces: list[StepTrace], nocache_traces: list[StepTrace], scale: float = 1.0,
                         note: str | None = None, height: int = 380) -> go.Figure:
    """Positions computed (q_len) at every step, with and without the cache: flat vs a climbing staircase; and the
    measured ms of each step as a line over them (right axis), so the time is read beside the work. `note`
    (drawing.caveats.compare_note) is said in the title when the times contradict the work."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=[t.step for t in nocache_traces], y=[t.q_len for t in nocache_traces],
                         name="cache off: q_len", marker_color=RECOMPUTED, opacity=0.75))
    fig.add_trace(go.Bar(x=[t.step for t in cache_traces], y=[t.q_len for t in cache_traces],
                         name="cache on: q_len", marker_color=PREFILL, opacity=0.75))
    # short names: two to a row on a phone, so the legend leaves the plot its height
    for traces, colour, name in ((nocache_traces, RECOMPUTED, "cache off: ms"), (cache_traces, PREFILL, "cache on: ms")):
        dec = [t for t in traces if t.phase == "decode"]
        fig.add_trace(go.Scatter(x=[t.step for t in dec], y=[t.latency_ms for t in dec], name=name,  # axis: measured
                                 mode="lines", line=dict(color=colour, width=2.5, dash="dot")), secondary_y=True)
    fig.update_layout(barmode="group")
    step_axis(fig, [t.step for t in nocache_traces])
    fig.update_yaxes(title="positions computed (q_len)", secondary_y=False)
    fig.update_yaxes(title="ms a decode step (measured)", secondary_y=True, rangemode="tozero", showgrid=False)
    fig = legend_under_title(layout(fig, "Work per step: positions pushed through the model, and the time it took",
                                    height=height, scale=scale), scale)  # four entries: a phone's rows grow down
    fig.update_layout(legend=dict(entrywidth=0.5, entrywidthmode="fraction"))  # two to a row: the plot keeps its height
    if note:
        note_box(fig, note, scale, chars=PHONE_NOTE_CHARS)  # whole inside a 390-px phone's column
    return fig
