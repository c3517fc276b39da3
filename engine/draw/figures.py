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


def matmul_frame(t: StepTrace, spec, layer: int = 0) -> pd.DataFrame:
    """One layer's five attention matmuls, W_o and the MLP at this step: with the cache and without (estimates).

    Narrow enough for a projector's side column: one shape per matmul with its rows written q (this step's
    fed rows with the cache; every position without), FLOPs in words.
    """
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
    rows = []
    for a, b in zip(on, off):
        rows.append({"matmul": a["op"], "shape (q rows)": a["shape"].replace(f"[{q_on}, ", "[q, ", 1),
                     "cache on": human_flops(a["flops"]), "cache off": human_flops(b["flops"]),
                     "off / on": f"×{b['flops'] / a['flops']:.1f}" if a["flops"] else "—",
                     "grows with": a["grows"]})
    return pd.DataFrame(rows)


def gpt2_shapes_frame(t: StepTrace, spec, prompt: str, prompt_len: int) -> pd.DataFrame:
    """The articles' GPT-2 (124M) beside the live model, for the same prompt: each counted by its own tokenizer.

    GPT-2's figures come from its published config (12 heads, head_dim 64), its token count from its own
    bundled tokenizer: "A red jacket compliments any outfit." gives [1, 12, 7, 64], [1, 12, 1, 64], [1, 12, 8, 64].
    """
    from engine.load import gpt2
    from engine.measure.kvcalc import from_table

    ref, s = from_table("gpt2"), gpt2.count(prompt)
    new = t.kv_len - prompt_len  # positions this run added after its prompt (0 at prefill)

    def q(spec_, pos):
        return f"[1, {spec_.heads}, {pos}, {spec_.head_dim}]"

    def k(spec_, pos):
        return f"[1, {spec_.kv_heads}, {pos}, {spec_.head_dim}]"

    rows = [("prompt tokens (pos at prefill)", str(prompt_len), str(s)),
            ("q at prefill [batch, head, pos, head_dim]", q(spec, prompt_len), q(ref, s)),
            ("q at a cached decode step", q(spec, 1), q(ref, 1)),
            ("K cache after decode step 1", k(spec, prompt_len + 1), k(ref, s + 1)),
            (f"K cache after this step (step {t.step})", k(spec, t.kv_len), k(ref, s + new))]
    return pd.DataFrame(rows, columns=["tensor", "this model", "GPT-2 (124M)"])


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


def attention_heatmap(weights: np.ndarray, row_labels: list[str], col_labels: list[str], title: str,
                      scale: float = 1.0) -> go.Figure:
    """One head's attention [query_pos, key_pos]; masked pairs drawn grey (masked, not zero)."""
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
    return layout(fig, title, height=max(300, int(24 * len(row_labels)) + 170), scale=scale)


def newest_query(t: StepTrace, layer: int) -> np.ndarray:
    """Every head's weights for the newest query (a decode step's only row, a prefill's last): [head, key_pos]."""
    lt = t.layers[layer]
    heads = lt.pattern.shape[0] if lt.pattern is not None else 0
    return np.stack([attention_rows(t, layer, h)[1][-1] for h in range(heads)]) if heads else np.zeros((0, t.kv_len))


def heads_figure(t: StepTrace, layer: int, labels: list[str], scale: float = 1.0, cols: int = 4,
                 newest_only: bool = True) -> go.Figure:
    """Every head of one layer, labelled with token pieces.

    The newest query (a decode step's only row, or a prefill's last): a [head, key_pos] heatmap, one
    readable row per head, so the head that looks back at a name is found at a glance. Every query
    (newest_only=False, at a prefill): one small panel per head.
    """
    pattern = t.layers[layer].pattern
    heads = pattern.shape[0] if pattern is not None else 0
    if not heads or newest_only or pattern.shape[1] == 1:  # one query row to show
        z = newest_query(t, layer)
        query = labels[t.kv_len - 1] if t.kv_len else ""
        fig = attention_heatmap(z, [f"head {h}" for h in range(heads)], labels[: t.kv_len],
                                f"layer {layer}, every head: query {query}", scale=scale)
        fig.update_yaxes(title="head")
        return fig
    grids = [attention_rows(t, layer, h) for h in range(heads)]
    cols = min(cols, heads)
    rows = -(-heads // cols)
    qpos = grids[0][0]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in range(heads)],
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


def next_token_figure(t: StepTrace, scale: float = 1.0) -> go.Figure:
    """The most likely tokens: probability before and after the warpers; each bar says its raw logit."""
    labels = [show_piece(c.token) for c in t.top]
    colours = [NEW if c.token_id == t.token_id else GREY for c in t.top]
    fig = go.Figure([
        go.Bar(x=labels, y=[c.p_before for c in t.top], name="before warpers (softmax of the logits)",
               marker_color="#c6dbef", text=[f"{c.logit:.1f}" for c in t.top], textposition="outside",
               hovertemplate="%{x}: p %{y:.3f}, logit %{text}<extra></extra>"),
        go.Bar(x=labels, y=[c.p_after for c in t.top], name="after warpers (what was drawn from)",
               marker_color=colours),
    ])
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="probability (numbers: raw logits)", range=[0, 1.15])
    return layout(fig, f"Next token: {show_piece(t.token)} (green)", scale=scale)  # the rule is said under it


# ---------------------------------------------------------------- latency


def latency_figure(traces: list[StepTrace], scale: float = 1.0) -> go.Figure:
    """Forward time per step: the median of its timed repeats, the bar's whisker its spread; FLOPs estimate dashed."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    steps = [t.step for t in traces]
    colours = [PREFILL if t.phase == "prefill" else (DECODE if t.use_cache else RECOMPUTED) for t in traces]
    repeats = traces[0].timing.repeats if traces else 1
    fig.add_trace(go.Bar(
        x=steps, y=[t.latency_ms for t in traces], marker_color=colours,
        name=f"ms per step (median of {repeats} timed runs; whisker: fastest–slowest)" if repeats > 1 else "ms per step",
        error_y=dict(type="data", symmetric=False, array=[t.timing.high_ms - t.forward_ms for t in traces],
                     arrayminus=[t.forward_ms - t.timing.low_ms for t in traces], color="#444", thickness=1.5),
        hovertemplate="step %{x}: %{y:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[t.flops_estimate for t in traces], name="FLOPs (estimate)",
                             line=dict(color=ESTIMATE, dash="dash")), secondary_y=True)
    step_axis(fig, steps)
    ceiling, outliers = latency_ceiling(traces)
    fig.update_yaxes(title="ms (measured)", secondary_y=False, range=[0, ceiling])
    for step, ms in outliers:  # cut off by the robust range: marked where they leave the chart, with their time
        fig.add_annotation(x=step, y=ceiling, yref="y", text=f"↑ {ms:.0f} ms", showarrow=False, yanchor="top",
                           font=dict(color=INK_OUTLIER, size=12 * scale), bgcolor="rgba(255,255,255,0.8)")
    fig.update_yaxes(title="FLOPs (estimate)", secondary_y=True, rangemode="tozero")
    return layout(fig, "Latency of every step", scale=scale)


INK_OUTLIER = "#444"  # the whisker's own colour
OUTLIER = 3.0  # a bar or whisker above this many times the median bar is an outlier: marked, not scaled to


def latency_ceiling(traces: list[StepTrace]) -> tuple[float, list[tuple[int, float]]]:
    """A robust top for the latency axis, and the (step, ms) of each bar or whisker above it.

    One slow repeat (a 240 ms whisker over 5–10 ms bars) must not flatten every other bar: the axis ends a
    little above the tallest value within OUTLIER × the median decode bar (the prefill's bar always fits),
    and whatever is cut off is marked with its time instead.
    """
    if not traces:
        return 1.0, []
    bars = [t.latency_ms for t in traces]
    tops = [t.latency_ms + t.timing.high_ms - t.forward_ms for t in traces]  # each whisker's top
    decode = [b for t, b in zip(traces, bars) if t.phase != "prefill"] or bars
    limit = max([OUTLIER * float(np.median(decode))] + [b for t, b in zip(traces, bars) if t.phase == "prefill"])
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


def work_per_step_figure(cache_traces: list[StepTrace], nocache_traces: list[StepTrace], scale: float = 1.0) -> go.Figure:
    """Positions computed (q_len) at every step, with and without the cache: flat vs a climbing staircase."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=[t.step for t in nocache_traces], y=[t.q_len for t in nocache_traces],
                         name="KV cache off", marker_color=RECOMPUTED))
    fig.add_trace(go.Bar(x=[t.step for t in cache_traces], y=[t.q_len for t in cache_traces],
                         name="KV cache on", marker_color=PREFILL))
    fig.update_layout(barmode="group")
    step_axis(fig, [t.step for t in nocache_traces])
    fig.update_yaxes(title="positions computed (q_len)")
    return layout(fig, "Work per step: positions pushed through the model", scale=scale)


def padded_batch_frame(pieces: tuple[tuple[str, ...], ...], input_ids, attention_mask) -> pd.DataFrame:
    """A left-padded batch as a table: one row per prompt, one column per position; padding shown as PAD."""
    rows = []
    for b, row_pieces in enumerate(pieces):
        rows.append({f"pos {p}": (f"PAD ({int(input_ids[b, p])})" if int(attention_mask[b, p]) == 0
                                  else f"{show_piece(piece)} ({int(input_ids[b, p])})")
                     for p, piece in enumerate(row_pieces)})
    return pd.DataFrame(rows, index=[f"batch {b}" for b in range(len(pieces))])


def batch_shapes_frame(shapes: tuple[tuple[str, tuple[int, ...]], ...]) -> pd.DataFrame:
    """A batch run's tensors and their shapes (engine.generate.batch.BatchRun.shapes): batch comes first."""
    return pd.DataFrame([(name, str(list(shape))) for name, shape in shapes], columns=["tensor", "shape [batch, ...]"])
