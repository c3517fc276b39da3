"""Cache vs no-cache race: tables, figures, growth fits and the length sweep.

The race itself is `engine.compare.compare` (both modes in lockstep, alternating
steps); this module turns its result into what the race page shows.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine.compare import compare
from engine.figures import PREFILL, _layout

CACHE = "#1f77b4"  # blue
NOCACHE = "#d62728"  # red: distinct from blue on a projector and for most colour-blind viewers
MODES = {"cache": ("KV cache on", CACHE), "nocache": ("KV cache off", NOCACHE)}


def race_frame(report: dict) -> pd.DataFrame:
    """One row per step per mode: the CSV export and the source of every race chart."""
    rows = []
    for mode, stepper in report["steppers"].items():
        cumulative = 0.0
        for t in stepper.traces:
            cumulative += t.latency_ms
            rows.append({"mode": mode, "step": t.step, "phase": t.phase, "kv_len": t.kv_len, "q_len": t.q_len,
                         "token_id": t.token_id, "token": t.token, "latency_ms": round(t.latency_ms, 4),
                         "cumulative_ms": round(cumulative, 4), "warmup": t.warmup,
                         "flops_estimate": t.flops_estimate})
    return pd.DataFrame(rows)


def growth_exponent(positions, values) -> float | None:
    """k in values ~ positions^k, fitted by least squares in log-log space (None if too few points)."""
    pts = [(math.log(p), math.log(v)) for p, v in zip(positions, values) if p > 0 and v > 0]
    if len(pts) < 3:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def summary(report: dict, df: pd.DataFrame) -> dict:
    """Speed-up, totals and fitted exponents of cumulative decode time vs steps."""
    out = {"identical": report["identical"], "max_logit_diff": report["max_logit_diff"],
           "first_divergence_step": report["first_divergence_step"], **report["speedup"]}
    for mode in MODES:
        d = df[(df["mode"] == mode) & (df["phase"] == "decode") & ~df["warmup"]]
        out[f"{mode}_prefill_ms"] = float(df[(df["mode"] == mode) & (df["phase"] == "prefill")]["latency_ms"].sum())
        out[f"{mode}_exponent"] = growth_exponent(d["step"], d["latency_ms"].cumsum())
        out[f"{mode}_flops_exponent"] = growth_exponent(d["step"], d["flops_estimate"].cumsum())
    return out


def latency_figure(df: pd.DataFrame, title: str = "Per-step latency against position") -> go.Figure:
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
    fig = _layout(fig, title, height=420)
    fig.update_layout(font=dict(size=18))
    return fig


def cumulative_figure(df: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[df["mode"] == mode]
        fig.add_trace(go.Scatter(x=d["step"], y=d["cumulative_ms"], name=name, line=dict(color=colour, width=4)))
    fig.update_xaxes(title="step (0 = prefill)")
    fig.update_yaxes(title="total ms so far (measured)", rangemode="tozero")
    fig = _layout(fig, "Cumulative time", height=380)
    fig.update_layout(font=dict(size=18))
    return fig


def flops_figure(df: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[(df["mode"] == mode)]
        fig.add_trace(go.Scatter(x=d["step"], y=d["flops_estimate"].cumsum(), name=f"{name} (estimate)",
                                 line=dict(color=colour, width=4, dash="dash")))
    fig.update_xaxes(title="step (0 = prefill)")
    fig.update_yaxes(title="total FLOPs (estimate)", rangemode="tozero")
    fig = _layout(fig, "Total work, estimated: linear with the cache, quadratic without", height=380)
    fig.update_layout(font=dict(size=18))
    return fig


def sweep(lm, prompt: str, lengths=(32, 64, 128, 256, 512), repeats: int = 3, sampling=None, on_progress=None) -> pd.DataFrame:
    """Both modes at several lengths; medians over `repeats` of time per token and total decode time."""
    rows = []
    jobs = [(n, r) for n in lengths for r in range(repeats)]
    for i, (n, r) in enumerate(jobs):
        rep = compare(lm, prompt, steps=n, sampling=sampling, stop_on_eos=False)
        for mode, stepper in rep["steppers"].items():
            ms = [t.latency_ms for t in stepper.traces if t.phase == "decode" and not t.warmup]
            rows.append({"tokens": n, "repeat": r, "mode": mode, "total_ms": sum(ms),
                         "ms_per_token": sum(ms) / max(1, len(ms))})
        if on_progress:
            on_progress((i + 1) / len(jobs), f"{n} tokens, repeat {r + 1}/{repeats}")
    df = pd.DataFrame(rows)
    return df.groupby(["tokens", "mode"], as_index=False)[["total_ms", "ms_per_token"]].median()


def sweep_figure(df: pd.DataFrame, column: str, title: str) -> go.Figure:
    fig = go.Figure()
    for mode, (name, colour) in MODES.items():
        d = df[df["mode"] == mode]
        fig.add_trace(go.Scatter(x=d["tokens"], y=d[column], mode="lines+markers", name=name,
                                 line=dict(color=colour, width=4), marker=dict(size=9)))
    fig.update_xaxes(title="new tokens", type="log")
    fig.update_yaxes(title=f"{column.replace('_', ' ')} (median, measured)", type="log")
    fig = _layout(fig, title, height=380)
    fig.update_layout(font=dict(size=18))
    return fig
