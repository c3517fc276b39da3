"""The budget topic's pictures: records in (topics/budget/records.py), an SVG, a plotly figure or a table out.

    cache_svg        the cache per layer, one cell per position: held (prefill blue, decode orange), evicted
                     (grey, empty), quantized (hatched); a position some kv_heads hold and others dropped is pale
    divergence_fig   agreement and KL against the budget, one line per policy, side by side
    texts_html       the full cache's text and the policy's, the step where they part marked
    sink_fig         the attention each layer pays position 0 (the heads' mean, and each head), against a uniform
                     reader's; sink_words says what it shows
    policy_table     the side-by-side numbers as a DataFrame
    bytes_words      the bytes held, against the cache's own dtype and against bf16; step_words, the time
    stories_fig      every policy's agreement over several stories with its interval, fp32 and bf16 side by side;
                     stories_table and stories_words say the same in numbers, with the ties and fp8's saturation

Nothing here imports torch or streamlit: the same record draws in the app, a notebook and a test.
"""

from __future__ import annotations

import textwrap
from html import escape

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from drawing.palette import DECODE, ESTIMATE, GREY, PREFILL, RECOMPUTED, layout, legend_under_title, show_piece
from drawing.svg import FONT, INK, SOFT, TEXT, W, text
from physics.units import human_bytes
from topics.budget.records import BF16_BYTES, SHORT_DTYPE

EVICTED = "#eeeeee"  # a position the cache dropped: an empty slot, outlined
POLICY_COLOURS = {"full": INK, "fp8": "#17becf", "int8": "#1f9e89", "int4": "#6a3d9a", "window": "#e377c2",
                  "sinks": "#8c564b", "heavy": "#bcbd22", "heavy-avg": "#6b6b00", "snap": "#7f7f7f",
                  "snap-capped": "#3f3f3f"}
# quantized policies solid, evicting ones dashed; of each pair of variants (H2O's two scores, SnapKV published and
# capped) the second dotted
QUANTIZED_DASH = {"fp8": "solid", "int8": "solid", "int4": "solid", "heavy-avg": "dot", "snap-capped": "dot"}
# a shape of its own per policy, outlined where it evicts: two policies that measure alike (window and snap-capped,
# 93.0% and 92.2% at 64) draw one line over the other, and their points still show both
POLICY_SYMBOLS = {"fp8": "circle", "int8": "square", "int4": "diamond", "window": "triangle-up-open",
                  "sinks": "triangle-down-open", "heavy": "square-open", "heavy-avg": "diamond-open",
                  "snap": "circle-open", "snap-capped": "x-thin-open"}
LEGEND = {"held (prompt, prefill)": PREFILL, "held (decoded)": DECODE, "evicted": EVICTED}


# ---------------------------------------------------------------- the cache, per layer


def runs(values: tuple) -> list[tuple[int, int, object]]:
    """(start, length, value) of each run of equal values: one rectangle per run, not one per position."""
    out, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            out.append((start, i - start, values[start]))
            start = i
    return out


COLUMN_W = 600  # cache_svg in half a page's width (~600 px on a 1280 px projector): ~1 px a unit, words 13-17 px
PHONE_W = 420  # and on a phone: at 370 px 0.88 px a unit, so its 11-unit words are ~12 px


def cache_svg(cmap, title: str | None = None, width: int = W) -> str:
    """The cache after a run: a row per layer, a cell per position (0 .. positions-1), as the record says. Narrower
    than W (COLUMN_W, PHONE_W) it is laid out compact: smaller words that wrap, shorter rows for many layers, so it
    is read at about its own size in half a page, or whole on a 390 px phone."""
    compact = width < W
    sizes = dict(title=14, row=12, legend=11, axis=11) if compact else dict(title=17, row=14, legend=13, axis=12)
    row_h, gap = (34, 10) if not compact else (30, 8) if len(cmap.layers) <= 6 else (16, 4)
    left, right = (72, width - 12) if compact else (110, 975)
    n = max(1, cmap.positions)
    cell = (right - left) / n
    own = SHORT_DTYPE.get(cmap.dtype, cmap.dtype)
    title = title or (f"{cmap.policy}" + ("" if cmap.budget is None else f", budget {cmap.budget}") +
                      f": {human_bytes(cmap.bytes_held)} held of the {own} cache's {human_bytes(cmap.bytes_full)} "
                      f"({cmap.ratio:.0%})")
    heading = textwrap.wrap(title, max(20, int((width - 20) / (sizes["title"] * TEXT * 0.56))))
    y = 28
    words = []
    for line in heading:
        words.append(text(10, y, line, size=sizes["title"], weight="bold"))
        y += sizes["title"] * TEXT * 1.25
    legend, y = legend_rows(10, y + 4, width, sizes["legend"])
    top = y + 8
    height = top + len(cmap.layers) * (row_h + gap) + 46
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height:.0f}" font-family="{FONT}" '
             f'data-layout="{"compact" if compact else "wide"}">',
             '<defs><pattern id="quantized" width="7" height="7" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="7" stroke="#fff" stroke-width="3"/>'
             '</pattern></defs>',
             '<rect width="100%" height="100%" fill="#fff"/>', *words, legend]
    for row, layer in enumerate(cmap.layers):
        y = top + row * (row_h + gap)
        parts.append(text(left - 10, y + row_h * 0.68, f"layer {layer.layer}", size=sizes["row"], anchor="end",
                          fill=SOFT))
        prefilled = cmap.prefilled or n
        state = tuple((h, q, p >= prefilled) for p, (h, q) in enumerate(zip(layer.held, layer.quantized)))
        for start, length, (held, quantized, decoded) in runs(state):
            x, w = left + start * cell, length * cell
            if not held:
                parts.append(f'<rect x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{row_h}" fill="{EVICTED}" '
                             f'stroke="{GREY}" stroke-width="0.6" data-state="evicted" data-start="{start}" '
                             f'data-length="{length}"/>')
                continue
            share = held / layer.kv_heads  # a pale cell: only some kv_heads hold it
            colour = DECODE if decoded else PREFILL
            kind = "quantized" if quantized else "held"
            parts.append(f'<rect x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{row_h}" fill="{colour}" '
                         f'fill-opacity="{0.35 + 0.65 * share:.2f}" data-state="{kind}" data-start="{start}" '
                         f'data-length="{length}"/>')
            if quantized:
                parts.append(f'<rect x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{row_h}" '
                             'fill="url(#quantized)"/>')
    axis_y = top + len(cmap.layers) * (row_h + gap) + 16
    for p in sorted({0, n // 4, n // 2, 3 * n // 4, n - 1}):
        parts.append(text(left + (p + 0.5) * cell, axis_y, str(p), size=sizes["axis"], anchor="middle", fill=SOFT))
    parts.append(text((left + right) / 2, axis_y + 22, "pos (the position each key was written at)",
                      size=sizes["axis"], anchor="middle", fill=SOFT))
    parts.append("</svg>")
    return "".join(parts)


def legend_rows(x0: float, y: float, width: float, size: float) -> tuple[str, float]:
    """The cells' meanings, left to right, a new row where the next would run past `width`; the svg and the y
    under its last row."""
    out, x = [], x0
    y += size * TEXT
    for name, colour in [*LEGEND.items(), ("quantized (hatched)", PREFILL), ("pale: some kv_heads hold it", "#a5c8e1")]:
        step = 24 + len(name) * size * TEXT * 0.54
        if x > x0 and x + step > width:
            x, y = x0, y + size * TEXT * 1.6
        hatch = name.startswith("quantized")
        box = size * TEXT
        out.append(f'<rect x="{x}" y="{y - box * 0.8:.1f}" width="{box:.1f}" height="{box:.1f}" fill="{colour}" '
                   f'stroke="{GREY}" stroke-width="0.6"/>' + (f'<rect x="{x}" y="{y - box * 0.8:.1f}" '
                   f'width="{box:.1f}" height="{box:.1f}" fill="url(#quantized)"/>' if hatch else ""))
        out.append(text(x + box + 6, y, name, size=size, fill=INK))
        x += step + 12
    return "".join(out), y + 6


# ---------------------------------------------------------------- the damage against the budget


def divergence_fig(points, scale: float = 1.0) -> go.Figure:
    """Agreement (left) and mean KL (right) against the budget, one line per policy; points: SweepPoint records."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)  # each panel named by its y axis, the right one's
    #                                                                  on its right side, clear of the left panel
    for policy in dict.fromkeys(p.policy for p in points):
        mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.budget)
        style = dict(color=POLICY_COLOURS.get(policy, GREY), dash=QUANTIZED_DASH.get(policy, "dash"))
        marker = dict(symbol=POLICY_SYMBOLS.get(policy, "circle"), size=9 * scale,
                      line=dict(width=2, color=style["color"]))
        budgets = [p.budget for p in mine]
        fig.add_trace(go.Scatter(x=budgets, y=[p.agreement * 100 for p in mine], name=policy, mode="lines+markers",
                                 line=style, marker=marker, legendgroup=policy), row=1, col=1)
        fig.add_trace(go.Scatter(x=budgets, y=[p.kl_mean for p in mine], name=policy, mode="lines+markers",
                                 line=style, marker=marker, legendgroup=policy, showlegend=False), row=1, col=2)
    fig.update_xaxes(title="budget (positions)", type="log", dtick=0.30103, tickformat="d")  # ticks at powers of 2
    fig.update_yaxes(title="top-1 agreement, %", ticksuffix="", row=1, col=1)
    fig.update_yaxes(title="mean KL(full ‖ policy), nats", side="right", row=1, col=2)  # its title clear of the
    #                                                         left panel's points on a phone, where the gap is narrow
    # a title whole on a phone (its legend draws each policy's line: quantized solid, evicting dashed or dotted),
    # the legend hung under it, so the lines are named on the first screen and a phone's rows grow down, not over it
    layout(fig, "Damage against the budget", height=380, scale=scale)
    fig.update_layout(legend=dict(orientation="h", x=0, font=dict(size=12 * scale)),
                      title=dict(font=dict(size=15 * scale)), margin=dict(t=int(84 * scale), b=int(36 * scale)))
    legend_under_title(fig, scale)
    return fig


def texts_html(row) -> str:
    """Both free-running texts, token by token, the first differing token of each marked (none: they agree)."""
    at = row.parting_step

    def line(label: str, pieces: tuple[str, ...], colour: str) -> str:
        spans = []
        for i, piece in enumerate(pieces):
            t = escape(piece).replace("\n", "⏎")
            if at is not None and i == at:
                spans.append(f'<mark data-part="{i}" style="background:#fde0dd;border-bottom:3px solid {colour};'
                             f'border-radius:3px" title="step {i}: the texts part here">'
                             f'{t or show_piece(piece)}</mark>')
            elif at is not None and i > at:
                spans.append(f'<span style="color:{SOFT}">{t}</span>')
            else:
                spans.append(t)
        return (f'<div style="margin:0.2rem 0"><b style="display:inline-block;min-width:4.5em">{escape(label)}</b>'
                f'{"".join(spans)}</div>')

    where = "they never part" if at is None else f"they part at step {at} (0 = the first generated token)"
    return (f'<div data-testid="budget-texts" style="line-height:1.55">{line("full", row.full.pieces, INK)}'
            f'{line(row.policy, row.greedy.pieces, RECOMPUTED)}<div style="color:{SOFT};font-size:0.85em">'
            f'{escape(where)}</div></div>')


# ---------------------------------------------------------------- the attention sink


def sink_fig(rows, model: str, scale: float = 1.0) -> go.Figure:
    """Per layer: the heads' mean attention on position 0 (bars), each head's (dots), a uniform reader's (dashes,
    computed: the estimate colour). Each layer's label carries its mean's multiple of the uniform reader's."""
    layers = [f"layer {r.layer} (×{r.ratio:.1f})" for r in rows]
    heads_x = [label for label, r in zip(layers, rows) for _ in r.head_mass]
    fig = go.Figure([
        go.Bar(x=layers, y=[r.mass for r in rows], name="the heads' mean", marker_color=PREFILL, opacity=0.75),
        go.Scatter(x=heads_x, y=[m for r in rows for m in r.head_mass], name="each head", mode="markers",
                   marker=dict(color=INK, size=8 * scale, symbol="circle-open", line=dict(width=2)),
                   text=[f"head {h}: ×{x:.1f}" for r in rows for h, x in enumerate(r.head_ratios)],
                   hovertemplate="%{x}, %{text}<extra></extra>"),
        go.Scatter(x=layers, y=[r.uniform for r in rows], name="a uniform reader: 1/(query_pos+1)",
                   mode="markers", marker=dict(symbol="line-ew-open", size=34, color=ESTIMATE, line=dict(width=3))),
    ])
    fig.update_yaxes(title="attention weight on position 0", rangemode="tozero")
    # a title short enough to be whole on a phone, its legend growing down from under it
    return legend_under_title(layout(fig, f"Attention on position 0: {model}", height=320, scale=scale), scale)


def sink_words(rows) -> str:
    """What the sink chart shows, in words read off its records: the heads' mean against a uniform reader's, and
    the strongest single head (one head can be a sink while its layer's mean is not)."""
    if not rows:
        return ""
    low, high = min(r.ratio for r in rows), max(r.ratio for r in rows)
    said = (f"Averaged over the heads, the layers pay position 0 ×{low:.1f} to ×{high:.1f} of what a uniform reader "
            "would")
    best = max((r for r in rows if r.head_mass), key=lambda r: max(r.head_ratios), default=None)
    if best is None:
        return said + "."
    h = best.strongest_head
    return said + f"; the strongest single head (layer {best.layer}, head {h}) ×{best.head_ratios[h]:.1f}."


# ---------------------------------------------------------------- the numbers


MS_STEP = "ms/step, median (IQR)"  # a decode step's time with its spread, as the CLI prints it


def policy_table(rows, short: bool = False) -> pd.DataFrame:
    """One row per policy (PolicyRows): what the CLI prints, as a table. `short` leaves out the budget and the
    bytes themselves (a text beside it says both), so it fits half a 1280-px screen in presenter mode."""
    out = []
    for r in rows:
        d = r.summary()
        own = SHORT_DTYPE.get(d.dtype, d.dtype)
        row = {"policy": r.policy, "B": "—" if r.budget is None else str(r.budget), "bytes": human_bytes(d.bytes_held),
               f"of {own}": f"{d.bytes_ratio:.0%}", "at bf16": f"{d.bytes_ratio_bf16:.0%}",
               "agree": f"{d.agreement:.1%}", "mean KL": f"{d.kl_mean:.4f}",
               "parts at": "never" if r.parting_step is None else str(r.parting_step),
               MS_STEP: f"{d.ms_per_step:.1f} ({d.ms_p25:.1f}–{d.ms_p75:.1f})"}  # policies' gaps sit inside it
        if short:
            del row["B"], row["bytes"]
        out.append(row)
    return pd.DataFrame(out)


def bytes_words(row) -> str:
    """The bytes a policy holds, against the full cache in its own dtype (measured) and at bf16 (counted)."""
    c = row.cache
    own = SHORT_DTYPE.get(c.dtype, c.dtype)
    return (f"Holds **{human_bytes(c.bytes_held)}** of the full {own} cache's {human_bytes(c.bytes_full)} "
            f"(**{c.ratio:.0%}**, measured); a bf16 server would hold {human_bytes(c.bytes_held_at(BF16_BYTES))} of "
            f"{human_bytes(c.bytes_full_at(BF16_BYTES))} ({c.ratio_bf16:.0%}, counted from the same tensors)")


def step_words(row, full) -> str:
    """Time per decode step of a policy and of the full cache, measured, and what the quantized cache's includes."""
    ms, low, high = row.greedy.timing()
    fms, flow, fhigh = full.greedy.timing()
    timed = len(row.greedy.step_ms) - row.greedy.warmup_steps
    said = (f"Time per decode step, median of {timed} steps after {row.greedy.warmup_steps} warm-up (quartiles): "
            f"{row.policy} {ms:.1f} ms ({low:.1f}–{high:.1f}), full {fms:.1f} ms ({flow:.1f}–{fhigh:.1f}).")
    dq = row.greedy.dequant_timing()
    if dq is not None:
        moved = row.summary().moved_ratio_estimate
        said += (f" Of each {row.policy} step, {dq[0]:.2f} ms ({dq[1]:.2f}–{dq[2]:.2f}) went to dequantizing every "
                 f"older row into a full-precision copy, which attention then reads: this implementation moves "
                 f"×{moved:.2f} the full cache's bytes a step (estimate, counted at the {row.cache.positions} "
                 "positions of the held-out text, not at the free run's). Only a fused kernel, reading the packed "
                 "bytes inside attention, turns fewer bytes held into fewer bytes read.")
    else:
        said += (" On a small model a step is overhead-bound: reading fewer bytes barely changes its time, and what a "
                 "policy does besides (scoring by attention, evicting) can cost more than it saves.")
    return said


# ---------------------------------------------------------------- every story, with its spread


DTYPE_MARKERS = {"float32": "circle", "bfloat16": "diamond"}


def stories_fig(spread, scale: float = 1.0) -> go.Figure:
    """Pooled top-1 agreement per policy with its 95 % interval (error bars), fp32 and bf16 side by side: where two
    bars overlap, the ranking says tied."""
    fig = go.Figure()
    policies = list(dict.fromkeys(r.policy for r in spread.rows if r.dtype in spread.dtypes))
    for dtype in spread.dtypes:
        rows = [spread.row(p, dtype) for p in policies]
        fig.add_trace(go.Scatter(
            x=policies, y=[r.agreement for r in rows], mode="markers", name=SHORT_DTYPE.get(dtype, dtype),
            marker=dict(symbol=DTYPE_MARKERS.get(dtype, "circle"), size=9 * scale, color=INK if dtype == "float32"
                        else GREY),
            error_y=dict(type="data", symmetric=False, array=[r.agreement_ci.high - r.agreement for r in rows],
                         arrayminus=[r.agreement - r.agreement_ci.low for r in rows]),
            hovertemplate="%{x}: %{y:.1%}<extra>" + SHORT_DTYPE.get(dtype, dtype) + "</extra>"))
    low = min(r.agreement_ci.low for r in spread.rows if r.dtype in spread.dtypes)
    fig.update_yaxes(title="agreement, 95 % interval", tickformat=".0%",
                     range=[max(0.0, int(low * 20) / 20 - 0.02), 1.01])  # zoomed to the intervals, from a round floor
    fig.update_layout(scattermode="group")
    return layout(fig, f"Every policy over {spread.stories} stories, budget {spread.budget}", height=330,
                  scale=scale)


def stories_table(spread) -> pd.DataFrame:
    """One row per policy: agreement and KL with their intervals, and the stories whose free runs parted, per dtype."""
    out = []
    for p in dict.fromkeys(r.policy for r in spread.rows if r.dtype in spread.dtypes):
        row = {"policy": p}
        for d in spread.dtypes:
            r, short = spread.row(p, d), SHORT_DTYPE.get(d, d)
            row[f"{short} agreement [95 %]"] = f"{r.agreement:.1%} [{r.agreement_ci.low:.1%}–{r.agreement_ci.high:.1%}]"
            row[f"{short} mean KL [95 %]"] = f"{r.kl_mean:.4f} [{r.kl_ci.low:.4f}–{r.kl_ci.high:.4f}]"
            row[f"{short} texts parted"] = f"{r.parted} of {len(r.stories)}"
        out.append(row)
    return pd.DataFrame(out)


def scores_words(heavy, avg, spread) -> str:
    """The two heavy-hitter scores on the one story measured here, then what the recorded stories say of the gap:
    a gap between them on one story is one draw, a rule only where their intervals over every story stay apart."""
    said = (f"Evicting by heavy hitters agrees on **{heavy.forced.agreement:.1%}** of next tokens when they are "
            f"scored by H2O's plain sum, and on **{avg.forced.agreement:.1%}** when each position's sum is divided "
            "by the queries that could see it (kvpress's score), on this one story")
    dtype = heavy.cache.dtype
    a = spread.row("heavy", dtype) if spread is not None and spread.budget == heavy.budget else None
    b = spread.row("heavy-avg", dtype) if a is not None else None
    if a is None or b is None:
        return said + ": one story is one draw, and no recording here says whether the gap holds over others."
    ranges = (f"{a.agreement:.1%} [{a.agreement_ci.low:.1%}–{a.agreement_ci.high:.1%}] and "
              f"{b.agreement:.1%} [{b.agreement_ci.low:.1%}–{b.agreement_ci.high:.1%}]")
    if a.agreement_ci.overlaps(b.agreement_ci):
        return said + (f". Over {spread.stories} held-out stories the two scores are tied ({ranges}, 95 % "
                       "intervals that overlap): one story's gap is not a rule.")
    better = "the per-query sum" if b.agreement > a.agreement else "the plain sum"
    return said + (f". Over {spread.stories} held-out stories {better} stays ahead ({ranges}, 95 % intervals apart): "
                   "which positions count as heavy depends on how you score them.")


def stories_words(spread, capped) -> str:
    """The ranking with its ties, what bf16 alone does, and fp8's saturation, in the record's own numbers."""
    said = []
    for d in spread.dtypes:
        said.append(f"Eviction policies holding {spread.budget} positions, {SHORT_DTYPE.get(d, d)}: "
                    + spread.ranking_sentence(d, capped, mark=lambda s: f"**{s}**") + ".")
    both = next((r for r in spread.rows if " vs " in r.dtype), None)
    if both is not None:
        said.append(f"Each bf16 row is measured against the bf16 full cache, not fp32's. What bf16 itself costs (weights "
                    f"and cache in bf16, nothing dropped, against fp32): {both.agreement:.1%} agreement, mean KL "
                    f"{both.kl_mean:.5f}, which is not inside those rows.")
    for d in spread.dtypes:
        r = spread.row("fp8", d)
        if r is not None and r.saturation is not None:
            s = r.saturation
            said.append(f"fp8, {SHORT_DTYPE.get(d, d)}: **{s.share:.3%}** of the decoded K and V numbers "
                        f"({s.past_range:,} of {s.decoded:,}) fell past the range of the scale frozen on the prompt "
                        f"and saturate at ±448 (the worst ×{s.worst:.2f} the range).")
    said.append(f"{spread.stories} held-out stories, the first half of each prefilled and the rest teacher-forced; "
                f"intervals: percentile bootstrap over the stories ({spread.resamples} resamples).")
    return "\n".join(f"- {line}" for line in said)
