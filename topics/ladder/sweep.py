"""Prefill across the ridge: one rung's prefill timed over a sweep of prompt lengths s, each placed on the roofline.

A prefill of s tokens reads every weight once and does about 2 x parameters x s FLOPs, so its arithmetic
intensity grows with s (in bf16 about s FLOP per byte; in fp32 about s / 2). Below the device's ridge
(peak FLOP/s over bandwidth) the weights' bytes set its time and the time per prompt token falls as s grows;
above it the arithmetic does, and the time per token levels off. Where it crosses:

    this project's CPU, fp32    ridge ~13 FLOP/byte     crossing near s ~ 27
    an H200, bf16               ridge ~180 FLOP/byte    crossing near s ~ 180

Each s is timed on the lean path (engine.forward.compiled `full`: every position at once, compiled on a GPU;
its compile and each new length's warm-up apart), `repeats` times after a warm-up, perf_counter around a
device sync, and labelled by the existing rule (engine.measure.roofline.verdict: memory-bound, compute-bound,
or overhead-bound above both). The roofline is probed under the same threads and dtype, before the sweep.

Lengths stop at the model's positions and at a time budget: the next s is timed only if its predicted cost
(the last s's, scaled by s) fits what is left.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone

import pandas as pd
import torch

from engine.measure.roofline import DeviceRoof, verdict

LENGTHS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # s, doubling: the crossing falls between two of them
REPEATS = 3
BUDGET_S = 60.0  # the sweep's timed passes, compile apart (the largest s may be left out to keep it)
PROBE_S = 1.5  # each half of the roofline probe
SWEEP_SHAPE = {"cuda": "Llama-3-8B", "cpu": "SmolLM2-135M"}  # the rung a sweep takes by default, per device
SWEEP_KEYS = ("rung", "weights", "parameters", "device", "dtype", "threads", "how", "roof", "points", "left_out",
              "compile_ms", "wall_s", "measured_at", "versions", "ridge", "crossing_s", "measured_crossing_s")
POINT_KEYS = ("s", "median_ms", "low_ms", "high_ms", "runs", "warmup_ms", "per_token_ms", "flops", "bytes_moved",
              "intensity", "memory_ms", "compute_ms", "kind", "label", "ratio", "side")


@dataclass(frozen=True)
class SweepPoint:
    """One prompt length: its prefill timed and placed on the roofline (FLOPs and bytes are estimates)."""

    s: int
    median_ms: float
    low_ms: float
    high_ms: float
    runs: int
    warmup_ms: float | None  # this length's warm-up calls (a new CUDA graph is recorded per length), apart
    per_token_ms: float  # median over s: the time per prompt token
    flops: float  # estimate (engine.forward.estimates.step_flops)
    bytes_moved: float  # estimate, in the run's dtype
    intensity: float  # FLOP per byte: where the pass sits on the roofline's x axis
    memory_ms: float  # bytes / the bandwidth this device gets at that many bytes
    compute_ms: float  # FLOPs / peak
    kind: str  # compute-bound · memory-bound · overhead-bound (roofline.verdict)
    label: str
    ratio: float  # measured / the larger bound
    side: str  # the roofline's prediction from intensity alone: 'the memory side' / 'the compute side'


@dataclass(frozen=True)
class PrefillSweep:
    """One rung's prefill over many s, on one device's roofline."""

    rung: str  # the rung's name: 'Llama-3-8B' (a published shape), '4.1M' (the model itself), '112M' (grown)
    weights: str  # in words: 'Llama-3-8B's shape, random weights: timing only'
    parameters: int
    device: str
    dtype: str
    threads: int
    how: str  # which path ran (engine.forward.compiled.Lean.describe('full'))
    roof: DeviceRoof
    points: tuple[SweepPoint, ...]
    left_out: tuple[str, ...]  # lengths not timed, and why ('4096: past the time budget')
    compile_ms: float | None  # the first length's warm-up: compiling the pass (apart from every timing)
    wall_s: float
    measured_at: str
    versions: dict | None = None

    @property
    def ridge(self) -> float:
        """FLOP per byte where the memory roof meets the compute roof (the probe's best bandwidth, as
        roofline.verdict's memory bound uses at a prefill's bytes: DRAM's rate for any model past the cache)."""
        b = self.points[0].bytes_moved if self.points else 0
        return self.roof.peak_flops / self.roof.bandwidth_for(b) if b else self.roof.ridge

    @property
    def crossing_s(self) -> float | None:
        """The s where the estimated intensity meets the ridge (log-interpolated between timed lengths)."""
        pts = self.points
        for a, b in zip(pts, pts[1:]):
            if a.intensity < self.ridge <= b.intensity:
                t = math.log(self.ridge / a.intensity) / math.log(b.intensity / a.intensity)
                return math.exp(math.log(a.s) + t * (math.log(b.s) - math.log(a.s)))
        return None

    @property
    def measured_crossing_s(self) -> int | None:
        """The first s labelled compute-bound after one labelled memory-bound: where the measurement crossed."""
        seen_memory = False
        for p in self.points:
            if p.kind == "memory-bound":
                seen_memory = True
            elif p.kind == "compute-bound" and seen_memory:
                return p.s
        return None

    def on(self, roof: DeviceRoof) -> "PrefillSweep":
        """The same timings placed on another roof (a ladder's final, best-of-two one): bounds and labels again."""
        from engine.measure.roofline import side

        points = []
        for p in self.points:
            v = verdict(p.median_ms, p.flops, p.bytes_moved, roof)
            at = DeviceRoof(roof.name, roof.peak_flops, roof.bandwidth_for(p.bytes_moved), roof.measured)
            points.append(replace(p, memory_ms=v["memory_ms"], compute_ms=v["compute_ms"], kind=v["kind"],
                                  label=v["label"], ratio=v["ratio"], side=side(p.intensity, at)))
        return replace(self, roof=roof, points=tuple(points))

    def frame(self) -> pd.DataFrame:
        """One row per s: the table a page shows (bounds and intensity are estimates)."""
        return pd.DataFrame([{
            "s (prompt tokens)": p.s, "ms (min–max)": f"{p.median_ms:.2f} ({p.low_ms:.2f}–{p.high_ms:.2f})",
            "ms per prompt token": round(p.per_token_ms, 4), "FLOP/byte (estimate)": round(p.intensity, 1),
            "memory bound ms": round(p.memory_ms, 3), "compute bound ms": round(p.compute_ms, 3),
            "× the larger bound": round(p.ratio, 2), "the roofline predicts": p.side, "measured": p.label,
        } for p in self.points])

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["roof"] = asdict(self.roof) | {"ridge": self.roof.ridge}
        d["points"] = [asdict(p) for p in self.points]
        d["left_out"] = list(self.left_out)
        return d | {"ridge": self.ridge, "crossing_s": self.crossing_s, "measured_crossing_s": self.measured_crossing_s}

    @classmethod
    def from_dict(cls, d: dict) -> "PrefillSweep":
        roof = DeviceRoof(**{k: d["roof"][k] for k in ("name", "peak_flops", "bandwidth", "measured")},
                          bandwidths=tuple((int(b), float(r)) for b, r in d["roof"].get("bandwidths", ())))
        top = {f.name: d.get(f.name) for f in fields(cls) if f.name not in ("roof", "points", "left_out")}
        return cls(**top, roof=roof, points=tuple(SweepPoint(**p) for p in d["points"]),
                   left_out=tuple(d.get("left_out", ())))


def prompt_ids(lm, s: int) -> torch.Tensor:
    """s tokens of the demo text repeated, [batch=1, s] (a random rung's tokens are noise; these are text)."""
    from topics.ladder.profile import DEMO_TEXT

    ids = lm.tokenizer(" ".join([DEMO_TEXT] * (s // 8 + 4)), add_special_tokens=False)["input_ids"]
    while len(ids) < s:
        ids = ids + ids
    return torch.tensor([ids[:s]])


def point(s: int, timing, spec, elem_bytes: int, roof: DeviceRoof, warmup_ms: float | None) -> SweepPoint:
    """A timed prefill of s tokens, labelled by the existing rule."""
    from engine.forward.estimates import step_bytes, step_flops
    from engine.measure.roofline import side

    flops, nbytes = step_flops(spec, s, 0), step_bytes(spec, s, 0, elem_bytes)
    v = verdict(timing.forward_ms, flops, nbytes, roof)
    return SweepPoint(s=s, median_ms=timing.forward_ms, low_ms=timing.low_ms, high_ms=timing.high_ms,
                      runs=timing.repeats, warmup_ms=warmup_ms, per_token_ms=timing.forward_ms / s, flops=flops,
                      bytes_moved=nbytes, intensity=flops / nbytes, memory_ms=v["memory_ms"],
                      compute_ms=v["compute_ms"], kind=v["kind"], label=v["label"], ratio=v["ratio"],
                      side=side(flops / nbytes, DeviceRoof(roof.name, roof.peak_flops, roof.bandwidth_for(nbytes),
                                                           roof.measured)))


def prefill_sweep(lm, lengths=LENGTHS, repeats: int = REPEATS, budget_s: float = BUDGET_S, roof=None,
                  compile: bool | None = None, on_progress=None, name: str | None = None,
                  weights: str | None = None) -> PrefillSweep:
    """Time lm's prefill at each s of `lengths` (capped by its positions and `budget_s`), on the lean path.

    `roof` is probed here (same threads, lm's dtype) when not given. on_progress(fraction, text) before each s.
    `name` and `weights` label the rung (default: lm's spec name and source).
    """
    from engine.forward.compiled import Lean, _timed
    from engine import device as dev
    from engine.measure.roofline import probe
    from topics.ladder.measure import serving_cores, versions

    started = time.perf_counter()
    say = on_progress or (lambda fraction, text: None)
    fit = [s for s in sorted(set(lengths)) if s <= lm.spec.max_positions]
    left_out = [f"{s}: past the model's {lm.spec.max_positions} positions" for s in sorted(set(lengths))
                if s > lm.spec.max_positions]
    points, spent, last = [], 0.0, None
    with lm.turn(), serving_cores(lm.spec.parameters) as threads:
        if roof is None:
            say(0.0, "measuring this device's roofline…")
            roof = probe(lm.device, lm.dtype, budget_s=PROBE_S)
        described = dev.describe(lm.device)
    run = Lean(lm, 2, compile)  # the `full` pass needs no cache: this one is never filled
    for i, s in enumerate(fit):
        if last is not None:
            predicted = last[1] * s / last[0] * (repeats + 2) / 1e3  # a warm-up and the timed runs
            if spent + predicted > budget_s:
                left_out += [f"{later}: past the {budget_s:.0f} s time budget" for later in fit[i:]]
                break
        say(i / len(fit), f"prefill of {s} tokens…")
        ids = prompt_ids(lm, s)
        with lm.turn(), serving_cores(lm.spec.parameters):
            t0 = time.perf_counter()
            run.full(ids)  # compile (the first length) or this length's warm-up, apart from its timing
            if len(run.warm_ms) > 1 or i > 0:
                spent += time.perf_counter() - t0  # a length's warm-up counts against the budget; the compile not
            t0 = time.perf_counter()
            timing = _timed(lm, lambda: run.full(ids), repeats)
            spent += time.perf_counter() - t0
        points.append(point(s, timing, lm.spec, lm.elem_bytes, roof, run.warm_ms.get(("full", s))))
        last = (s, timing.forward_ms)
    say(1.0, "done")
    return PrefillSweep(rung=name or lm.spec.name, weights=weights or lm.spec.source, parameters=int(lm.spec.parameters),
                        device=described, dtype=lm.dtype_name, threads=threads, how=run.describe("full"), roof=roof,
                        points=tuple(points), left_out=tuple(left_out), compile_ms=run.compile_ms.get("full"),
                        wall_s=time.perf_counter() - started,
                        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), versions=versions())


def sweep_at(lm, shape: str | None = None, dtype: torch.dtype | None = None, seed: int = 0, **kwargs) -> PrefillSweep:
    """Build one rung (a published shape, a count, or 'own'), sweep its prefill, give its memory back.

    shape defaults to SWEEP_SHAPE for the device (Llama-3-8B on a GPU, SmolLM2-135M on a CPU); dtype to the
    ladder's (engine.load.rungs.timing_dtype: bf16 on a GPU). Checked against free memory before any
    weight is allocated (rungs.plan), refused in one message (TooLarge) if it would not fit.
    """
    from engine import device as dev
    from engine.load.rungs import build, plan
    from engine.load.rungs import timing_dtype

    shape = shape or SWEEP_SHAPE.get(lm.device.type, SWEEP_SHAPE["cpu"])
    dtype = dtype or timing_dtype(lm)
    longest = max(kwargs.get("lengths", LENGTHS))
    if str(shape).strip().lower() in ("own", "model", "bundled"):
        longest = min(longest, lm.spec.max_positions - 2)  # the model itself: the sweep stops at its positions
    (rung,), _ = plan(lm, [shape], tokens=longest, dtype=dtype)
    with lm.turn():
        rlm = build(rung, lm, seed, dtype)
    try:
        return prefill_sweep(rlm, name=rung.label, weights=rung.weights, **kwargs)
    finally:
        del rlm
        dev.release_memory()
