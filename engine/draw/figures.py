"""Pure figure and table builders: traces in, plotly Figures / pandas DataFrames out.

Pages place what these return; nothing here knows about streamlit. The colours and the common
look are engine/draw/palette.py.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.forward.estimates import matmuls
from engine.draw.palette import (  # noqa: F401 - axis_labels, legend_html and show_piece are the pages' too
    CHOSEN, DECODE, ESTIMATE, GREY, MASKED, NEW, PREFILL, RECOMPUTED, axis_labels, layout, legend_html, show_piece,
    step_axis)
from engine.forward.trace import StepTrace
from engine.units import human_flops

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


def shapes_frame(t: StepTrace) -> pd.DataFrame:
    return pd.DataFrame([{"tensor": r.tensor, "shape": "[" + ", ".join(map(str, r.shape)) + "]", "dims": r.dims,
                          "source": r.source} for r in t.shapes])


def matmul_rows(t: StepTrace, spec, layer: int = 0) -> list[dict]:
    """One layer's five attention matmuls, W_o and the MLP at this step, with the cache and without (estimates):
    [{op, shape (its rows written q), grows, flops_on, flops_off}]."""
    n = t.kv_len
    if t.phase == "prefill":
        q_on = t.q_len
        on = matmuls(spec, t.q_len, 0, layer)
    elif t.use_cache:  # a decode step (1 row) or a speculative verify pass (k+1 rows) on the cache
        q_on = t.q_len
        on = matmuls(spec, t.q_len, t.past, layer)
    else:  # a cache-off decode step: what the same step costs with the cache
        q_on = 1
        on = matmuls(spec, 1, n - 1, layer)
    off = matmuls(spec, n, 0, layer)
    return [{"op": a["op"], "shape": a["shape"].replace(f"[{q_on}, ", "[q, ", 1), "grows": a["grows"],
             "flops_on": a["flops"], "flops_off": b["flops"]} for a, b in zip(on, off)]


def matmul_frame(t: StepTrace, spec, layer: int = 0) -> pd.DataFrame:
    """`matmul_rows` as a table: one shape per matmul with its rows written q (this step's fed rows with the cache;
    every position without), FLOPs in words."""
    return pd.DataFrame([{"matmul": r["op"], "shape (q rows)": r["shape"], "cache on": human_flops(r["flops_on"]),
                          "cache off": human_flops(r["flops_off"]), "off / on": _ratio(r), "grows with": r["grows"]}
                         for r in matmul_rows(t, spec, layer)])


def _ratio(r: dict) -> str:
    return f"×{r['flops_off'] / r['flops_on']:.1f}" if r["flops_on"] else "—"


NUMBERED = ("①", "②", "③", "④", "⑤")  # the attention's five matmuls; W_o and the MLP follow them


def _short_flops(flops: float) -> str:
    """131072 -> '131 k', 1.7e6 -> '1.7 M': three figures at most, the unit (FLOP) said once, in the caption."""
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if flops >= div:
            return f"{flops / div:.3g} {unit}"
    return f"{flops:.3g}"


def _one_line_shape(shape: str, heads: int) -> str:
    """A shape short enough for one line of a side column: '8 heads × [q, 32] × [32, 13]' -> '8 × [q, 32] × [32, 13]'
    (once per head), '[q, 256] through 590,400 params' -> '[q, 256] · 590k params'."""
    shape = shape.replace(f"{heads} heads × ", f"{heads} × ")
    head, sep, tail = shape.partition(" through ")
    if not sep:
        return shape
    params = float(tail.split()[0].replace(",", ""))
    return f"{head} · {_short_flops(params)} params".replace(" k params", "k params").replace(" M params", "M params")


def matmul_figure(t: StepTrace, spec, layer: int = 0, scale: float = 1.0) -> go.Figure:
    """matmul_frame as one table a projector's side column can read on its first screen.

    Four columns, one line a row, every line short enough for its column (so plotly never wraps a cell by itself
    and the height below is the table's real height: no scrolling, nothing off the edge); the five numbered
    ① to ⑤; the two that grow with the context shaded; FLOPs (estimates) in three figures, their unit said once."""
    rows = matmul_rows(t, spec, layer)
    names = [f"{NUMBERED[i]} {r['op']}" if i < len(NUMBERED) else f"+ {r['op']}" for i, r in enumerate(rows)]
    shapes = [_one_line_shape(r["shape"], spec.heads) for r in rows]
    on = [_short_flops(r["flops_on"]) for r in rows]
    off = [f"{_short_flops(r['flops_off'])} {_ratio(r).replace('.0', '')}" for r in rows]
    size = 11.5 * scale
    line = size * 1.25
    shade = ["#fff3e0" if r["grows"] == "context" else "#ffffff" for r in rows]
    fig = go.Figure(go.Table(
        columnwidth=[0.29, 0.37, 0.14, 0.20],
        header=dict(values=["<b>matmul</b>", "<b>shape</b> (q = rows fed)", "<b>cached</b>", "<b>no cache</b>"],
                    fill_color="#f0f2f6", align="left", font=dict(size=size), height=line + 6),
        cells=dict(values=[names, shapes, on, off], align="left", font=dict(size=size), height=line + 6,
                   fill_color=[shade] * 4, line_color="#e6e6e6")))
    header = 2.45 * size  # plotly draws a header taller than its minimum: measured in the browser at both scales
    fig.update_layout(height=int(header + len(rows) * (line + 6) + 12), margin=dict(l=2, r=2, t=2, b=2))
    return fig


ARTICLE_SENTENCE = "A red jacket compliments any outfit."  # the articles' GPT-2 example: 7 GPT-2 tokens


def gpt2_shapes_frame(t: StepTrace, spec, prompt_len: int) -> pd.DataFrame:
    """The articles' own numbers first: GPT-2 (124M) on the articles' sentence, whatever the prompt on screen,
    beside the live model on its own prompt (each counted by its own tokenizer).

    GPT-2's figures come from its published config (12 heads, head_dim 64), its token count from its own bundled
    tokenizer: "A red jacket compliments any outfit." gives [1, 12, 7, 64], [1, 12, 1, 64], [1, 12, 8, 64]. Both
    columns move with the run: after this run's n-th decode step GPT-2's cache would hold 7 + n positions.
    """
    from engine.load import gpt2
    from engine.measure.kvcalc import from_table

    ref, s = from_table("gpt2"), gpt2.count(ARTICLE_SENTENCE)
    new = t.kv_len - prompt_len  # positions this run added after its prompt (0 at prefill)

    def q(spec_, pos):
        return f"[1, {spec_.heads}, {pos}, {spec_.head_dim}]"

    def k(spec_, pos):
        return f"[1, {spec_.kv_heads}, {pos}, {spec_.head_dim}]"

    rows = [("prompt tokens (pos at prefill)", str(s), str(prompt_len)),
            ("q at prefill [batch, head, pos, head_dim]", q(ref, s), q(spec, prompt_len)),
            ("q at a cached decode step", q(ref, 1), q(spec, 1)),
            ("K cache after decode step 1", k(ref, s + 1), k(spec, prompt_len + 1)),
            (f"K cache after this step (step {t.step})", k(ref, s + new), k(spec, t.kv_len))]
    return pd.DataFrame(rows, columns=["tensor", "GPT-2 (124M)", "this model"])


# ---------------------------------------------------------------- attention


def visible(query_pos: int, key_pos: int, window: int | None) -> bool:
    """May the query at `query_pos` attend to the key at `key_pos`? (causal, and inside the window if any)"""
    return key_pos <= query_pos and (window is None or key_pos > query_pos - window)


def attention_rows(t: StepTrace, layer: int, head: int) -> tuple[list[int], np.ndarray]:
    """The kept query rows of one head over every key position 0..kv_len-1: (query positions, [row, key_pos]).

    NaN marks a masked pair (the future, or outside the layer's window): masked is not zero.
    """
    lt = t.layers[layer]
    if lt.pattern is None:
        return [], np.zeros((0, t.kv_len))
    w = lt.pattern[head].float().numpy()  # [row, width] over keys key_start ..
    rows = list(range(t.kv_len - w.shape[0], t.kv_len))
    out = np.full((len(rows), t.kv_len), np.nan)
    out[:, lt.key_start:lt.key_start + w.shape[1]] = w
    q, k = np.array(rows)[:, None], np.arange(t.kv_len)[None, :]
    masked = k > q if lt.window is None else (k > q) | (k <= q - lt.window)  # the vectorised `visible`
    out[masked] = np.nan
    return rows, out


def assembled_attention(traces: list[StepTrace], layer: int, head: int) -> np.ndarray:
    """The prefill square plus one new row per decode step: [query_pos, key_pos], NaN where masked.

    Earlier rows never change: decode only adds a row (with or without the cache).
    """
    rows = []
    for t in traces:
        rows += list(attention_rows(t, layer, head)[1])
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


LABEL_EVERY = 40  # up to this many positions, every one is labelled (plotly would otherwise thin them out)


def attention_heatmap(weights: np.ndarray, row_labels: list[str], col_labels: list[str], title: str,
                      scale: float = 1.0, row_chars: int = 10) -> go.Figure:
    """One head's attention [query_pos, key_pos]; masked pairs drawn grey (masked, not zero).

    Every key and query up to LABEL_EVERY positions is labelled ("7 ·Tom"), the font shrinking to fit; the
    height follows the rows, so a few rows (one per head) fit a projector's first screen, labels included."""
    masked = np.where(np.isnan(weights), 1.0, np.nan)
    fig = go.Figure([
        go.Heatmap(z=masked, x=col_labels, y=row_labels, colorscale=[[0, MASKED], [1, MASKED]], showscale=False,
                   hovertemplate="query %{y}<br>key %{x}<br>masked<extra></extra>", xgap=1, ygap=1),
        go.Heatmap(z=weights, x=col_labels, y=row_labels, colorscale="Blues", zmin=0, zmax=1, xgap=1, ygap=1,
                   colorbar=dict(title="weight", thickness=12),
                   hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"),
    ])
    fig.update_yaxes(autorange="reversed", title="query_pos")
    fig.update_xaxes(title="key_pos (grey: masked)", tickangle=-60)
    for axis, labels, chars in ((fig.update_xaxes, col_labels, 10), (fig.update_yaxes, row_labels, row_chars)):
        if len(labels) <= LABEL_EVERY:  # a long piece is cut on the axis ("0 <|endo…"), whole in the hover
            axis(tickmode="array", tickvals=list(labels),
                 ticktext=[x if len(x) <= chars else x[:chars - 1] + "…" for x in labels],
                 tickfont=dict(size=max(7.0, min(11 * scale, 400 / max(1, len(labels))))))
    fig = layout(fig, title, height=max(220, int(18 * len(row_labels)) + 120), scale=scale)
    fig.update_layout(margin=dict(t=int(40 * scale)))
    return fig


def newest_query(t: StepTrace, layer: int) -> np.ndarray:
    """Every head's weights for the newest query (a decode step's only row, a prefill's last): [head, key_pos]."""
    lt = t.layers[layer]
    heads = lt.pattern.shape[0] if lt.pattern is not None else 0
    return np.stack([attention_rows(t, layer, h)[1][-1] for h in range(heads)]) if heads else np.zeros((0, t.kv_len))


def heads_figure(t: StepTrace, layer: int, labels: list[str], scale: float = 1.0, cols: int = 4,
                 newest_only: bool = True, roles: dict[int, str] | None = None) -> go.Figure:
    """Every head of one layer, labelled with token pieces.

    The newest query (a decode step's only row, or a prefill's last): a [head, key_pos] heatmap, one
    readable row per head, so the head that looks back at a name is found at a glance. Every query
    (newest_only=False, at a prefill): one small panel per head. `roles` names each head by what it does
    (engine.measure.attention.head_roles), beside its number, so the projector shows it with the picture.
    """
    pattern = t.layers[layer].pattern
    heads = pattern.shape[0] if pattern is not None else 0
    if not heads or newest_only or pattern.shape[1] == 1:  # one query row to show
        z = newest_query(t, layer)
        query = labels[t.kv_len - 1] if t.kv_len else ""
        names = [f"head {h}" + (f" · {roles[h]}" if roles and roles.get(h) else "") for h in range(heads)]
        fig = attention_heatmap(z, names, labels[: t.kv_len],
                                f"layer {layer}, every head: query {query}", scale=scale, row_chars=30)
        fig.update_yaxes(title="head")
        return fig
    grids = [attention_rows(t, layer, h) for h in range(heads)]
    cols = min(cols, heads)
    rows = -(-heads // cols)
    qpos = grids[0][0]
    titles = [f"head {h}" + (f" · {roles[h]}" if roles and roles.get(h) else "") for h in range(heads)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles,
                        shared_xaxes=True, shared_yaxes=True, horizontal_spacing=0.02, vertical_spacing=0.06)
    short = [f"{show_piece(labels[i].split(' ', 1)[1]) if ' ' in labels[i] else labels[i]}" for i in range(len(labels))]
    for h, (_, z) in enumerate(grids):
        fig.add_trace(go.Heatmap(z=z, x=list(range(t.kv_len)), y=qpos, colorscale="Blues", zmin=0, zmax=1,
                                 showscale=False, customdata=np.array([[f"{short[q]} → {short[k]}" for k in range(t.kv_len)]
                                                                       for q in qpos], dtype=object),
                                 hovertemplate="%{customdata}: %{z:.3f}<extra></extra>"),
                      row=h // cols + 1, col=h % cols + 1)
    ticks = dict(tickmode="array", tickvals=list(range(t.kv_len)), ticktext=short[: t.kv_len],
                 tickfont=dict(size=max(8, 11 * scale - t.kv_len // 12)))
    fig.update_xaxes(tickangle=-60, **ticks)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=qpos, ticktext=[short[q] for q in qpos],
                     tickfont=ticks["tickfont"])
    fig.update_layout(plot_bgcolor=MASKED)
    fig.update_annotations(font_size=13 * scale)
    return layout(fig, f"layer {layer}: every head (grey: masked)", height=200 * rows + 150, scale=scale)


def look_back(t: StepTrace, layer: int, target: int) -> list[tuple[int, float]]:
    """Heads ranked by the weight the newest query gives key position `target`: [(head, weight)]."""
    lt = t.layers[layer]
    if lt.pattern is None or not lt.key_start <= target < lt.key_start + lt.pattern.shape[-1]:
        return []
    w = lt.pattern[:, -1, target - lt.key_start].float().tolist()
    return sorted(enumerate(w), key=lambda hw: -hw[1])


# ---------------------------------------------------------------- KV cache


def kv_frame(t: StepTrace) -> pd.DataFrame:
    """Per layer: what it attends to, the shape of its K (and of its V, the same), the bytes of both (measured)."""
    return pd.DataFrame([{"layer": str(x.layer), "attends to": "every position" if x.window is None else f"last {x.window}",
                          "K and V, each [batch, kv_head, pos, head_dim]": str(list(x.shapes.get("kv.keys", ()))),
                          "bytes (K+V, measured)": f"{x.kv_bytes:,}"}
                         for x in t.layers])


def kv_growth_figure(traces: list[StepTrace], scale: float = 1.0) -> go.Figure:
    steps = [t.step for t in traces]
    fig = go.Figure(go.Scatter(x=steps, y=[t.kv_bytes for t in traces], mode="lines+markers", name="total",
                               line=dict(color=DECODE, width=3)))
    if traces and len(traces[-1].layers) <= 12:
        for layer in range(len(traces[-1].layers)):
            fig.add_trace(go.Scatter(x=steps, y=[t.layers[layer].kv_bytes for t in traces], mode="lines",
                                     name=f"layer {layer}", line=dict(width=1, dash="dot")))
    step_axis(fig, steps)
    fig.update_yaxes(title="KV cache bytes (measured)", rangemode="tozero")
    return layout(fig, "KV cache size after each step", scale=scale)


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


# ---------------------------------------------------------------- next token


def next_token_figure(t: StepTrace, scale: float = 1.0, height: int = 250) -> go.Figure:
    """The most likely tokens: probability before and after the warpers; each bar says its raw logit.

    The axis ends a little above the tallest bar (a run that is sure of its token fills the chart, an unsure one
    is not squeezed into the bottom half of an axis to 1.0), so the chart stays short enough for the first screen."""
    labels = [show_piece(c.token) for c in t.top]
    colours = [NEW if c.token_id == t.token_id else GREY for c in t.top]
    fig = go.Figure([
        go.Bar(x=labels, y=[c.p_before for c in t.top], name="before warpers · text: logit",
               marker_color="#c6dbef", text=[f"{c.logit:.1f}" for c in t.top], textposition="outside",
               cliponaxis=False, textfont=dict(size=11 * scale),
               hovertemplate="%{x}: p %{y:.3f}, logit %{text}<extra></extra>"),
        go.Bar(x=labels, y=[c.p_after for c in t.top], name="after warpers (drawn from)", marker_color=colours),
    ])
    fig.update_layout(uniformtext=dict(minsize=10 * scale, mode="show"))  # a logit over a thin bar stays legible
    top = max([c.p_before for c in t.top] + [c.p_after for c in t.top] + [0.05])
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="probability", range=[0, min(1.0, top) * 1.18], tickformat=".0%")
    fig.update_xaxes(tickangle=-30 if len(labels) > 6 else 0)
    fig = layout(fig, f"Next token: {show_piece(t.token)} (green)", height=height, scale=scale)
    fig.update_layout(margin=dict(t=int(62 * scale)))
    return fig


# ---------------------------------------------------------------- latency


def latency_figure(traces: list[StepTrace], scale: float = 1.0, note: str | None = None,
                   height: int = 218) -> go.Figure:
    """Forward time per step: the median of its timed repeats, the bar's whisker its spread; FLOPs estimate dashed.

    TTFT is the prefill's bar (labelled), TPOT the dotted line at the median decode step. Every bar fits the axis;
    a whisker that does not is cut at the top and listed once, in one line (labels never collide). `note` (from
    engine.measure.noise) is said on the chart when the measurements contradict the lesson (`note_box`)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    steps = [t.step for t in traces]
    colours = [PREFILL if t.phase == "prefill" else (DECODE if t.use_cache else RECOMPUTED) for t in traces]
    repeats = traces[0].timing.repeats if traces else 1
    fig.add_trace(go.Bar(
        x=steps, y=[t.latency_ms for t in traces], marker_color=colours,
        name=f"ms per step (median of {repeats})" if repeats > 1 else "ms per step",
        error_y=dict(type="data", symmetric=False, array=[t.timing.high_ms - t.forward_ms for t in traces],
                     arrayminus=[t.forward_ms - t.timing.low_ms for t in traces], color="#444", thickness=1.5),
        hovertemplate="step %{x}: %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[t.flops_estimate for t in traces], name="FLOPs (estimate)",
                             line=dict(color=ESTIMATE, dash="dash")), secondary_y=True)
    step_axis(fig, steps)
    fig.update_xaxes(range=[-0.6, max(steps, default=0) + 0.6])  # the prefill's bar at 0, nothing left of it
    ceiling, outliers = latency_ceiling(traces)
    fig.update_yaxes(title="ms (measured)", secondary_y=False, range=[0, ceiling])
    if outliers:  # whiskers cut by the robust range: a mark where each leaves the chart, the times said once
        fig.add_trace(go.Scatter(x=[s for s, _ in outliers], y=[ceiling * 0.985] * len(outliers), mode="markers",
                                 marker=dict(symbol="triangle-up", size=9 * scale, color=INK_OUTLIER),
                                 showlegend=False, hoverinfo="skip"))
        worst = sorted(outliers, key=lambda o: -o[1])[:3]  # the three tallest, in step order
        listed = ", ".join(f"step {s_}: {ms:.0f} ms" for s_, ms in sorted(worst)) + (" …" if len(outliers) > 3 else "")
        fig.add_annotation(x=1, xref="paper", y=ceiling, yref="y", xanchor="right", yanchor="top", showarrow=False,
                           text=f"▲ cut: {listed}", font=dict(color=INK_OUTLIER, size=11 * scale),
                           bgcolor="rgba(255,255,255,0.85)")
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
    fig.update_layout(margin=dict(t=int(34 * scale)), legend=dict(y=1.0, yanchor="bottom"))
    if note:
        note_box(fig, note, scale)
    return fig


NOTE_CHARS = 38  # a note's line on a chart in a side column (the sidebar open too), at presenter size, inside its plot


def note_box(fig: go.Figure, note: str, scale: float, chars: int = NOTE_CHARS) -> None:
    """Say a note (engine.measure.noise) on the chart itself: its headline in a box under the plot, below the x
    axis's title, in a bottom margin of its own (the box covers no bar, line, tick or legend, whatever the screen;
    the figure keeps its height, so a chart that fits a projector's first screen still does). Call it after
    `layout`."""
    from engine.measure.noise import headline

    lines = wrap(headline(note), chars)
    line_px = 10 * scale * 1.35
    box_px = int(len(lines) * line_px + 10)
    below_axis = int(50 * scale)  # the x axis's tick labels and title
    margin = fig.layout.margin
    fig.update_layout(margin=dict(b=int((margin.b or 10) + box_px + below_axis)))
    fig.add_annotation(xref="paper", yref="paper", x=0.0, y=0.0, xanchor="left", yanchor="top", align="left",
                       yshift=-below_axis, showarrow=False, text="⚠ " + "<br>".join(lines),
                       font=dict(size=10 * scale, color="#5d4200"), bgcolor="rgba(255,246,214,0.95)",
                       bordercolor="#e0b040", borderwidth=1, borderpad=3)


def wrap(text: str, width: int) -> list[str]:
    """Words in lines of at most `width` characters (a chart title has no wrapping of its own)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


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
    """Time to first token (prefill + its choice) vs time per output token (median decode step)."""
    pre = next((t for t in traces if t.phase == "prefill"), None)
    dec = [t.latency_ms for t in traces if t.phase == "decode"]
    if pre is None:
        return None
    return {"ttft_ms": pre.latency_ms, "prefill_ms_per_token": pre.forward_ms / pre.q_len, "prompt_tokens": pre.q_len,
            "tpot_ms": float(np.median(dec)) if dec else None, "decode_steps": len(dec)}


def traces_frame(traces: list[StepTrace]) -> pd.DataFrame:
    """One row per step: what the CSV export and the step tables show."""
    return pd.DataFrame([{
        "step": t.step, "phase": t.phase, "cache": t.use_cache, "q_len": t.q_len, "kv_len": t.kv_len,
        "token": t.token, "token_id": t.token_id, "kv_bytes": t.kv_bytes, "latency_ms": round(t.latency_ms, 3),
        "forward_ms_low": round(t.timing.low_ms, 3), "forward_ms_high": round(t.timing.high_ms, 3),
        "timed_repeats": t.timing.repeats, "flops_estimate": t.flops_estimate, "bytes_estimate": t.bytes_estimate,
    } for t in traces])


# ---------------------------------------------------------------- lessons


def work_per_step_figure(cache_traces: list[StepTrace], nocache_traces: list[StepTrace], scale: float = 1.0,
                         note: str | None = None) -> go.Figure:
    """Positions computed (q_len) at every step, with and without the cache: flat vs a climbing staircase; and the
    measured ms of each step as a line over them (right axis), so the time is read beside the work. `note`
    (engine.measure.noise.compare_note) is said in the title when the times contradict the work."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=[t.step for t in nocache_traces], y=[t.q_len for t in nocache_traces],
                         name="positions computed, cache off", marker_color=RECOMPUTED, opacity=0.75))
    fig.add_trace(go.Bar(x=[t.step for t in cache_traces], y=[t.q_len for t in cache_traces],
                         name="positions computed, cache on", marker_color=PREFILL, opacity=0.75))
    for traces, colour, name in ((nocache_traces, RECOMPUTED, "ms, cache off"), (cache_traces, PREFILL, "ms, cache on")):
        dec = [t for t in traces if t.phase == "decode"]
        fig.add_trace(go.Scatter(x=[t.step for t in dec], y=[t.latency_ms for t in dec], name=f"{name} (measured)",
                                 mode="lines", line=dict(color=colour, width=2.5, dash="dot")), secondary_y=True)
    fig.update_layout(barmode="group")
    step_axis(fig, [t.step for t in nocache_traces])
    fig.update_yaxes(title="positions computed (q_len)", secondary_y=False)
    fig.update_yaxes(title="ms per decode step (measured)", secondary_y=True, rangemode="tozero", showgrid=False)
    fig = layout(fig, "Work per step: positions pushed through the model, and the time it took", scale=scale)
    if note:
        note_box(fig, note, scale, chars=64)
    return fig


def padded_batch_html(pieces: tuple[tuple[str, ...], ...], input_ids, attention_mask) -> str:
    """A left-padded batch as a grid that fits the page's width: one row per prompt, one column per position,
    each cell its token (id under it), padding grey like every masked thing. Cells wrap their text instead of
    pushing the last positions off the right edge; on a phone the grid scrolls sideways (ui/style.py)."""
    n = max((len(r) for r in pieces), default=0)
    head = ["<div class='dl-batch-h'></div>"] + [f"<div class='dl-batch-h'>pos {p}</div>" for p in range(n)]
    cells = []
    for b, row_pieces in enumerate(pieces):
        cells.append(f"<div class='dl-batch-h'>batch {b}</div>")
        for p, piece in enumerate(row_pieces):
            tid = int(input_ids[b, p])
            pad = int(attention_mask[b, p]) == 0
            text = "PAD" if pad else html.escape(show_piece(piece))
            colour = MASKED if pad else PREFILL + "22"
            cells.append(f"<div data-role='{'pad' if pad else 'token'}' data-pos='{p}' data-row='{b}' "
                         f"style='background:{colour}'>{text}<br><small>{tid}</small></div>")
    style = ("<style>.dl-batch{overflow-x:auto}.dl-batch>div{display:grid;gap:2px;font-size:0.78rem;"
             "line-height:1.25}.dl-batch>div>div{padding:3px 4px;border-radius:4px;overflow-wrap:anywhere;"
             "font-family:monospace;min-width:0}.dl-batch small{color:#666}.dl-batch .dl-batch-h{color:#666;"
             "font-family:inherit;background:none}@media (max-width:700px){.dl-batch>div{min-width:"
             f"{60 + 52 * n}px}}}}</style>")
    grid = (f"<div style='grid-template-columns:4.2em repeat({n}, minmax(0, 1fr))'>"
            + "".join(head + cells) + "</div>")
    return f"{style}<div class='dl-batch' data-testid='dl-batch'>{grid}</div>"


def batch_shapes_frame(shapes: tuple[tuple[str, tuple[int, ...]], ...]) -> pd.DataFrame:
    """A batch run's tensors and their shapes (engine.generate.batch.BatchRun.shapes): batch comes first."""
    return pd.DataFrame([(name, str(list(shape))) for name, shape in shapes], columns=["tensor", "shape [batch, ...]"])
