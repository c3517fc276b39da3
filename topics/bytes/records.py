"""What `topics.bytes.measure` returns: frozen records of plain numbers (no torch), the line fitted, and JSON.

A page, the lesson and the CLI read only these, so every sentence is a function of a record and a test can hand
them a synthetic one (tests/test_bytes.py).

    Rates      one round's probes: the read rate (bytes/s), the matmul peak per compute dtype (FLOP/s), and a plain
               read of the long-context step's own K/V cache
    Pass       one timed pass (a storage's decode step or prefill, or the fp32 decode at a context), its time per
               round and its bounds per round, from the bytes counted off its tensors and the FLOPs (estimate); a
               CPU's decode step also its time inside inductor's kernels (the products) and outside them
    Damage     one bundled model in one storage against fp32: teacher-forced top-1 agreement and KL, per story
    Line       time against context: the slope fitted, and where the K/V's time reaches the step's at no context
    Record     all of it, with where and when it was measured
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, fields

STORAGES = ("fp32", "bf16", "fp16", "int8", "int4", "bf16 model")  # topics/bytes/storage.py says what each stores
COMPUTE = {"fp32": "fp32", "bf16": "fp32", "fp16": "fp32", "int8": "fp32", "int4": "fp32",
           "bf16 model": "bf16"}  # each one's arithmetic
#         on a CPU (a pass records its own: on a GPU the weight-only storages run over a bf16 model, in bf16)
FASTER = 0.9  # a time under this share of the reference's is called faster; over 1 / FASTER, slower; else the same
SLOPE_WITHIN = 0.15  # a fitted slope this close to its prediction, either way, is called within it


@dataclass(frozen=True)
class Rates:
    read: float  # bytes/s: a read of a buffer no cache holds, the faster of two ways (the roof's: RoundRates)
    peaks: dict  # compute dtype -> FLOP/s of a square matmul
    cache: float = 0.0  # bytes/s: a plain read of the long-context step's own K/V cache (0 where not probed)


@dataclass(frozen=True)
class Pass:
    storage: str  # one of STORAGES
    kind: str  # "decode" (one token), "prefill" (rows tokens); fp32's "context" (a decode step at a long context)
    #            and "evicted" (the longest context's step over a window of its cache)
    rows: int
    context: int  # positions the step reads from the K/V cache (a prefill: 0)
    weight_bytes: int  # counted from the pass's tensors
    kv_bytes: int  # the K/V read (counted per position from the cache's tensors, times context)
    flops: float  # estimate (engine.forward.estimates)
    samples_ms: tuple  # one per round
    warmup_ms: float
    kernel: str = ""
    compute: str = ""  # the dtype its arithmetic ran in ("" in an older recording: COMPUTE's)
    kernels_ms: float = 0.0  # a CPU's decode step: its time inside inductor's kernels (the products, fused with the
    #                          norms), from profiled calls after the rounds; 0 where not measured
    profiled_ms: float = 0.0  # the same profiled calls' whole time (the profiler's bookkeeping in it, outside the kernels)

    @property
    def arith(self) -> str:
        return self.compute or COMPUTE[self.storage]

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def outside_ms(self) -> float:
        """The profiled calls' time outside inductor's kernels (0 where they were not timed apart)."""
        return max(self.profiled_ms - self.kernels_ms, 0.0) if self.kernels_ms else 0.0

    def bounds_ms(self, rounds) -> tuple:
        """Per round: the larger of bytes / read rate and FLOPs / the peak of this storage's arithmetic."""
        return tuple(1e3 * max(self.bytes / r.read, self.flops / r.peaks[self.arith]) for r in rounds)

    def memory_ms(self, rounds) -> float:
        return statistics.median(1e3 * self.bytes / r.read for r in rounds)

    def compute_ms(self, rounds) -> float:
        return statistics.median(1e3 * self.flops / r.peaks[self.arith] for r in rounds)

    def held(self, rounds) -> float:
        """The median over rounds of that round's time over that round's bound."""
        return statistics.median(t / b for t, b in zip(self.samples_ms, self.bounds_ms(rounds)))

    def memory_held(self, rounds) -> float:
        """Its median time over its memory bound (`memory_ms`): the storage table's two columns, divided, so a
        sentence and the table beside it give one figure (a median of per-round ratios gave ×1.4 beside a
        table reading 16.0 / 10.3 = ×1.55)."""
        return self.median_ms / self.memory_ms(rounds)

    def read_rate(self) -> float:
        """Bytes/s the pass reached: its bytes over its median time."""
        return self.bytes / (self.median_ms / 1e3)


@dataclass(frozen=True)
class Damage:
    model: str
    storage: str
    agree: tuple  # per story: the share of teacher-forced positions whose top-1 token is fp32's
    kl: tuple  # per story: mean KL(fp32 || storage) in nats
    tokens: int  # positions compared, all stories

    @property
    def agreement(self) -> float:
        return statistics.fmean(self.agree)

    @property
    def kl_mean(self) -> float:
        return statistics.fmean(self.kl)


@dataclass(frozen=True)
class Line:
    """time = intercept + slope · context, fitted by least squares."""

    slope_ms: float  # ms per position of context
    intercept_ms: float
    predicted_slope_ms: float  # K/V bytes per position / a plain read of the cache itself (median of the rounds)
    predicted_crossing: float  # positions where the K/V's bytes equal the weights'
    cache_read: float = 0.0  # bytes/s the prediction divides by (the cache's plain read, else the roof's)
    roof_read: float = 0.0  # bytes/s: the roof's read (RoundRates)
    compute_slope_ms: float = 0.0  # the attention's FLOPs per position (estimate) / the matmul peak probed
    flops_per_byte: float = 0.0  # the attention's FLOPs per K/V byte (estimate)

    @property
    def crossing(self) -> float:
        """Positions where the K/V's time (slope · context) reaches the step's time at no context."""
        return self.intercept_ms / self.slope_ms if self.slope_ms > 0 else float("inf")

    @property
    def slope_off(self) -> float:
        return self.slope_ms / self.predicted_slope_ms

    @property
    def slope_held(self) -> bool:
        """The fitted slope within SLOPE_WITHIN of the predicted (the issue's target, the page's "within")."""
        return abs(self.slope_off - 1) <= SLOPE_WITHIN

    @property
    def cache_probed(self) -> bool:
        """The prediction divides by the cache's own read, not the roof's (a recording that probed it)."""
        return self.cache_read != self.roof_read

    @property
    def roof_slope_ms(self) -> float:
        """The same bytes over the roof's read (another buffer); 0 where it was not probed."""
        return self.predicted_slope_ms * self.cache_read / self.roof_read if self.roof_read else 0.0

    @property
    def roof_off(self) -> float:
        return self.slope_ms / self.roof_slope_ms if self.roof_slope_ms else float("nan")

    @property
    def read_at(self) -> float:
        """Bytes/s the step read its K/V at: the bytes per position over the fitted slope's time."""
        return self.cache_read / self.slope_off if self.slope_ms > 0 else 0.0

    @property
    def crossing_off(self) -> float:
        return self.crossing / self.predicted_crossing


def fit(xs, ys) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through (xs, ys)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


@dataclass(frozen=True)
class WindowDamage:
    """The budget page's window policy at about the evicted step's share of the bytes, read from its recording."""

    policy: str
    budget: int
    context: int
    model: str
    agreement: float
    kl_mean: float
    bytes_ratio: float
    source: str
    stories: tuple[float, ...] = ()  # each held-out story's agreement, where a recording of several has this policy,
    #                                  budget and context (one story is one draw: its spread said beside it)


@dataclass(frozen=True)
class Record:
    device: str
    rung: str
    parameters: int
    threads: int
    load: tuple  # the 1-minute load average before and after (os.getloadavg), or () where unknown
    measured_at: str
    command: str
    wall_s: float
    compile_s: float
    rounds: tuple  # Rates, one per round
    passes: tuple  # Pass
    kv_per_token: int  # the reference storage's cache, counted
    damage: tuple = ()  # Damage
    window: WindowDamage | None = None  # the budget page's window policy, from its recording
    notes: tuple = ()
    reference: str = "fp32"  # the storage every ratio is taken against (a GPU's: the bf16 model)

    @property
    def named(self) -> str:
        """The rung as the ladder names it, by its parameters ('112M rung'), not by the size it was asked for
        ('110M rung', 112 M parameters once built); a shape keeps its name ('Llama-3-8B shape')."""
        if not self.rung.endswith(" rung"):
            return self.rung
        from physics.rungs import short_count

        return f"{short_count(self.parameters)} rung"

    def get(self, storage: str, kind: str, context: int | None = None) -> Pass | None:
        return next((p for p in self.passes if p.storage == storage and p.kind == kind
                     and (context is None or p.context == context)), None)

    def storages(self) -> list[str]:
        """The storages timed, the reference first, in the order they were measured."""
        return list(dict.fromkeys(p.storage for p in self.passes if p.kind == "decode"))

    def ratio(self, storage: str, kind: str) -> float | None:
        """The median over rounds of this storage's time over the reference's in the same round."""
        a, b = self.get(storage, kind), self.get(self.reference, kind)
        if a is None or b is None:
            return None
        return statistics.median(x / y for x, y in zip(a.samples_ms, b.samples_ms))

    def predicted_ratio(self, storage: str, kind: str) -> float | None:
        """Its bound over the reference's: the memory bound's for a decode (bytes), the compute bound's for a prefill
        (FLOPs over the arithmetic's peak), each the median over rounds."""
        a, b = self.get(storage, kind), self.get(self.reference, kind)
        if a is None or b is None:
            return None
        bound = Pass.memory_ms if kind == "decode" else Pass.compute_ms
        return statistics.median(bound(a, (r,)) / bound(b, (r,)) for r in self.rounds)

    def context_passes(self) -> list[Pass]:
        return sorted((p for p in self.passes if p.kind == "context"), key=lambda p: p.context)

    def line(self) -> Line | None:
        pts = self.context_passes()
        if len(pts) < 3:
            return None
        slope, icpt = fit([p.context for p in pts], [p.median_ms for p in pts])
        roof = statistics.median(r.read for r in self.rounds)
        cache = statistics.median(r.cache for r in self.rounds) if all(r.cache for r in self.rounds) else roof
        kv = self.kv_per_token
        flops = (pts[-1].flops - pts[0].flops) / (pts[-1].context - pts[0].context)  # per position, estimate
        peak = statistics.median(r.peaks[pts[0].arith] for r in self.rounds)
        return Line(slope, icpt, 1e3 * kv / cache, pts[0].weight_bytes / kv, cache, roof,
                    1e3 * flops / peak, flops / kv)

    def evicted(self) -> tuple[Pass, Pass] | None:
        """(the window's step, the full step at the same longest context)."""
        e = next((p for p in self.passes if p.kind == "evicted"), None)
        full = self.context_passes()
        return (e, full[-1]) if e and full else None

    def evicted_ratio(self) -> float | None:
        pair = self.evicted()
        if not pair:
            return None
        return statistics.median(a / b for a, b in zip(pair[0].samples_ms, pair[1].samples_ms))

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["rounds"] = [asdict(r) for r in self.rounds]
        d["passes"] = [asdict(p) | {"median_ms": p.median_ms} for p in self.passes]
        d["damage"] = [asdict(x) | {"agreement": x.agreement, "kl_mean": x.kl_mean} for x in self.damage]
        d["load"], d["notes"] = list(self.load), list(self.notes)
        d["window"] = asdict(self.window) if self.window else {}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        keep = {f.name for f in fields(cls)} - {"rounds", "passes", "damage", "load", "notes", "window"}
        pk, dk = {f.name for f in fields(Pass)}, {f.name for f in fields(Damage)}
        return cls(**{k: d[k] for k in keep if k in d},
                   rounds=tuple(Rates(float(r["read"]), dict(r["peaks"]), float(r.get("cache", 0.0)))
                                for r in d["rounds"]),
                   passes=tuple(Pass(**{k: v for k, v in p.items() if k in pk} | {"samples_ms": tuple(p["samples_ms"])})
                                for p in d["passes"]),
                   damage=tuple(Damage(**{k: v for k, v in x.items() if k in dk} | {"agree": tuple(x["agree"]),
                                                                                   "kl": tuple(x["kl"])})
                                for x in d.get("damage", ())),
                   load=tuple(d.get("load", ())), notes=tuple(d.get("notes", ())),
                   window=WindowDamage(**{**d["window"], "stories": tuple(d["window"].get("stories", ()))})
                   if d.get("window") else None)
