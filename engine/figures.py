"""Pure figure and table builders: traces in, plotly Figures / pandas DataFrames out.

Pages place what these return; nothing here knows about streamlit. Colours are
chosen to stay distinct on a projector: prefill blue, decode orange, chosen green.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.trace import StepTrace

PREFILL = "#1f77b4"
DECODE = "#ff7f0e"
CHOSEN = "#2ca02c"
GREY = "#9e9e9e"
FONT = dict(size=15)


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    # The title sits at the very top and the legend in its own row below it, so they never overlap.
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top"), height=height, font=FONT,
                      margin=dict(l=10, r=10, t=85, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0))
    return fig


def show_piece(piece: str) -> str:
    """A token's text made visible: spaces as '·', newlines as '⏎'."""
    return piece.replace(" ", "·").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def axis_labels(pieces: list[str]) -> list[str]:
    """Unique axis labels ('3 ·cat'): plotly merges equal category names, so positions lead."""
    return [f"{i} {show_piece(p)}" for i, p in enumerate(pieces)]


# ---------------------------------------------------------------- tokens


def token_chips_html(prompt: list[tuple[int, str]], generated: list[tuple[int, str]],
                     fed_positions: set[int]) -> str:
    """Prompt tokens and generated tokens as coloured chips; the ones fed this step outlined."""
    chips = []
    for pos, (tid, piece) in enumerate(prompt + generated):
        colour = PREFILL if pos < len(prompt) else DECODE
        border = "3px solid #111" if pos in fed_positions else "3px solid transparent"
        chips.append(
            f'<span title="position {pos}, id {tid}" style="display:inline-block;margin:2px;padding:2px 6px;'
            f'border-radius:6px;background:{colour}22;border:{border};font-family:monospace;font-size:1.05rem">'
            f'{html.escape(show_piece(piece))}<sub style="color:{colour};font-size:0.7rem"> {tid}</sub></span>'
        )
    return "<div style='line-height:2.2'>" + "".join(chips) + "</div>"


# ---------------------------------------------------------------- this step


def step_story(t: StepTrace, prompt_len: int) -> str:
    """What this forward pass computed and what it read from the cache, in words."""
    if t.phase == "prefill":
        return (f"**Prefill**: all {t.q_len} prompt positions in one pass (matrix × matrix over all s positions: "
                f"compute-bound). q_len = {t.q_len}, kv_len = {t.kv_len}."
                + (" Their keys and values are now in the KV cache." if t.use_cache else
                   " The KV cache is off, so nothing is kept for the next step."))
    if t.use_cache:
        return (f"**Decode, cache on**: one position (matrix × vector: memory-bound). q_len = 1, kv_len = {t.kv_len}: "
                f"the keys and values of the other {t.kv_len - 1} positions were read from the cache, "
                "and this position's K and V were appended to it.")
    return (f"**Decode, cache off**: recomputing all {t.q_len} positions again, because no keys or values "
            f"were kept. q_len = {t.q_len}, kv_len = {t.kv_len}; only the last position's logits are used.")


def shapes_frame(t: StepTrace) -> pd.DataFrame:
    return pd.DataFrame([{"tensor": r.tensor, "shape": "[" + ", ".join(map(str, r.shape)) + "]", "dims": r.dims,
                          "source": r.source} for r in t.shapes])


# ---------------------------------------------------------------- attention


def attention_heatmap(weights: np.ndarray, row_labels: list[str], col_labels: list[str], title: str) -> go.Figure:
    """One head's attention [row, kv_pos] as a heatmap; hover shows the exact weight."""
    fig = go.Figure(go.Heatmap(z=weights, x=col_labels, y=row_labels, colorscale="Blues", zmin=0, zmax=1,
                               hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="query position")
    fig.update_xaxes(title="key position (kv_pos)", tickangle=-60)
    return _layout(fig, title, height=max(320, 24 * len(row_labels) + 160))


def heads_grid(weights: np.ndarray, title: str, cols: int = 4) -> go.Figure:
    """Every head of one layer [head, row, kv_pos] as small multiples."""
    heads = weights.shape[0]
    rows = -(-heads // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in range(heads)],
                        horizontal_spacing=0.03, vertical_spacing=0.08)
    for h in range(heads):
        fig.add_trace(go.Heatmap(z=weights[h], colorscale="Blues", zmin=0, zmax=1, showscale=False,
                                 hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>"),
                      row=h // cols + 1, col=h % cols + 1)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_xaxes(showticklabels=False)
    return _layout(fig, title, height=200 * rows + 80)


def assembled_attention(traces: list[StepTrace], layer: int, head: int) -> np.ndarray:
    """The prefill square plus one new row per decode step: [query_pos, kv_pos], NaN where masked.

    Earlier rows never change: decode only adds a row (with or without the cache).
    """
    rows = []
    for t in traces:
        if t.attention is None:
            continue
        for r in t.attention[layer, head].float().numpy():
            rows.append(r)
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


# ---------------------------------------------------------------- KV cache


def kv_frame(t: StepTrace) -> pd.DataFrame:
    return pd.DataFrame([{"layer": i, "keys [batch, kv_head, pos, head_dim]": str(list(s)),
                          "values": str(list(s)), "bytes (K+V, measured)": b}
                         for i, (s, b) in enumerate(zip(t.kv_shapes, t.kv_bytes_per_layer))])


def kv_growth_figure(traces: list[StepTrace]) -> go.Figure:
    steps = [t.step for t in traces]
    fig = go.Figure(go.Scatter(x=steps, y=[t.kv_bytes for t in traces], mode="lines+markers", name="total",
                               line=dict(color=DECODE, width=3)))
    if traces and traces[-1].kv_bytes_per_layer:
        for layer in range(len(traces[-1].kv_bytes_per_layer)):
            fig.add_trace(go.Scatter(x=steps, y=[t.kv_bytes_per_layer[layer] if t.kv_bytes_per_layer else 0
                                                 for t in traces], mode="lines", name=f"layer {layer}",
                                     line=dict(width=1, dash="dot")))
    fig.update_xaxes(title="step (0 = prefill)")
    fig.update_yaxes(title="KV cache bytes (measured)", rangemode="tozero")
    return _layout(fig, "KV cache size after each step")


def kv_grid_figure(traces: list[StepTrace], layers: int) -> go.Figure:
    """The cache as a grid: one column per position, one row per layer, coloured by the step that wrote it."""
    writer = []  # for each cached position, the step that wrote it
    for t in traces:
        if t.kv_shapes:
            writer += [t.step] * (t.kv_len - len(writer))
    z = np.array([writer] * layers, dtype=float) if writer else np.zeros((layers, 0))
    fig = go.Figure(go.Heatmap(
        z=np.where(z == 0, 0.0, 1.0), colorscale=[[0, PREFILL], [1, DECODE]], zmin=0, zmax=1, showscale=False,
        customdata=z, xgap=1, ygap=2, hovertemplate="layer %{y}, pos %{x}<br>written at step %{customdata}<extra></extra>"))
    fig.update_xaxes(title="pos (blue: prefill, orange: one column per decode step)")
    fig.update_yaxes(title="layer", autorange="reversed", dtick=1)
    return _layout(fig, "What the KV cache holds", height=120 + 40 * layers)


# ---------------------------------------------------------------- next token


def next_token_figure(t: StepTrace) -> go.Figure:
    labels = [show_piece(c.token) for c in t.top]
    colours = [CHOSEN if c.token_id == t.token_id else GREY for c in t.top]
    fig = go.Figure([
        go.Bar(x=labels, y=[c.p_before for c in t.top], name="before warpers (softmax of logits)",
               marker_color="#c6dbef"),
        go.Bar(x=labels, y=[c.p_after for c in t.top], name="after warpers (what was drawn from)",
               marker_color=colours),
    ])
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="probability", range=[0, 1])
    return _layout(fig, f"Next token: {show_piece(t.token)!s} (green) — {t.rule}")


# ---------------------------------------------------------------- latency


def latency_figure(traces: list[StepTrace]) -> go.Figure:
    """Forward time per step as bars (prefill vs decode), cumulative time, FLOPs estimate on a second axis."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    colours = [GREY if t.warmup else (PREFILL if t.phase == "prefill" else DECODE) for t in traces]
    fig.add_trace(go.Bar(x=[t.step for t in traces], y=[t.latency_ms for t in traces], marker_color=colours,
                         name="latency ms (measured; grey = warm-up)",
                         hovertemplate="step %{x}: %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=[t.step for t in traces], y=np.cumsum([t.latency_ms for t in traces]),
                             name="cumulative ms", line=dict(color="#444", dash="dot")))
    fig.add_trace(go.Scatter(x=[t.step for t in traces], y=[t.flops_estimate for t in traces],
                             name="FLOPs (estimate)", line=dict(color="#9467bd")), secondary_y=True)
    fig.update_xaxes(title="step (0 = prefill)")
    fig.update_yaxes(title="ms", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title="FLOPs (estimate)", secondary_y=True, rangemode="tozero")
    return _layout(fig, "Latency of every step")


def traces_frame(traces: list[StepTrace]) -> pd.DataFrame:
    """One row per step: what the CSV export and the step tables show."""
    return pd.DataFrame([{
        "step": t.step, "phase": t.phase, "cache": t.use_cache, "q_len": t.q_len, "kv_len": t.kv_len,
        "token": t.token, "token_id": t.token_id, "kv_bytes": t.kv_bytes, "latency_ms": round(t.latency_ms, 3),
        "warmup": t.warmup, "flops_estimate": t.flops_estimate, "bytes_estimate": t.bytes_estimate,
    } for t in traces])


# ---------------------------------------------------------------- lessons


def work_per_step_figure(cache_traces: list[StepTrace], nocache_traces: list[StepTrace]) -> go.Figure:
    """Positions computed (q_len) at every step, with and without the cache: flat vs a climbing staircase."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=[t.step for t in nocache_traces], y=[t.q_len for t in nocache_traces],
                         name="KV cache off", marker_color="#d62728"))
    fig.add_trace(go.Bar(x=[t.step for t in cache_traces], y=[t.q_len for t in cache_traces],
                         name="KV cache on", marker_color=PREFILL))
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="step (0 = prefill)")
    fig.update_yaxes(title="positions computed (q_len)")
    return _layout(fig, "Work per step: positions pushed through the model")


def padded_batch_frame(pieces: tuple[tuple[str, ...], ...], input_ids, attention_mask) -> pd.DataFrame:
    """A left-padded batch as a table: one row per prompt, one column per position; padding shown as PAD."""
    rows = []
    for b, row_pieces in enumerate(pieces):
        rows.append({f"pos {p}": (f"PAD ({int(input_ids[b, p])})" if int(attention_mask[b, p]) == 0
                                  else f"{show_piece(piece)} ({int(input_ids[b, p])})")
                     for p, piece in enumerate(row_pieces)})
    return pd.DataFrame(rows, index=[f"batch {b}" for b in range(len(pieces))])
