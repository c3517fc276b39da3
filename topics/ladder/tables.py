"""The Scale page's roofline tables, one row per step: the measured time beside its two bounds and the verdict
(`bound_frame`), what a datasheet roof predicts for the same passes (`prediction_frame`), and published models'
KV side by side (`compare_frame`, lesson 8). The core returns
records (physics.roofline: Verdict, Prediction); the tables a page shows are made here."""

from __future__ import annotations

import pandas as pd

from physics import roofline
from physics.kvcalc import from_table
from physics.units import human_bytes


def prediction_frame(traces, spec, roof: roofline.DeviceRoof):
    """Per step: what `roof` PREDICTS for the same pass, in its own dtype (nothing ran there: no measured time, no
    verdict), beside the table of this device's measured bounds (`bound_frame`)."""
    rows = []
    for t in traces:
        p = roofline.predict_step(t, spec, roof)
        rows.append({"step": t.step, "phase": t.phase, "predicted": p.side.removeprefix("the "),
                     "predicted ms": _sig(p.predicted_ms), "memory bound ms": _sig(p.memory_ms),
                     "compute bound ms": _sig(p.compute_ms),
                     f"FLOP/byte in {roof.dtype} (estimate)": round(p.intensity, 1)})
    return pd.DataFrame(rows)


def bound_frame(traces, roof: roofline.DeviceRoof):
    """Per step: what the measurement shows (its kind and the share of its roof, see `verdict`) beside the measured
    time and its two lower bounds. The words come first and short, so a projector shows each row whole; the times
    keep three significant figures, so a 0.156 and a 0.1561 never sit in one column."""
    rows = []
    for t in traces:
        v = roofline.step_verdict(t, roof)
        rows.append({"step": t.step, "phase": t.phase, "side of the ridge (predicted)": v.side,
                     "what the measurement shows": v.kind, "share of its roof (measured)": v.share_cell,
                     "measured ms (median)": _sig(t.forward_ms), "memory bound ms (bytes / bandwidth)": _sig(v.memory_ms),
                     "compute bound ms (FLOPs / peak)": _sig(v.compute_ms), "measured / larger bound": _sig(v.ratio),
                     "FLOP/byte (estimate)": _sig(t.intensity_estimate)})
    return pd.DataFrame(rows)


def _sig(x: float, figures: int = 3) -> float:
    """x to `figures` significant figures: 6.3792 -> 6.38, 153.9 -> 154, 0.15614 -> 0.156."""
    return float(f"{x:.{figures}g}")


def compare_frame(names: list[str], tokens: int, elem_bytes: float = 2.0) -> pd.DataFrame:
    """Published models side by side: their attention, KV bytes per token, at `tokens`, and as MHA (estimates)."""
    rows = []
    for name in names:
        a = from_table(name)
        rows.append({"model": name,  # the sizes first: on a phone the columns past its width scroll out of view
                     # two decimals: the MHA column is the first times query over KV heads, and must read so
                     f"KV for {tokens:,} tokens": human_bytes(a.kv_bytes(tokens, 1, elem_bytes), 2),
                     "KV per token (fp16, estimate)": human_bytes(a.kv_bytes_per_token(elem_bytes)),
                     f"same model as MHA, {tokens:,} tokens": human_bytes(a.as_mha().kv_bytes(tokens, 1, elem_bytes),
                                                                          2),
                     "attention": f"{a.attention} ({a.heads} query / {a.kv_heads} KV heads)"
                     + (f", {a.sliding_layers} sliding layers" if a.sliding_layers else ""),
                     "reads at most": f"{a.max_positions:,} positions" if a.max_positions else "not published"})
    return pd.DataFrame(rows)
