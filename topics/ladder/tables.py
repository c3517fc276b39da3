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
                     "predicted ms": round(p.predicted_ms, 4), "memory bound ms": round(p.memory_ms, 4),
                     "compute bound ms": round(p.compute_ms, 4),
                     f"FLOP/byte in {roof.dtype} (estimate)": round(p.intensity, 1)})
    return pd.DataFrame(rows)


def bound_frame(traces, roof: roofline.DeviceRoof):
    """Per step: the measured time beside its two lower bounds, and what the measurement shows (see `verdict`)."""
    rows = []
    for t in traces:
        v = roofline.step_verdict(t, roof)
        rows.append({"step": t.step, "phase": t.phase, "side of the ridge (predicted)": v.side,
                     "measured ms (median)": round(t.forward_ms, 3),
                     "memory bound ms (bytes / bandwidth)": round(v.memory_ms, 4),
                     "compute bound ms (FLOPs / peak)": round(v.compute_ms, 4),
                     "measured / larger bound": round(v.ratio, 1), "FLOP/byte (estimate)": round(t.intensity_estimate, 2),
                     "what the measurement shows": v.label})  # last: the numbers whole, the words run off the end
    return pd.DataFrame(rows)


def compare_frame(names: list[str], tokens: int, elem_bytes: float = 2.0) -> pd.DataFrame:
    """Published models side by side: their attention, KV bytes per token, at `tokens`, and as MHA (estimates)."""
    rows = []
    for name in names:
        a = from_table(name)
        rows.append({"model": name,  # the sizes first: on a phone the columns past its width scroll out of view
                     f"KV for {tokens:,} tokens": human_bytes(a.kv_bytes(tokens, 1, elem_bytes)),
                     "KV per token (fp16, estimate)": human_bytes(a.kv_bytes_per_token(elem_bytes)),
                     f"same model as MHA, {tokens:,} tokens": human_bytes(a.as_mha().kv_bytes(tokens, 1, elem_bytes)),
                     "attention": f"{a.attention} ({a.heads} query / {a.kv_heads} KV heads)"
                     + (f", {a.sliding_layers} sliding layers" if a.sliding_layers else ""),
                     "reads at most": f"{a.max_positions:,} positions" if a.max_positions else "not published"})
    return pd.DataFrame(rows)
