"""The race's charts: cache on (blue, the prefill's colour) against cache off (red: recomputed work), from the race table."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from engine.draw.palette import PREFILL, RECOMPUTED, layout, step_axis

MODES = {"cache": ("KV cache on", PREFILL), "nocache": ("KV cache off", RECOMPUTED)}


def latency_figure(df: pd.DataFrame, title: str = "Per-step latency against position", scale: float = 1.0) -> go.Figure:
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
    return layout(fig, title, height=420, scale=scale)


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
    return layout(fig, "Total work, estimated: linear with the cache, quadratic without", height=380, scale=scale)


def sweep_figure(df: pd.DataFrame, column: str, title: str, scale: float = 1.0) -> go.Figure:
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[df["mode"] == mode]
        fig.add_trace(go.Scatter(x=d["tokens"], y=d[column], mode="lines+markers", name=name,
                                 line=dict(color=colour, width=4), marker=dict(size=9)))
    fig.update_xaxes(title="new tokens", type="log")
    fig.update_yaxes(title=f"{column.replace('_', ' ')} (median, measured)", type="log")
    return layout(fig, title, height=380, scale=scale)


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
            f'{tokens} / {total} tokens · {clock_ms / 1000:.2f} s{" · finished" if finished else ""}</div>')
