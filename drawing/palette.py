"""One colour per meaning, everywhere (the stage, the views, the race, the lessons, serving), and the common look.

    prefill   blue      a position written by the prefill pass (on the serving timeline: a prefill chunk)
    decode    orange    a position written by a decode step
    new       green     what this step adds (its K/V column, its chosen token)
    recomputed red      work done again: the cache off, or a preempted request's keys and values
    masked    grey      a (query, key) pair the mask forbids: not zero, absent
    estimate  purple, dashed   computed from the config, not measured

`scale` (1.0, or larger in presenter mode) enlarges chart text and heatmap cells.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

PREFILL = "#1f77b4"
DECODE = "#ff7f0e"
NEW = "#2ca02c"
CHOSEN = NEW
RECOMPUTED = "#d62728"
MASKED = "#d9d9d9"
ESTIMATE = "#9467bd"
GREY = "#9e9e9e"
LEGEND = {"prefill (initiation phase)": PREFILL, "decode (generation phase)": DECODE, "this step": NEW,
          "recomputed (cache off)": RECOMPUTED, "masked": MASKED, "estimate": ESTIMATE}  # the two names write-ups use


INK = "#222"  # a chart's text: its title, axis titles, ticks and legend (a pale grey fades on a projector)
TICK = 13  # tick labels' size before scale (a theme's 12 px grey is hard to read from the back row)
MODEBAR_KEEPS = ("toImage", "resetScale")  # a chart's hover toolbar: a picture to save, and back to its own range
MODEBAR_REMOVES = ["zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale"]  # dragging still zooms


def layout(fig: go.Figure, title: str, height: int = 380, scale: float = 1.0) -> go.Figure:
    # The title sits at the very top and the legend in its own row below it, so they never overlap. The hover
    # toolbar keeps two buttons (MODEBAR_KEEPS), narrow enough to leave a title in a side column uncovered.
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top", font=dict(size=17 * scale, color=INK)),
                      height=int(height * scale), font=dict(size=15 * scale, color=INK),
                      margin=dict(l=10, r=10, t=int(70 * scale), b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0, font=dict(color=INK)),
                      modebar=dict(remove=MODEBAR_REMOVES, bgcolor="rgba(255,255,255,0.85)"))
    # dark, and larger unless a picture sized its own; automargin said here, not left to a template: importing
    # streamlit makes its colour-only template the default, which has none, and the titles then sit on the ticks
    for axis in [*fig.select_xaxes(), *fig.select_yaxes()]:
        axis.update(tickfont_color=INK, title_font_color=INK, automargin=True)
        if axis.tickfont.size is None:
            axis.tickfont.size = TICK * scale
        if axis.overlaying and axis.tickmode is None:  # a right axis's own round ticks: Streamlit's theme syncs
            axis.tickmode = "auto"  # them to the left axis's grid, and 'ms' read 1.41, 2.83, 4.24
    if fig.layout.legend.font.size is None:  # the theme's 13.5 px legend, unscaled, read smallest on a projector
        fig.layout.legend.font.size = TICK * scale
    return fig


def legend_under_title(fig: go.Figure, scale: float = 1.0) -> go.Figure:
    """A legend of several entries hung from under the title, so that where a narrow screen (a phone) wraps it
    into more rows it grows down, pushing the plot down, instead of up over the title (placed by `layout`, whose
    legend stands on the plot). On a wide screen, in one row, it stays where `layout` put it."""
    height = fig.layout.height
    fig.update_layout(legend=dict(yref="container", yanchor="top", y=1 - (0.02 * height + 28 * scale) / height))
    return fig


def log_ticks(lo: float, hi: float, steps=(1, 2, 5)) -> tuple[list[float], list[str]]:
    """Tick values 1-2-5 × 10^k between lo and hi, with plain labels ('0.2', '50', '1,000'): a log axis's own
    labels read '5, 2, 100, 5' on a projector."""
    vals = []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        vals += [m * 10.0**k for m in steps if lo <= m * 10.0**k <= hi]
    return vals, [f"{v:,.0f}" if v >= 1 else f"{v:g}" for v in vals]


def rate_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Powers of ten of FLOP/s, labelled '100 G', '1 T'."""
    vals, texts = [], []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        v = 10.0**k
        if lo <= v <= hi:
            unit, div = next((u, d) for u, d in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1))
                             if v >= d)
            vals.append(v)
            texts.append(f"{v / div:g} {unit}")
    return vals, texts


def step_axis(fig: go.Figure, steps: list[int], title: str = "step (0 = prefill)", **kw) -> None:
    """Whole-number ticks only: a step is never 2.5."""
    n = max(steps) if steps else 1
    fig.update_xaxes(title=title, tick0=0, dtick=max(1, round(n / 10)), tickformat="d", **kw)


def legend_html() -> str:
    """The colour key, said once (the same colours mean the same thing on every page)."""
    chips = "".join(f'<span style="display:inline-block;margin-right:14px"><span style="display:inline-block;'
                    f'width:0.9em;height:0.9em;background:{c};border-radius:2px;vertical-align:-1px"></span> {name}</span>'
                    for name, c in LEGEND.items())
    return f"<div style='font-size:0.85rem;line-height:1.6'>{chips}</div>"


def show_piece(piece: str) -> str:
    """A token's text made visible: spaces as '·', newlines as '⏎'."""
    return piece.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def axis_labels(pieces: list[str]) -> list[str]:
    """Unique axis labels ('3 ·cat'): plotly merges equal category names, so positions lead."""
    return [f"{i} {show_piece(p)}" for i, p in enumerate(pieces)]
