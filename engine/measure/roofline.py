"""Where each traced step sits on the roofline of this device.

    attainable FLOP/s = min(peak FLOP/s, arithmetic intensity x bandwidth)
    arithmetic intensity = FLOPs / bytes moved        (both estimates, from engine.forward.estimates)
    achieved FLOP/s = FLOPs estimate / measured forward time

Prefill does many FLOPs per weight byte (far right: compute-bound); a cached
decode step reads every weight for one position (far left: memory-bound).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import plotly.graph_objects as go
import torch

from engine.load import device as dev
from engine.draw.figures import DECODE, PREFILL, _layout


@dataclass(frozen=True)
class DeviceRoof:
    name: str
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    measured: bool  # True: probed here; False: datasheet figures

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak_flops / self.bandwidth


def probe(device: torch.device, dtype: torch.dtype = torch.float32, budget_s: float = 1.5,
          on_progress=None) -> DeviceRoof:
    """Measure matmul FLOP/s and copy bandwidth on this device, each within about budget_s seconds."""
    n = 1024 if device.type == "cpu" else 4096
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    flops = _best_rate(lambda: a @ b, 2 * n**3, device, budget_s)
    if on_progress:
        on_progress(0.5, "matmul done, measuring memory bandwidth…")
    elems = (64 if device.type == "cpu" else 512) * 2**20 // 4
    src = torch.empty(elems, device=device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    bandwidth = _best_rate(lambda: dst.copy_(src), 2 * src.numel() * 4, device, budget_s)  # read + write
    if on_progress:
        on_progress(1.0, "done")
    return DeviceRoof(name=f"{device.type} (measured here, {str(dtype).removeprefix('torch.')} matmul)",
                      peak_flops=flops, bandwidth=bandwidth, measured=True)


def _best_rate(fn, work: float, device: torch.device, budget_s: float) -> float:
    """Best observed work/second over repeated timed runs (after one warm-up)."""
    fn()
    dev.sync(device)
    best, t_end = 0.0, time.perf_counter() + budget_s
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        dev.sync(device)
        best = max(best, work / (time.perf_counter() - t0))
    return best


def from_datasheet(row, dtype_bytes: int = 2) -> DeviceRoof:
    """A roofline from an accelerators.csv row (fp16/bf16 dense peak, else fp32)."""
    peak = row.get("peak_tflops_fp16_bf16_dense") if dtype_bytes <= 2 else None
    if peak is None or peak != peak:  # NaN
        peak = row.get("peak_tflops_fp32")
    return DeviceRoof(name=f"{row['name']} (datasheet)", peak_flops=float(peak) * 1e12,
                      bandwidth=float(row["memory_bandwidth_gb_s"]) * 1e9, measured=False)


def bound(intensity: float, roof: DeviceRoof) -> str:
    """'compute-bound' right of the device's ridge, 'memory-bound' left of it: the label comes from the device."""
    return "compute-bound" if intensity >= roof.ridge else "memory-bound"


def h100() -> DeviceRoof:
    """An H100's roofline from the bundled datasheet table, to place a step on for comparison."""
    from engine.measure.kvcalc import accelerators

    rows = accelerators().set_index("name")
    name = "NVIDIA H100 SXM"
    return from_datasheet(rows.loc[name].to_dict() | {"name": name})


def place(traces) -> list[dict]:
    """Each step's arithmetic intensity and achieved FLOP/s (from estimates and measured time)."""
    out = []
    for t in traces:
        if t.forward_ms <= 0:
            continue
        kind = t.phase if t.phase == "prefill" else ("decode (cache)" if t.use_cache else "decode (no cache)")
        out.append({"step": t.step, "kind": kind, "intensity": t.intensity_estimate,
                    "achieved": t.flops_estimate / (t.forward_ms / 1e3), "forward_ms": t.forward_ms,
                    "bytes_estimate": t.bytes_estimate})
    return out


def bound_frame(traces, roof: DeviceRoof):
    """Per decode step: the memory lower bound bytes/bandwidth next to the measured time."""
    import pandas as pd

    rows = [{"step": t.step, "measured ms (median)": round(t.forward_ms, 3),
             "lower bound ms (bytes moved / bandwidth, estimate)": round(t.bytes_estimate / roof.bandwidth * 1e3, 4),
             "measured / bound": round(t.forward_ms / (t.bytes_estimate / roof.bandwidth * 1e3), 1),
             "FLOP/byte (estimate)": round(t.intensity_estimate, 2), "here": bound(t.intensity_estimate, roof)}
            for t in traces if t.phase == "decode"]
    return pd.DataFrame(rows)


def figure(roof: DeviceRoof, points: list[dict], scale: float = 1.0) -> go.Figure:
    xs = [10 ** (i / 20) for i in range(-40, 101)]  # 0.01 .. 1e5 FLOP/byte
    fig = go.Figure(go.Scatter(x=xs, y=[min(roof.peak_flops, x * roof.bandwidth) for x in xs], name="roofline",
                               line=dict(color="#333", width=3)))
    colours = {"prefill": PREFILL, "decode (cache)": DECODE, "decode (no cache)": "#d62728"}
    for kind, colour in colours.items():
        pts = [p for p in points if p["kind"] == kind]
        if pts:
            fig.add_trace(go.Scatter(x=[p["intensity"] for p in pts], y=[p["achieved"] for p in pts], mode="markers",
                                     name=kind, marker=dict(color=colour, size=11),
                                     text=[f"step {p['step']}" for p in pts],
                                     hovertemplate="%{text}<br>%{x:.1f} FLOP/byte<br>%{y:.3g} FLOP/s<extra></extra>"))
    fig.add_vline(x=roof.ridge, line_dash="dot", annotation_text=f"ridge {roof.ridge:.1f} FLOP/byte")
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per byte moved, estimate)")
    fig.update_yaxes(type="log", title="FLOP/s (achieved = FLOPs estimate / measured time)")
    return _layout(fig, f"Roofline: {roof.name}", height=460, scale=scale)
