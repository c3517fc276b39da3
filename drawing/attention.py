"""Attention drawn from the record: one head's rows, every head for the newest query, the causal (and sliding) mask.

Pure builders: records in, plotly Figures / pandas DataFrames / HTML out; pages place them.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from drawing.palette import MASKED, layout, show_piece
from engine.forward.trace import StepTrace


def visible(query_pos: int, key_pos: int, window: int | None) -> bool:
    """May the query at `query_pos` attend to the key at `key_pos`? (causal, and inside the window if any)"""
    return key_pos <= query_pos and (window is None or key_pos > query_pos - window)


def _masked(q: np.ndarray, k: np.ndarray, window: int | None) -> np.ndarray:
    """The vectorised `visible`, negated: query positions q [rows, 1] against key positions k [1, keys]."""
    return k > q if window is None else (k > q) | (k <= q - window)


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
    out[_masked(q, k, lt.window)] = np.nan
    return rows, out


def masked_weight(t: StepTrace, layer: int, head: int) -> float:
    """The recorded attention weights at masked pairs (a key after its query, or out of a sliding window), summed
    as the model wrote them, before any picture blanks them: 0 is the mask working, not a picture's choice."""
    lt = t.layers[layer]
    if lt.pattern is None:
        return 0.0
    w = lt.pattern[head].float().numpy()  # [row, width] over keys key_start ..
    q = np.arange(t.kv_len - w.shape[0], t.kv_len)[:, None]
    k = np.arange(lt.key_start, lt.key_start + w.shape[1])[None, :]
    return float(np.abs(w[_masked(q, k, lt.window)]).sum())


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
KEYS_SIDE_BY_SIDE = 12  # key labels a side column holds at a projector's size: past 15 keys, every k-th one


def every_kth(n: int, every: int) -> list[int]:
    """Positions 0, k, 2k, … and the newest (n - 1), which takes the place of a last one too close to it."""
    kept = list(range(0, n, every))
    if kept and kept[-1] != n - 1:
        kept[-1 if n - 1 - kept[-1] <= every / 2 and len(kept) > 1 else len(kept):] = [n - 1]
    return kept


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
                   colorbar=dict(title=dict(text="weight", side="top"), thickness=10, len=0.8, xpad=4),
                   hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"),
    ])
    fig.update_yaxes(autorange="reversed", title="query_pos")
    # upright labels take a line's height each across the axis: side by side they never lie on each other
    fig.update_xaxes(title="key_pos (grey: masked)", tickangle=-90 if len(col_labels) > 8 else -60)
    for axis, labels, chars in ((fig.update_xaxes, col_labels, 10), (fig.update_yaxes, row_labels, row_chars)):
        if len(labels) <= LABEL_EVERY:  # a long piece is cut on the axis ("0 <|endo…"), whole in the hover
            # past 15 keys their labels would lie on each other in a side column: every k-th one
            # (the newest always), each still readable; every key is in the hover
            every = 1 if axis is fig.update_yaxes or len(labels) <= 15 else -(-len(labels) // KEYS_SIDE_BY_SIDE)
            shown = [labels[i] for i in every_kth(len(labels), every)]
            axis(tickmode="array", tickvals=shown,
                 ticktext=[x if len(x) <= chars else x[:chars - 1] + "…" for x in shown],
                 tickfont=dict(size=max(7.0, min(11 * scale, 400 / max(1, len(shown))))))
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
    (drawing.head_roles.head_roles), beside its number, so the projector shows it with the picture.
    """
    pattern = t.layers[layer].pattern
    heads = pattern.shape[0] if pattern is not None else 0
    if not heads or newest_only or pattern.shape[1] == 1:  # one query row to show
        z = newest_query(t, layer)
        query = labels[t.kv_len - 1] if t.kv_len else ""
        names = [f"head {h}" + (f" · {roles[h]}" if roles and roles.get(h) else "") for h in range(heads)]
        fig = attention_heatmap(z, names, labels[: t.kv_len],
                                f"layer {layer}, every head: query {query}", scale=scale, row_chars=30)
        # each row's label says its head (and role): an axis title beside a few short rows ran up into the chart's
        # title on a phone; and the colour bar, a share of those rows' height, laid its 1, 0.5 and 0 on one
        # another: it is as long as the rows, and never under 80 px
        fig.update_yaxes(title=None)
        fig.data[1].colorbar.update(lenmode="pixels", len=int(max(80, 18 * heads) * scale))
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


def hardest_look_back(t: StepTrace, ids: list[int]) -> tuple[int, int, float] | None:
    """(layer, head, weight): of every layer and head of step t, the one whose newest query gives the latest earlier
    copy of the newest token the most weight (what the Attention view's sentence names, in its best layer); None
    when the newest token never appeared before or the step kept no attention."""
    newest = t.kv_len - 1
    earlier = [p for p in range(newest) if ids[p] == ids[newest]]
    if not earlier:
        return None
    best = None
    for layer in range(len(t.layers)):
        ranked = look_back(t, layer, earlier[-1])
        if ranked and (best is None or ranked[0][1] > best[2]):
            best = (layer, ranked[0][0], ranked[0][1])
    return best


def look_back(t: StepTrace, layer: int, target: int) -> list[tuple[int, float]]:
    """Heads ranked by the weight the newest query gives key position `target`: [(head, weight)]."""
    lt = t.layers[layer]
    if lt.pattern is None or not lt.key_start <= target < lt.key_start + lt.pattern.shape[-1]:
        return []
    w = lt.pattern[:, -1, target - lt.key_start].float().tolist()
    return sorted(enumerate(w), key=lambda hw: -hw[1])
