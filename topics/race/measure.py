"""Cache vs no-cache race: the table, growth fits, the playback and the length sweep (figures: topics/race/draw.py).

The race itself is `engine.generate.compare.compare`: both modes measured in lockstep,
alternating steps, so neither has the machine to itself. The page then *plays the
race back* at the measured wall-clock speed of each mode (`progress_at`), so the
cached run visibly finishes first, by exactly the measured factor.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from engine.generate.compare import compare

MODES = ("cache", "nocache")  # the two runs of a race, in the order they are drawn



def race_frame(report: dict) -> pd.DataFrame:
    """One row per step per mode: the CSV export and the source of every race chart."""
    rows = []
    for mode, stepper in report["steppers"].items():
        cumulative = 0.0
        for t in stepper.traces:
            cumulative += t.latency_ms
            rows.append({"mode": mode, "step": t.step, "phase": t.phase, "kv_len": t.kv_len, "q_len": t.q_len,
                         "token_id": t.token_id, "token": t.token, "latency_ms": round(t.latency_ms, 4),
                         "cumulative_ms": round(cumulative, 4),
                         "flops_estimate": t.flops_estimate})
    return pd.DataFrame(rows)


def growth_exponent(positions, values) -> float | None:
    """k in values ~ positions^k, fitted by least squares in log-log space (None if too few points)."""
    fit = growth_fit(positions, values)
    return None if fit is None else fit[0]


def growth_fit(positions, values) -> tuple[float, float, float] | None:
    """(k, low, high): the log-log slope and its 95% range (± 1.96 standard errors of the slope)."""
    pts = [(math.log(p), math.log(v)) for p, v in zip(positions, values) if p > 0 and v > 0]
    if len(pts) < 3:
        return None
    x, y = np.array(pts).T
    (k, c), res, *_ = np.polyfit(x, y, 1, full=True)
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum())
    if n <= 2 or sxx == 0:
        return float(k), float(k), float(k)
    resid = y - (k * x + c)
    se = math.sqrt(float((resid**2).sum()) / (n - 2) / sxx)
    return float(k), float(k - 1.96 * se), float(k + 1.96 * se)


def progress_at(df: pd.DataFrame, elapsed_ms: float) -> dict:
    """Where each mode was `elapsed_ms` into its own measured run: tokens done, of how many, finished?

    A token counts once the forward pass that chose it has finished (prefill chooses the first).
    """
    out = {}
    for mode in MODES:
        d = df[df["mode"] == mode]
        done = int((d["cumulative_ms"] <= elapsed_ms).sum())
        out[mode] = {"tokens": done, "total": len(d), "finished": done == len(d),
                     "total_ms": float(d["cumulative_ms"].iloc[-1]) if len(d) else 0.0}
    return out


def headline(s: dict) -> str:
    """What the measured growth shows, in words that the fits support (never more)."""
    fits = {m: s.get(f"{m}_fit") for m in MODES}
    if not all(fits.values()):
        return "Too few steps to fit a growth rate."
    (kc, lc, hc), (kn, ln, hn) = fits["cache"], fits["nocache"]
    parts = [f"Total decode time grows like n^{kc:.2f} with the cache (95% range {lc:.2f}–{hc:.2f}) and "
             f"n^{kn:.2f} without it ({ln:.2f}–{hn:.2f})."]
    if ln > hc:
        parts.append("Without the cache it measurably grows faster.")
    elif lc > hn:  # against the lesson, and the ranges do not overlap: say what was measured, and why it can be
        parts.append("Here the cached run's time grew measurably faster, against the lesson (its work grows more "
                     "slowly, estimate): timing noise, most likely a busy server. Run again.")
    else:
        parts.append("At this length the two growth rates cannot be told apart: run longer.")
    if hn < 1.9:
        parts.append("The estimate for the work itself is n² without the cache; fixed per-step costs "
                     "(Python, kernel launches) still dominate the measured time at this length.")
    return " ".join(parts)


def summary(report: dict, df: pd.DataFrame) -> dict:
    """Speed-up, totals and fitted exponents of cumulative decode time vs steps."""
    out = {"identical": report["identical"], "max_logit_diff": report["max_logit_diff"],
           "first_divergence_step": report["first_divergence_step"], **report["speedup"]}
    for mode in MODES:
        d = df[(df["mode"] == mode) & (df["phase"] == "decode")]
        out[f"{mode}_prefill_ms"] = float(df[(df["mode"] == mode) & (df["phase"] == "prefill")]["latency_ms"].sum())
        out[f"{mode}_fit"] = growth_fit(d["step"], d["latency_ms"].cumsum())
        out[f"{mode}_exponent"] = out[f"{mode}_fit"][0] if out[f"{mode}_fit"] else None
        out[f"{mode}_flops_exponent"] = growth_exponent(d["step"], d["flops_estimate"].cumsum())
    return out


def sweep(lm, prompt: str, lengths=(32, 64, 128, 256, 512), repeats: int = 3, sampling=None,
          on_progress=None) -> pd.DataFrame:
    """Both modes at several lengths; medians over `repeats` of time per token and total decode time."""
    rows = []
    jobs = [(n, r) for n in lengths for r in range(repeats)]
    for i, (n, r) in enumerate(jobs):
        rep = compare(lm, prompt, new_tokens=n, sampling=sampling, stop_on_eos=False)
        for mode, stepper in rep["steppers"].items():
            ms = [t.latency_ms for t in stepper.traces if t.phase == "decode"]
            rows.append({"tokens": n, "repeat": r, "mode": mode, "total_ms": sum(ms),
                         "ms_per_token": sum(ms) / max(1, len(ms))})
        if on_progress:
            on_progress((i + 1) / len(jobs), f"{n} tokens, repeat {r + 1}/{repeats}")
    df = pd.DataFrame(rows)
    return df.groupby(["tokens", "mode"], as_index=False)[["total_ms", "ms_per_token"]].median()
