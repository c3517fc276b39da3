"""Where each traced step sits on the roofline of this device.

    attainable FLOP/s = min(peak FLOP/s, arithmetic intensity x bandwidth)
    arithmetic intensity = FLOPs / bytes moved        (both estimates, from engine.forward.estimates)
    achieved FLOP/s = FLOPs estimate / measured forward time

Prefill does many FLOPs per weight byte (far right: the compute side of the ridge); a cached
decode step reads every weight for one position (far left: the memory side). Which side a step
sits on is the roofline's prediction; `verdict` says what the measured time shows (a small model's
step is often neither: overhead-bound, many times above both bounds).

Memory is a hierarchy, so bandwidth depends on how many bytes a step moves: a 16 MB model that
fits the processor's last-level cache is read from it, many times faster than a 450 MB model
streaming from DRAM every step. The probe moves buffers of several sizes (`COPY_MIB`) two ways, a copy
(read one buffer, write the other) and a matrix-vector product (read a matrix once: what a decode step
does to its weights), and keeps the faster at each size; `DeviceRoof.bandwidth_for(bytes)` is that rate at
that many bytes, so each step's memory bound uses the bandwidth its own size gets on this device. (A copy
alone reads low on a CPU, since it writes as much as it reads: with it as the roof, a decode step can measure
faster than its own "bound". docs/measurements.md has the figures.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from engine import device as dev


# bytes each bandwidth probe moves, MiB: cache-sized to well past any last-level cache (a CPU's reaches ~500 MiB)
COPY_MIB = {"cpu": (16, 64, 256, 1024), "gpu": (64, 1024)}
STREAM_COLUMNS = 4096  # the matrix-vector probe's row length (a d_model's order)
CACHE_GAP = 0.8  # DRAM's rate below this share of the best one: a cache worth a roof of its own
DTYPE_NAMES = {4.0: "fp32", 2.0: "bf16", 1.0: "fp8"}


@dataclass(frozen=True)
class DeviceRoof:
    name: str
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s: the best rate measured (data that fits a cache, where one helps)
    measured: bool  # True: probed here; False: datasheet figures
    # (bytes moved, bytes/s), smallest first: bandwidth as the data grows; () = one figure
    bandwidths: tuple = ()
    elem_bytes: float = 4.0  # the dtype its peak is for (fp32 probe: 4; a datacenter datasheet: bf16, 2)

    @property
    def dtype(self) -> str:
        return DTYPE_NAMES.get(self.elem_bytes, f"{self.elem_bytes:g}-byte")

    @property
    def ridge_tokens(self) -> float:
        """The ridge in tokens: a pass over n tokens that reads its weights once does 2 FLOPs per weight per token
        over elem_bytes per weight (intensity ~ 2n / elem_bytes), so it reaches the ridge at n ~ ridge x elem / 2
        (an H100 in bf16: ~295 tokens; this CPU in fp32: ~2 x its ridge)."""
        return self.ridge * self.elem_bytes / 2

    def ridge_tokens_at(self, bytes_moved: float) -> float:
        """The ridge in tokens for a pass that moves this many bytes: at the bandwidth those bytes get here (a model
        that streams from DRAM meets a lower bandwidth, so a later ridge, than one a cache holds)."""
        return self.peak_flops / self.bandwidth_for(bytes_moved) * self.elem_bytes / 2

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak_flops / self.bandwidth

    @property
    def dram_bandwidth(self) -> float:
        """The rate with the largest buffers probed: data that no cache holds, streaming from memory."""
        return self.bandwidths[-1][1] if self.bandwidths else self.bandwidth

    @property
    def dram_ridge(self) -> float:
        return self.peak_flops / self.dram_bandwidth

    @property
    def cache_roof(self) -> bool:
        """The probe found a cache much faster than DRAM (CACHE_GAP): pictures draw two memory roofs."""
        return self.dram_bandwidth < CACHE_GAP * self.bandwidth

    def bandwidth_for(self, bytes_moved: float) -> float:
        """The bandwidth measured at this many bytes (log-linear between probed sizes, the ends beyond them).

        A step whose weights and cache fit the last-level cache gets the cache's rate; one that moves more
        than any cache holds gets DRAM's.
        """
        pts = [(b, r) for b, r in self.bandwidths if b > 0 and r > 0]
        if not pts or bytes_moved <= 0:
            return self.bandwidth
        if bytes_moved <= pts[0][0]:
            return pts[0][1]
        for (b0, r0), (b1, r1) in zip(pts, pts[1:]):
            if bytes_moved <= b1:
                t = math.log(bytes_moved / b0) / math.log(b1 / b0)
                return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
        return pts[-1][1]

    def best(self, other: "DeviceRoof") -> "DeviceRoof":
        """The higher peak and, size by size, the higher bandwidth of two probes of this device.

        A probe on a shared machine reads low whenever other work holds a core or the memory bus; keeping the
        best of two makes each bound tighter, never looser, so no label is flattered by a busy moment.
        """
        theirs = dict(other.bandwidths)
        rates = tuple((b, max(r, theirs.get(b, 0.0))) for b, r in self.bandwidths)
        return DeviceRoof(name=self.name, peak_flops=max(self.peak_flops, other.peak_flops),
                          bandwidth=max(self.bandwidth, other.bandwidth), measured=self.measured and other.measured,
                          bandwidths=rates, elem_bytes=self.elem_bytes)


def probe_device(device_name: str, dtype_name: str | None = None, budget_s: float = 0.6) -> DeviceRoof:
    """`probe` by names, as a page holds them: 'auto', 'cpu' or 'cuda', and 'float32' / 'bfloat16' (None: the
    device's own fast dtype). A step is judged against the roof of the dtype it ran in."""
    from engine.device import pick_device, pick_dtype

    device = pick_device(device_name)
    dtype = getattr(torch, dtype_name) if dtype_name else pick_dtype(device)
    return probe(device, dtype, budget_s=budget_s)


def probe(device: torch.device, dtype: torch.dtype = torch.float32, budget_s: float = 1.5,
          on_progress=None) -> DeviceRoof:
    """Measure matmul FLOP/s and memory bandwidth on this device, each within about budget_s seconds.

    Bandwidth is probed at every size of COPY_MIB that free memory allows (twice over), the time shared
    between the sizes and two ways of moving the bytes, the faster kept at each size:
        copy            reads one buffer and writes the other (both count as bytes moved)
        matrix-vector   reads a [rows, 4096] matrix once, as a decode step reads its weights
    """
    n = 1024 if device.type == "cpu" else 4096
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    flops = _best_rate(lambda: a @ b, 2 * n**3, device, budget_s)
    del a, b
    if on_progress:
        on_progress(0.5, "matmul done, measuring memory bandwidth…")
    free = dev.available_bytes(device)
    sizes = [m * 2**20 for m in COPY_MIB["cpu" if device.type == "cpu" else "gpu"] if 2 * m * 2**20 <= free]
    sizes = sizes or [COPY_MIB["cpu"][0] * 2**20]  # the smallest, even where memory is short
    rates, each = [], budget_s / len(sizes) / 2
    for total in sizes:
        src = torch.empty(total // 8, device=device, dtype=torch.float32).fill_(1.0)  # half the bytes, 4 per element
        dst = torch.empty_like(src)
        copy = _best_rate(lambda: dst.copy_(src), total, device, each)
        del src, dst
        rows = total // 4 // STREAM_COLUMNS  # float32: 4 bytes an element
        matrix = torch.empty(rows, STREAM_COLUMNS, device=device, dtype=torch.float32).fill_(1.0)
        vector = torch.ones(STREAM_COLUMNS, device=device, dtype=torch.float32)
        stream = _best_rate(lambda: torch.mv(matrix, vector), matrix.numel() * 4, device, each)
        del matrix, vector
        rates.append((total, max(copy, stream)))
    if on_progress:
        on_progress(1.0, "done")
    return DeviceRoof(name=f"{device.type} (measured here, {str(dtype).removeprefix('torch.')} matmul)",
                      peak_flops=flops, bandwidth=max(r for _, r in rates), measured=True, bandwidths=tuple(rates),
                      elem_bytes=float(torch.finfo(dtype).bits // 8))


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
    """A roofline from an accelerators.csv row (fp16/bf16 dense peak, else fp32), in the dtype of its peak: a step
    predicted on it counts its bytes in that dtype (`predict`)."""
    peak = row.get("peak_tflops_fp16_bf16_dense") if dtype_bytes <= 2 else None
    elem = float(dtype_bytes)
    if peak is None or peak != peak:  # NaN
        peak, elem = row.get("peak_tflops_fp32"), 4.0
    return DeviceRoof(name=f"{row['name']} (datasheet)", peak_flops=float(peak) * 1e12,
                      bandwidth=float(row["memory_bandwidth_gb_s"]) * 1e9, measured=False, elem_bytes=elem)


def side(intensity: float, roof: DeviceRoof) -> str:
    """Which side of the device's ridge a step's intensity puts it: what the roofline *predicts*, not what was
    measured ('the compute side' right of the ridge, 'the memory side' left of it)."""
    return "the compute side" if intensity >= roof.ridge else "the memory side"


def predict(spec, q_len: int, past: int, roof: DeviceRoof) -> dict:
    """What `roof` PREDICTS for a pass of this model (nothing ran there), counted in the roof's own dtype
    (roof.elem_bytes: bf16 on a datacenter datasheet), never in the dtype this CPU ran:

        intensity     = FLOPs / bytes, both estimates in that dtype (a 400-token prefill of the bundled model:
                        ~161 FLOP/byte in fp32, ~321 in bf16, so 'the compute side' of an H100's 295)
        compute bound = FLOPs / peak, memory bound = bytes / bandwidth; the predicted time is the larger
    """
    from engine.forward.estimates import step_bytes, step_flops

    return _predicted(step_flops(spec, q_len, past), step_bytes(spec, q_len, past, roof.elem_bytes), roof)


def predict_counts(flops: float, bytes_moved: float, elem_bytes: float, roof: DeviceRoof) -> dict:
    """`predict` for a pass known by its counts (a recorded ladder's FLOPs and bytes, counted in elem_bytes per
    element): the bytes are counted again in the roof's own dtype (every byte a pass moves is a weight or a K/V
    element, so they scale with the element size), the FLOPs are the same."""
    return _predicted(flops, bytes_moved * roof.elem_bytes / elem_bytes, roof)


def _predicted(flops: float, moved: float, roof: DeviceRoof) -> dict:
    ai = flops / moved
    compute_ms, memory_ms = flops / roof.peak_flops * 1e3, moved / roof.bandwidth_for(moved) * 1e3
    where = side(ai, roof)
    return {"predicted": True, "dtype": roof.dtype, "flops": flops, "bytes": moved, "intensity": ai, "side": where,
            "compute_ms": compute_ms, "memory_ms": memory_ms, "predicted_ms": max(compute_ms, memory_ms),
            "label": f"predicted: {where} of the {short_name(roof)}'s ridge ({ai:,.0f} vs {roof.ridge:,.0f} "
                     f"FLOP/byte in {roof.dtype})"}


def prediction_words(p: dict, roof: DeviceRoof) -> str:
    """`predict`'s answer inside a sentence: 'predicted on the memory side (126 vs 295 FLOP/byte in bf16)'."""
    return f"predicted on {p['side']} ({p['intensity']:,.0f} vs {roof.ridge:,.0f} FLOP/byte in {p['dtype']})"


def short_name(roof: DeviceRoof) -> str:
    """'NVIDIA H100 SXM (datasheet)' -> 'NVIDIA H100 SXM': the card, without where its figures come from."""
    return roof.name.split(" (")[0]


def predict_step(t, spec, roof: DeviceRoof) -> dict:
    """`predict` for a traced step (its q_len and past), e.g. the bundled prefill on an H100's datasheet."""
    return predict(spec, t.q_len, t.past, roof)


BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def batch_roofline(spec, context: int, roof: DeviceRoof, batches=BATCHES) -> list[dict]:
    """Batched decode on `roof`, PREDICTED in its dtype (engine.forward.estimates.batched_decode): per batch size B,
    the pass's intensity (about B FLOP/byte in bf16), the FLOP/s the roof allows there, and the predicted time, the
    larger of the two bounds. `saturating_batch` names the B where the points reach the ridge."""
    from engine.forward.estimates import batched_decode

    out = []
    for b in batches:
        d = batched_decode(spec, b, context, roof.elem_bytes)
        compute_ms, memory_ms = d["flops"] / roof.peak_flops * 1e3, d["bytes"] / roof.bandwidth_for(d["bytes"]) * 1e3
        out.append(d | {"predicted": True, "dtype": roof.dtype, "side": side(d["intensity"], roof),
                        "attainable": min(roof.peak_flops, d["intensity"] * roof.bandwidth_for(d["bytes"])),
                        "predicted_ms": max(compute_ms, memory_ms), "ms_per_token": max(compute_ms, memory_ms) / b})
    return out


def cache_off_steps(n: int, ridge_tokens: float) -> float:
    """The cache-off rule: a step that feeds all n positions again (no cache) costs about max(1, n / ridge_tokens)
    cached steps on a device whose ridge is ridge_tokens tokens (DeviceRoof.ridge_tokens). Below the ridge both
    passes wait on reading the same weights, so the cache saves little time; past it the cache-off pass is
    compute-bound and grows with n. (The FLOP ratio, ~n, is what it saves in arithmetic, not in time.)"""
    return max(1.0, n / ridge_tokens)


def decode_prefill_gap(s: int, ridge_tokens: float) -> float:
    """How much dearer per token a cached decode step is than an s-token prefill: about min(s, ridge_tokens). A
    prefill reads the weights once for s tokens, but past the ridge it is compute-bound and stops getting cheaper
    per token."""
    return float(min(s, ridge_tokens))


EXPLAINS = 2.0  # measured within this many times its larger bound: the bound is most (half or more) of the time
OVERHEAD = 3.0  # measured more than this many times the larger bound: neither roof explains the time


def verdict(forward_ms: float, flops: float, bytes_moved: float, roof: DeviceRoof) -> dict:
    """What a measured time says about a step: compute-bound, memory-bound, on one side of the ridge, or
    overhead-bound.

        memory bound  = bytes moved / bandwidth      (the least time reading and writing them can take;
                                                      the bandwidth this device gets at that many bytes)
        compute bound = FLOPs / peak FLOP/s          (the least time the arithmetic can take)

    The larger bound names the side of the ridge the step is on (at the bandwidth its own bytes get). A step is
    labelled by that bound only when the bound explains most of its time: within EXPLAINS (×2) of it, the bound
    is half the time or more ('memory-bound'). Between ×2 and OVERHEAD (×3) the bound is a third to a half of the
    time: the step is on that side of the ridge, and the label says how much of its time is above the bound
    ('on the memory side, not memory-bound: ×2.6 its bound, 62% of the time above it'), so a 26 M decode step whose matmuls are 45 % of
    it is not called memory-bound. Further above both, what the step waits on is neither: the fixed cost of
    launching many small ops and the Python around them ('overhead-bound, ×N above both bounds').
    """
    memory_ms = bytes_moved / roof.bandwidth_for(bytes_moved) * 1e3
    compute_ms = flops / roof.peak_flops * 1e3
    larger = max(memory_ms, compute_ms)
    ratio = forward_ms / larger if larger > 0 else float("inf")
    bound = "memory" if memory_ms >= compute_ms else "compute"
    if ratio > OVERHEAD:
        kind = "overhead-bound"
        label = f"overhead-bound (×{ratio:.0f} above both bounds)" if ratio >= 10 else \
            f"overhead-bound (×{ratio:.1f} above both bounds)"
    elif ratio > EXPLAINS:
        kind = f"{bound} side"
        label = f"on the {bound} side, not {bound}-bound: ×{ratio:.1f} its bound, {1 - 1 / ratio:.0%} of the time above it"
    else:
        kind = label = f"{bound}-bound"
    return {"kind": kind, "label": label, "memory_ms": memory_ms, "compute_ms": compute_ms, "ratio": ratio,
            "bound": bound, "over_memory": forward_ms / memory_ms if memory_ms > 0 else float("inf")}


def step_verdict(t, roof: DeviceRoof) -> dict:
    """`verdict` for one traced step: its measured median forward time against its estimated FLOPs and bytes."""
    return verdict(t.forward_ms, t.flops_estimate, t.bytes_estimate, roof)


def h100() -> DeviceRoof:
    """An H100's roofline from the bundled datasheet table, in bf16, to PREDICT a step on (`predict`); its steps'
    intensity is counted in bf16, not in the fp32 a CPU trace's intensity_estimate uses."""
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


def predicted_points(traces, spec, roof: DeviceRoof) -> list[dict]:
    """`place` on a roof nothing ran on: each step's pass PREDICTED there (`predict_step`, in the roof's dtype), placed
    at its intensity and on the roof itself (FLOPs over the predicted time), labelled 'predicted'."""
    out = []
    for t in traces:
        p = predict_step(t, spec, roof)
        kind = t.phase if t.phase == "prefill" else ("decode (cache)" if t.use_cache else "decode (no cache)")
        out.append({"step": t.step, "kind": kind, "intensity": p["intensity"],
                    "achieved": p["flops"] / (p["predicted_ms"] / 1e3), "predicted_ms": p["predicted_ms"],
                    "label": f"step {t.step}, predicted: {p['predicted_ms']:.3g} ms"})
    return out


def prediction_frame(traces, spec, roof: DeviceRoof):
    """Per step: what `roof` PREDICTS for the same pass, in its own dtype (nothing ran there: no measured time, no
    verdict), beside the table of this device's measured bounds (`bound_frame`)."""
    import pandas as pd

    rows = []
    for t in traces:
        p = predict_step(t, spec, roof)
        rows.append({"step": t.step, "phase": t.phase, "predicted": p["side"].removeprefix("the "),
                     "predicted ms": round(p["predicted_ms"], 4), "memory bound ms": round(p["memory_ms"], 4),
                     "compute bound ms": round(p["compute_ms"], 4),
                     f"FLOP/byte in {roof.dtype} (estimate)": round(p["intensity"], 1)})
    return pd.DataFrame(rows)


def bound_frame(traces, roof: DeviceRoof):
    """Per step: the measured time beside its two lower bounds, and what the measurement shows (see `verdict`)."""
    import pandas as pd

    rows = []
    for t in traces:
        v = step_verdict(t, roof)
        rows.append({"step": t.step, "phase": t.phase, "what the measurement shows": v["label"],
                     "measured ms (median)": round(t.forward_ms, 3),
                     "memory bound ms (bytes / bandwidth)": round(v["memory_ms"], 4),
                     "compute bound ms (FLOPs / peak)": round(v["compute_ms"], 4),
                     "measured / larger bound": round(v["ratio"], 1), "FLOP/byte (estimate)": round(t.intensity_estimate, 2)})
    return pd.DataFrame(rows)
