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
          "recomputed (cache off)": RECOMPUTED, "masked": MASKED, "estimate": ESTIMATE}  # the articles' two names


def layout(fig: go.Figure, title: str, height: int = 380, scale: float = 1.0) -> go.Figure:
    # The title sits at the very top and the legend in its own row below it, so they never overlap.
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top", font=dict(size=17 * scale)),
                      height=int(height * scale), font=dict(size=15 * scale),
                      margin=dict(l=10, r=10, t=int(70 * scale), b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0))
    return fig


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
