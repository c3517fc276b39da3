"""The matmuls of one layer and every recorded tensor's shape, measured; GPT-2 (124M)'s shapes beside them.

Pure builders: records in, plotly Figures / pandas DataFrames / HTML out; pages place them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from engine.forward.estimates import pairs
from engine.forward.trace import StepTrace
from physics.units import human_flops


@dataclass(frozen=True)
class Matmul:
    """One matmul of a layer at one step: an estimate from the model's figures (engine/forward/estimates.py)."""

    op: str
    shape: str  # its operands' shapes, the fed rows first
    flops: float
    grows: str  # what makes it bigger: "fed rows" or "context"


def matmuls(spec, q_len: int, past: int, layer: int = 0) -> list[Matmul]:
    """The attention's five matmuls, W_o and the MLP of one layer, with shapes and FLOPs (estimates)."""
    d, h, kvh, kd, vd = spec.d_model, spec.heads, spec.kv_heads, spec.k_dim, spec.v_dim
    n = pairs(spec, layer, q_len, past)
    keys = spec.span(layer, past + q_len - 1)
    return [
        Matmul("Q = x·W_q", f"[{q_len}, {d}] × [{d}, {h * kd}]", 2 * q_len * d * h * kd, "fed rows"),
        Matmul("K = x·W_k", f"[{q_len}, {d}] × [{d}, {kvh * kd}]", 2 * q_len * d * kvh * kd, "fed rows"),
        Matmul("V = x·W_v", f"[{q_len}, {d}] × [{d}, {kvh * vd}]", 2 * q_len * d * kvh * vd, "fed rows"),
        Matmul("scores = Q·Kᵀ", f"{h} heads × [{q_len}, {kd}] × [{kd}, {keys}]", 2 * h * kd * n, "context"),
        Matmul("out = softmax·V", f"{h} heads × [{q_len}, {keys}] × [{keys}, {vd}]", 2 * h * vd * n, "context"),
        Matmul("x·W_o", f"[{q_len}, {h * vd}] × [{h * vd}, {d}]", 2 * q_len * h * vd * d, "fed rows"),
        Matmul("MLP", f"[{q_len}, {d}] through {spec.mlp_parameters:,.0f} params", 2 * q_len * spec.mlp_parameters,
               "fed rows"),
    ]


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
    return [{"op": a.op, "shape": a.shape.replace(f"[{q_on}, ", "[q, ", 1), "grows": a.grows,
             "flops_on": a.flops, "flops_off": b.flops} for a, b in zip(on, off)]


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


ARTICLE_SENTENCE = "A red jacket compliments any outfit."  # GPT-2's worked example: 7 GPT-2 tokens


def gpt2_shapes_frame(t: StepTrace, spec, prompt_len: int) -> pd.DataFrame:
    """The worked example's numbers first: GPT-2 (124M) on its sentence, whatever the prompt on screen,
    beside the live model on its own prompt (each counted by its own tokenizer).

    GPT-2's figures come from its published config (12 heads, head_dim 64), its token count from its own bundled
    tokenizer: "A red jacket compliments any outfit." gives [1, 12, 7, 64], [1, 12, 1, 64], [1, 12, 8, 64]. Both
    columns move with the run: after this run's n-th decode step GPT-2's cache would hold 7 + n positions.
    """
    from drawing import gpt2
    from physics.kvcalc import from_table

    ref, s = from_table("gpt2"), gpt2.count(ARTICLE_SENTENCE)
    new = t.kv_len - prompt_len  # positions this run added after its prompt (0 at prefill)

    def q(s, pos):
        return f"[1, {s.heads}, {pos}, {s.head_dim}]"

    def k(s, pos):
        return f"[1, {s.kv_heads}, {pos}, {s.head_dim}]"

    rows = [("prompt tokens (pos at prefill)", str(s), str(prompt_len)),
            ("q at prefill [batch, head, pos, head_dim]", q(ref, s), q(spec, prompt_len)),
            ("q at a cached decode step", q(ref, 1), q(spec, 1)),
            ("K cache after decode step 1", k(ref, s + 1), k(spec, prompt_len + 1)),
            (f"K cache after this step (step {t.step})" + ("" if t.use_cache else ", were it kept: the cache is off"),
             k(ref, s + new), k(spec, t.kv_len))]
    return pd.DataFrame(rows, columns=["tensor", "GPT-2 (124M)", "this model"])
