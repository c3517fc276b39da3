"""The KV cache drawn from the record: per-layer shapes and bytes, its growth step by step.

Pure builders: records in, plotly Figures / pandas DataFrames / HTML out; pages place them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from drawing.palette import DECODE, MASKED, PREFILL, layout, legend_under_title, step_axis
from engine.forward.trace import StepTrace


def kv_frame(t: StepTrace) -> pd.DataFrame:
    """Per layer: what it attends to, the shape of its K (and of its V, the same), the bytes of both (measured)."""
    return pd.DataFrame([{"layer": str(x.layer), "attends to": "every position" if x.window is None else f"last {x.window}",
                          "K and V, each [batch, kv_head, pos, head_dim]": str(list(x.shapes.get("kv.keys", ()))),
                          "bytes (K+V, measured)": f"{x.kv_bytes:,}"}
                         for x in t.layers])


LAYER_GREYS = ("#555555", "#8a8a8a", "#b0b0b0")  # a layer has no colour of its own meaning: greys, and dashes
LAYER_DASHES = ("dot", "dash", "dashdot", "longdash")


def kv_growth_figure(traces: list[StepTrace], scale: float = 1.0) -> go.Figure:
    """The cache's bytes after each step: the total (each marker coloured by the phase that wrote that step's
    positions: prefill blue, decode orange), and per layer in greys. Layers that hold the same bytes at every step
    (every full-attention layer) are one line, said so, not lines drawn over each other."""
    steps = [t.step for t in traces]
    fig = go.Figure(go.Scatter(
        x=steps, y=[t.kv_bytes for t in traces], mode="lines+markers", name="all layers",
        line=dict(color="#444", width=3),
        marker=dict(size=9 * scale, color=[PREFILL if t.phase == "prefill" else DECODE for t in traces])))
    if traces and len(traces[-1].layers) <= 12:
        groups: dict[tuple, list[int]] = {}
        for layer in range(len(traces[-1].layers)):
            groups.setdefault(tuple(t.layers[layer].kv_bytes for t in traces), []).append(layer)
        for i, (series, layers) in enumerate(groups.items()):
            name = (f"each layer (all {len(layers)} the same)" if len(groups) == 1 and len(layers) > 1 else
                    f"layer {layers[0]}" if len(layers) == 1 else f"layers {', '.join(map(str, layers))} (each)")
            fig.add_trace(go.Scatter(x=steps, y=list(series), mode="lines", name=name,
                                     line=dict(width=2, color=LAYER_GREYS[i % len(LAYER_GREYS)],
                                               dash=LAYER_DASHES[i % len(LAYER_DASHES)])))
    for colour, name in ((PREFILL, "a step's marker: prefill wrote its positions"),
                         (DECODE, "a step's marker: a decode step wrote one")):  # the markers' colours, named
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(size=9 * scale, color=colour)))
    step_axis(fig, steps)
    fig.update_yaxes(title="KV cache bytes (measured)", rangemode="tozero")
    # five entries: a phone wraps them into rows, hung under the title (never over it)
    return legend_under_title(layout(fig, "KV cache size after each step", scale=scale), scale)


def kv_grid_figure(traces: list[StepTrace], layers: int, scale: float = 1.0) -> go.Figure:
    """The cache as a grid: one column per position, one row per layer, coloured by the step that wrote it.

    A sliding-window layer has dropped its oldest positions: those cells are grey.
    """
    t = traces[-1]
    prompt_len = traces[0].q_len
    n = t.kv_len
    writer = np.array([0 if p < prompt_len else p - prompt_len + 1 for p in range(n)], dtype=float)
    z = np.tile(writer, (layers, 1))
    colour = np.where(z == 0, 0.0, 1.0)
    for x in t.layers:
        if x.cached < n:  # the oldest positions have left this layer's cache
            colour[x.layer, : n - x.cached] = 0.5
    fig = go.Figure(go.Heatmap(
        z=colour, colorscale=[[0, PREFILL], [0.5, MASKED], [1, DECODE]], zmin=0, zmax=1, showscale=False,
        customdata=z, xgap=1, ygap=2,
        hovertemplate="layer %{y}, pos %{x}<br>written at step %{customdata}<extra></extra>"))
    fig.update_xaxes(title="pos (colour: the step that wrote it)")  # short: it fits a side column on a projector
    fig.update_yaxes(title="layer", autorange="reversed", dtick=1)
    return layout(fig, "What the KV cache holds", height=120 + 40 * min(layers, 16), scale=scale)
