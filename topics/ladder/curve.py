"""One pass, n rows: the roofline proven by experiment.

A pass over n rows reads every weight once and does about 2 · parameters · n FLOPs:

    a prefill of n tokens        ids [batch=1, n]     positions 0 .. n-1
    a decode step for n sequences  ids [batch=n, 1]   each at the same context s (a static batch's step)

While the weights' bytes set the time (the memory side), the time stays flat as n grows; once the FLOPs do (the
compute side), it grows in proportion to n. A prefill's knee sits where its intensity meets the device's ridge:
about ridge × elem_bytes / 2 rows (~7 on this project's CPU in fp32, ~169 on the H200 recorded, both measured). A
batch of decodes runs the same products, and each sequence's attention reads its own K/V in kernels of their own,
whose time adds to the products' (`batch_knee`): its knee comes sooner. A ratio to a roof depends on how good the
kernel is; the shape of this curve does not.

Every pass runs on the lean path (engine.forward.lean: gpt-fast's Llama over the rung's own weights, compiled
whole). The curve's passes use the multi-row kernel (`F.linear`, a single row run as one of n), so
that the row count is the only thing that moves; the rung's decode step (`DECODE`) is timed apart on the kernel a
one-row step runs best with (on a CPU a streamed dot product; on a GPU the one-row graph), and is the ladder's
lean decode. Timed as every step here is: perf_counter around a device sync, warm-up calls apart (they compile: one
graph for n = 1, one for every other n of each kind, the compile time kept in `compile_ms`), medians of
`repeats` runs with their min-max, timed in rounds (every pass once a round, so a slow minute falls on every n
alike and the ratios between passes are measured side by side). Each pass is placed on the ladder's roof (the
same `DeviceRoof` every page quotes): its FLOPs and bytes are estimates (engine.forward.estimates), its bounds
those over the roof's peak and the bandwidth its bytes get.

Each kind's knee is read off the curve (`Curve.knee`), beside a prediction made before anything ran:
    predicted knee   the n where the pass stops being its weights' read: a prefill's where its intensity
                     (estimate) reaches the ridge (the roof's peak over DRAM's rate); its bytes are its weights, so
                     its knee is the ridge in rows. A decode step for n sequences also reads every sequence's K/V
                     at the curve's context, in attention kernels that stay on the memory side at any n, so that
                     time adds to the products' and its knee comes sooner (`batch_knee`)
    measured knee    where the flat level (the median of the passes of n ≥ 2 below the predicted knee) meets the
                     slope (a straight line fitted to the passes past twice the predicted knee): the roofline's
                     two lines, measured. The one-row pass runs a graph of its own: where it took longer than a
                     pass over more rows of its kind (`OUTLIER`) it is an outlier, drawn and named, never the level

Every ratio between two passes compares passes run by one kernel (`RowsPass.kernel`) and says which: on a CPU
the rung's decode step runs its own one-row kernel and is a labelled point of its own, never the "one row" of
the many-row passes.

Bounds probed beside the passes: every round of the timed passes starts with a read of a buffer no cache holds
(the faster of a plain sum and a matrix-vector product) and a square matmul (`roofline.RoundRates`), so a slow
minute lands on the bounds as on the passes; a pass's ratio to its bound is the median over rounds of that round's
time over that round's bound (`Curve.held`), its spread the lowest and highest round. A curve recorded before this
(`rounds` empty) was placed on one probe, made before the passes, and says so.
"""

from __future__ import annotations

import math
import statistics
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields, replace

import torch

from engine.forward.estimates import step_bytes, step_flops
from engine.forward.run import Timing
from engine.timing import now
from physics.batched import batched_decode, weights_knee
from physics.roofline import DeviceRoof, RoundRates, verdict

OUTLIER = 1.05  # a one-row pass slower than a pass over more rows of its kind by more than this: an outlier
PAST = 2.0  # the slope is fitted on the passes at this many times the predicted knee or more
NEGLIGIBLE = 1.05  # a batch's predicted knee within this factor of the prefill's: its K/V bytes are negligible
KINDS = ("prefill", "batch")  # a prefill of n tokens; a decode step for a batch of n sequences
DECODE = "decode"  # the rung's own decode step: one token, one sequence, on the kernel a one-row step runs best with
REPEATS = 5
MAX_ROWS = {"cpu": 128, "cuda": 4096}  # the longest pass timed on each kind of device
# rows are doubled until n reaches this many times the predicted knee: on a CPU the slope is plain by then; a GPU's
# big matmuls still climb toward the peak (H200, Llama-3-8B, 2026-11-28: ×1.42 its compute bound at 384 rows,
# ×1.29 at 1024, ×1.27 at 4096), and a pass of a few thousand rows costs it tens of milliseconds
PAST_KNEE = {"cpu": 5, "cuda": 20}
BUDGET_S = 40.0  # the timed passes (compile apart): a row count whose predicted time would not fit is left out
CACHE_SHARE = 0.5  # a batch's static K/V cache may take at most this share of the free memory
POINT_KEYS = ("kind", "rows", "samples_ms", "warmup_ms", "flops", "bytes_moved", "memory_ms", "compute_ms")
ONE_ROW_KERNEL = "the one-row kernel"  # a CPU's decode step: a streamed dot product over each weight row
MANY_ROW_KERNEL = "the many-row kernel"  # a CPU's passes over n rows: `F.linear`, one row run as one of n
ONE_ROW_GRAPH = "the one-row graph"  # a GPU's n = 1 (the decode step's and the one-token prefill's): its own kernels
MANY_ROW_GRAPH = "the many-row graph"  # a GPU's n ≥ 2, one graph per kind


def kernel_of(kind: str, rows: int, cpu: bool) -> str:
    """The kernel a pass runs (see the module docstring): on a CPU the decode step's own one-row kernel, else the
    many-row one (one row padded); on a GPU the one-row graph for n = 1, the many-row graph for more."""
    if not cpu:
        return ONE_ROW_GRAPH if rows == 1 else MANY_ROW_GRAPH
    return ONE_ROW_KERNEL if kind == DECODE else MANY_ROW_KERNEL


@dataclass(frozen=True)
class RowsPass:
    """One lean pass over n rows, measured, with its two lower bounds on the roof it was placed on."""

    kind: str  # "prefill" (n tokens of one sequence) or "batch" (one decode step for n sequences)
    rows: int  # n
    samples_ms: tuple[float, ...]  # every timed run, each perf_counter around a device sync
    warmup_ms: float | None  # the first timed run, excluded from the median
    flops: float  # estimate
    bytes_moved: float  # estimate: every weight once, and the K/V the pass reads and writes
    memory_ms: float  # bytes / the bandwidth they get on the roof
    compute_ms: float  # FLOPs / the roof's peak
    kernel: str = ""  # the kernel it ran on (kernel_of); "" in a recording made before it was kept: Curve.kernel

    @property
    def intensity(self) -> float:
        """FLOP per byte (estimates): where the pass sits on the roofline's x axis."""
        return self.flops / self.bytes_moved

    @property
    def bound_ms(self) -> float:
        return max(self.memory_ms, self.compute_ms)

    @property
    def bound(self) -> str:
        """'memory' or 'compute': which bound is the larger (as Verdict.bound), a prediction no slow minute moves."""
        return "memory" if self.memory_ms >= self.compute_ms else "compute"

    @property
    def share(self) -> float:
        """How near its roof it ran: the larger bound over the measured time (the bandwidth's share on the memory
        side, MBU; the matmul peak's on the compute side, MFU)."""
        return self.bound_ms / self.median_ms

    def round_ratios(self, rounds) -> tuple[float, ...]:
        """Each round's time over that round's larger bound (bytes over its read rate, FLOPs over its matmul rate):
        () where the rounds were not probed."""
        if len(rounds) != len(self.samples_ms):
            return ()
        return tuple(ms / (max(self.bytes_moved / read, self.flops / peak) * 1e3)
                     for ms, (read, peak) in zip(self.samples_ms, rounds))

    def on(self, roof: DeviceRoof) -> "RowsPass":
        v = verdict(self.median_ms, self.flops, self.bytes_moved, roof)
        return replace(self, memory_ms=v.memory_ms, compute_ms=v.compute_ms)

    def timing(self) -> Timing:
        return Timing(samples_ms=self.samples_ms, warmup_ms=self.warmup_ms)

    @property
    def median_ms(self) -> float:
        return self.timing().forward_ms

    @property
    def low_ms(self) -> float:
        return self.timing().low_ms

    @property
    def high_ms(self) -> float:
        return self.timing().high_ms


@dataclass(frozen=True)
class Curve:
    """The rung's lean pass over n = 1, 2, 4, … rows, both kinds, on one roof."""

    rung: str  # the rung's label ('112M', 'Llama-3-8B')
    parameters: int
    dtype: str
    context: int  # s: the context every sequence of the batched decode step has
    path: str  # how the passes ran (engine.forward.lean.compile_settings' words)
    compile_ms: dict  # graph -> its warm-up (compile) ms, never in a pass's time
    points: tuple[RowsPass, ...]
    left_out: tuple[str, ...]  # row counts not timed, and why
    wall_s: float  # the whole curve, compile included
    elem_bytes: float = 4.0  # bytes per weight in `dtype`
    weights: str = "random weights: for timing only"  # the rung's weights, in words (rungs.Rung.weights)
    # (read bytes/s, matmul FLOP/s) probed at the start of each timed round, in order; () = probed once, before
    rounds: tuple[tuple[float, float], ...] = ()

    def of(self, kind: str) -> tuple[RowsPass, ...]:
        return tuple(p for p in self.points if p.kind == kind)

    def at(self, kind: str, rows: int) -> RowsPass | None:
        return next((p for p in self.of(kind) if p.rows == rows), None)

    def kernel(self, p: RowsPass) -> str:
        """The kernel `p` ran on: its own record's, or (a recording made before it was kept) the one the curve's
        graphs name: a CPU curve compiled 'the decode step (one-row kernel)' apart."""
        return p.kernel or kernel_of(p.kind, p.rows, any("one-row kernel" in g for g in self.compile_ms))

    def base(self, kind: str, rows: int) -> RowsPass | None:
        """What the n-row pass of `kind` is compared with: the pass over the fewest rows of its kind on its kernel
        (the 2-row pass where n = 1 was compiled as a graph of its own, `one_apart`; else the one-row pass of the
        many-row kernel), never an `outlier` (slower than more rows: a ratio against it would understate what the rows
        cost). None where the n-row pass was not timed, or is itself that pass."""
        p = self.at(kind, rows)
        if p is None:
            return None
        odd = self.outlier(kind)
        same = [q for q in self.of(kind) if self.kernel(q) == self.kernel(p) and q.rows < rows
                and not (odd and q is odd.pass_) and not (q.rows == 1 and self.one_apart)]
        return same[0] if same else None

    @property
    def one_apart(self) -> bool:
        """n = 1 compiled as a graph of its own (a CPU curve's 'n = 1 (one token)'): the one-token prefill and the
        one-sequence step ran on it, so neither is the base of a ratio over the n ≥ 2 graph's passes."""
        return any(g.startswith("n = 1") for g in self.compile_ms)

    def ratio(self, kind: str, rows: int) -> float | None:
        """The n-row pass's time over `base`'s: the same kind, the same kernel (None where either was not timed)."""
        return self.compare(self.at(kind, rows), self.base(kind, rows))

    def compare(self, a: RowsPass | None, b: RowsPass | None) -> float | None:
        """a's time over b's, where both ran on one kernel; None where either is missing or the kernels differ: a
        ratio across kernels measures the kernels, not the rows."""
        if a is None or b is None or self.kernel(a) != self.kernel(b):
            return None
        return a.median_ms / b.median_ms

    def predicted_knee(self, kind: str, roof: DeviceRoof) -> float | None:
        """The n where the pass's intensity (estimate) meets the ridge: a prefill's log-interpolated between timed
        n; a batch's where its products and its K/V reads outlast the weights' read (`batch_knee`). None where no n
        does, or none was timed."""
        if kind == "batch":
            return self.batch_knee(roof)
        pts = self.of(kind)
        for a, b in zip(pts, pts[1:]):
            if a.intensity < roof.ridge <= b.intensity:
                t = math.log(roof.ridge / a.intensity) / math.log(b.intensity / a.intensity)
                return math.exp(math.log(a.rows) + t * (math.log(b.rows) - math.log(a.rows)))
        return None

    def batch_bytes(self) -> BatchBytes | None:
        """A decode step for n sequences as n · flops FLOPs over one + (n - 1) · more bytes (estimates): from the
        timed batches, or, where none were timed, from the decode step and the prefills of 1 and 2 tokens (each
        sequence's K/V at the context, and its row of the embedding). None where neither is there."""
        bat = [p for p in self.of("batch")]
        if len(bat) >= 2:
            a, b = bat[0], bat[-1]
            more = (b.bytes_moved - a.bytes_moved) / (b.rows - a.rows)
            return BatchBytes(flops=a.flops / a.rows, one=a.bytes_moved - (a.rows - 1) * more, more=more,
                              kv=None, timed=True)
        dec, p1, p2 = next(iter(self.of(DECODE)), None), self.at("prefill", 1), self.at("prefill", 2)
        if dec is None or p1 is None or p2 is None or self.context < 1:
            return None
        per_position = (dec.bytes_moved - p1.bytes_moved) / self.context  # K and V of one position, every layer
        row = p2.bytes_moved - p1.bytes_moved - per_position  # one token's row of an untied embedding (or 0)
        kv = (self.context + 1) * per_position
        return BatchBytes(flops=dec.flops, one=dec.bytes_moved, more=row + kv, kv=kv, timed=False)

    def batch_knee(self, roof: DeviceRoof) -> float | None:
        """The batch at which a decode step stops being its weights' read (physics.batched.weights_knee: the
        sequences' products and their own K/V reads add, n = ridge · W / (flops + ridge · more), W = one - more),
        from the bytes counted off the timed passes. None where the curve cannot tell."""
        b = self.batch_bytes()
        if b is None or b.flops + roof.ridge * b.more <= 0:
            return None
        return weights_knee(b.one - b.more, b.flops, b.more, roof.ridge)

    def kv_negligible(self, roof: DeviceRoof) -> bool:
        """The batch's predicted knee within NEGLIGIBLE of the prefill's: its K/V bytes change nothing a class sees."""
        pre, bat = self.predicted_knee("prefill", roof), self.batch_knee(roof)
        return bool(pre and bat and max(pre, bat) / min(pre, bat) <= NEGLIGIBLE)

    def outlier(self, kind: str) -> Outlier | None:
        """The one-row pass of `kind` where it took longer than a pass over more rows of its kind by more than
        OUTLIER (more rows read the same weights and do more arithmetic: it runs a graph of its own)."""
        one = self.at(kind, 1)
        if one is None:
            return None
        faster = [p for p in self.of(kind) if p.rows > 1 and p.median_ms * OUTLIER < one.median_ms]
        if not faster:
            return None
        best = min(faster, key=lambda p: p.median_ms)
        return Outlier(pass_=one, faster=best)

    def knee(self, kind: str, roof: DeviceRoof) -> Knee | None:
        """The kind's knee, measured where its two lines meet (see the module docstring), beside the predicted one.
        None where the kind was not timed; its `measured` None where the curve cannot place one."""
        pts = self.of(kind)
        if not pts:
            return None
        predicted = self.predicted_knee(kind, roof)
        edge = predicted or 2 * pts[-1].rows  # no prediction: every pass is on the flat stretch
        flat = [p for p in pts if 2 <= p.rows < edge] or [p for p in pts if p.rows < edge]
        level = statistics.median(p.median_ms for p in flat) if flat else None
        far = [p for p in pts if predicted and p.rows >= PAST * predicted]
        if len(far) < 2:
            far = [p for p in pts if predicted and p.rows > predicted][-2:]
        slope = intercept = measured = None
        if len(far) >= 2:
            mx = statistics.fmean(p.rows for p in far)
            my = statistics.fmean(p.median_ms for p in far)
            slope = (sum((p.rows - mx) * (p.median_ms - my) for p in far)
                     / sum((p.rows - mx) ** 2 for p in far))
            intercept = my - slope * mx
            if level is not None and slope > 0 and level > intercept:
                measured = (level - intercept) / slope
        return Knee(kind=kind, predicted=predicted, level_ms=level, level_rows=tuple(p.rows for p in flat),
                    slope_ms=slope, intercept_ms=intercept, slope_rows=tuple(p.rows for p in far), measured=measured)

    def measured_knee(self, kind: str, roof: DeviceRoof) -> float | None:
        """Where the kind's flat level and its slope meet (`knee`), None where they cannot be placed."""
        k = self.knee(kind, roof)
        return None if k is None else k.measured

    def held(self, p: RowsPass) -> Held | None:
        """`p`'s time over its larger bound, as the median over rounds of each round's ratio (the bounds probed in
        that round), with the lowest and highest; None where the rounds were not probed (an older recording), or
        where a round's probe fell short of the pass (`probes_short`)."""
        ratios = p.round_ratios(self.rounds)
        if not ratios or self.probes_short(p):
            return None
        return Held(median=statistics.median(ratios), low=min(ratios), high=max(ratios), rounds=len(ratios))

    def probes_short(self, p: RowsPass) -> bool:
        """A pass on `p`'s side of the roof ran faster than its round's probe (a ratio below 1): those quick
        probes were no ceiling on that side, for any pass, so `p` is placed on the roof's (the best of the run's
        longer probes), never said to beat its bound, nor flattered by a probe that fell short."""
        return any(r < 1.0 for q in self.points if q.bound == p.bound for r in q.round_ratios(self.rounds))

    def on(self, roof: DeviceRoof) -> "Curve":
        return replace(self, points=tuple(p.on(roof) for p in self.points))

    @property
    def compile_s(self) -> float:
        return sum(self.compile_ms.values()) / 1e3

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["points"] = [asdict(p) | {"median_ms": p.median_ms} for p in self.points]
        d["left_out"] = list(self.left_out)
        d["rounds"] = [list(r) for r in self.rounds]
        return d

    @classmethod
    def from_dict(cls, d: dict, roof: DeviceRoof) -> "Curve":
        """A curve read back from its JSON: a field a recording lacks (kernel, rounds) keeps its default, and the
        words say what the recording lacks rather than invent it."""
        keep = {f.name for f in fields(cls)}
        top = {k: v for k, v in d.items() if k in keep and k not in ("points", "left_out", "rounds")}
        points = tuple(RowsPass(**{k: p[k] for k in POINT_KEYS} | {"samples_ms": tuple(p["samples_ms"]),
                                                                   "kernel": p.get("kernel", "")})
                       for p in d["points"])
        rounds = tuple((float(a), float(b)) for a, b in d.get("rounds") or ())
        return cls(**top, points=points, left_out=tuple(d.get("left_out", ())), rounds=rounds).on(roof)


@dataclass(frozen=True)
class BatchBytes:
    """A decode step for n sequences, in estimates: n · flops FLOPs over one + (n - 1) · more bytes."""

    flops: float  # one sequence's FLOPs
    one: float  # bytes of the step for one sequence (its weights, its K/V)
    more: float  # bytes each more sequence adds (its K/V at the context, its embedding row)
    kv: float | None  # of `more`, the K/V (None where read off timed batches, which do not split it)
    timed: bool  # read off timed batches (True) or derived from the decode step and the prefills (False)


@dataclass(frozen=True)
class Outlier:
    """A one-row pass slower than a pass over more rows of its kind: it runs a graph of its own."""

    pass_: RowsPass
    faster: RowsPass  # the fastest pass over more rows of its kind

    @property
    def times(self) -> float:
        return self.pass_.median_ms / self.faster.median_ms


@dataclass(frozen=True)
class Knee:
    """One kind's knee: the flat level and the slope measured, where they meet, and the prediction beside it."""

    kind: str
    predicted: float | None  # rows: where the intensity (estimate) meets the ridge
    level_ms: float | None  # the median of the passes in level_rows
    level_rows: tuple[int, ...]  # the passes below the predicted knee the level is the median of (n ≥ 2 where any)
    slope_ms: float | None  # ms per row, fitted on slope_rows
    intercept_ms: float | None
    slope_rows: tuple[int, ...]  # the passes well past the predicted knee the slope is fitted on
    measured: float | None  # rows: where the level meets the slope

    @property
    def off(self) -> float | None:
        """Measured over predicted (None where either is missing)."""
        return self.measured / self.predicted if self.measured and self.predicted else None

    def within(self, factor: float) -> bool:
        """The measured knee within `factor` of the predicted one, either way."""
        return self.off is not None and 1 / factor <= self.off <= factor


@dataclass(frozen=True)
class Held:
    """A pass's time over its bound, per round (the bounds probed in that round): median, lowest, highest."""

    median: float
    low: float
    high: float
    rounds: int

    def words(self) -> str:
        """'×1.30 (×1.25–1.41 over 5 rounds)'."""
        return f"×{self.median:.2f} (×{self.low:.2f}–{self.high:.2f} over {self.rounds} rounds)"


# ---------------------------------------------------------------- measuring


def estimates(spec, kind: str, rows: int, context: int, elem_bytes: float) -> tuple[float, float]:
    """(FLOPs, bytes) of a pass over `rows` rows: a prefill of that many tokens, or a decode step for that many
    sequences at `context` positions each (engine.forward.estimates)."""
    if kind == "prefill":
        return step_flops(spec, rows, 0), step_bytes(spec, rows, 0, elem_bytes)
    d = batched_decode(spec, rows, context, elem_bytes)
    return d.flops, d.bytes


def row_counts(spec, roof: DeviceRoof, device: torch.device, context: int) -> list[int]:
    """n = 1, 2, 4, … until PAST_KNEE times the predicted knee of the prefill (at least 16), at most MAX_ROWS."""
    where = "cuda" if device.type == "cuda" else "cpu"
    top, past = MAX_ROWS[where], PAST_KNEE[where]
    n = 1
    while n < top:
        flops, moved = estimates(spec, "prefill", n, context, roof.elem_bytes)
        if flops / moved >= roof.ridge and n >= 16 and n >= past * _first_at_ridge(spec, roof, context):
            break
        n *= 2
    return [2**i for i in range(int(math.log2(min(n, top))) + 1)]


def _first_at_ridge(spec, roof: DeviceRoof, context: int) -> int:
    n = 1
    while n < 1 << 16:
        flops, moved = estimates(spec, "prefill", n, context, roof.elem_bytes)
        if flops / moved >= roof.ridge:
            return n
        n += 1 if n < 64 else n // 8
    return n


def every_pass(spec, roof: DeviceRoof, device: torch.device, context: int, kinds=KINDS) -> list[tuple[str, int]]:
    """(kind, n) for n = 1, 2, 4, … (`row_counts`) of each of `kinds`, the rung's decode step (DECODE, one row) and
    the prefill of `context` tokens (the ladder's s)."""
    rows = row_counts(spec, roof, device, context)
    passes = {(kind, n) for n in rows for kind in kinds} | {(DECODE, 1), ("prefill", context)}
    return sorted(passes, key=lambda p: (p[1], p[0] != DECODE, p[0] != "prefill"))


def graphs_for(passes, cpu: bool) -> list[str]:
    """The compiled graphs a list of (kind, n) passes needs, in measure_curve's names."""
    names = []
    for kind, n in passes:
        name = (f"{kind}, every n ≥ 2" if n > 1 else "the decode step (one-row kernel)" if kind == DECODE and cpu
                else "n = 1 (one token)")
        if name not in names:
            names.append(name)
    return names


def compile_forecast(device_type: str, passes=None) -> str:
    """'compiling 4 graphs; where the shipped recording was made (…) they took 37 s, on a first run …': said
    before the compiles start, from the recording of this kind of device (assets/), or that none is known."""
    import json

    from engine.paths import ASSETS

    path = ASSETS / ("ladder_gpu.json" if device_type == "cuda" else "ladder_cpu.json")
    known, graphs = [], graphs_for(passes or (), device_type == "cpu")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        curve = next((r["curve"] for r in raw["rungs"] if r.get("curve")), None) or {}
        graphs = graphs or list(curve.get("compile_ms", {}))  # no passes given: the recording's own graphs
        known = [curve["compile_ms"][g] for g in graphs if g in curve.get("compile_ms", {})]
        where = raw["device"]
    except (OSError, ValueError, KeyError):
        where = None
    said = f"compiling {len(graphs)} graph{'s' if len(graphs) > 1 else ''} ({', '.join(graphs)})"
    if known:
        said += (f"; on {where} {len(known)} of them took {sum(known) / 1e3:.0f} s when the shipped recording was "
                 "made (a first run on a fresh machine can take several times that; torch keeps compiled code on "
                 "disk, so a later run on the same machine compiles faster)")
    else:
        said += "; no recording of this kind of device says how long: the first compile of each takes tens of seconds"
    return said


@dataclass(frozen=True)
class _Warmed:
    """A pass compiled and run once (its warm-up), waiting for the timed rounds."""

    kind: str
    rows: int
    fn: object  # the compiled pass (or the module itself, uncompiled)
    ids: torch.Tensor
    input_pos: torch.Tensor
    warmup_ms: float  # its first run after the compile: excluded, labelled


def measure_curve(rlm, label: str, roof: DeviceRoof, context: int, repeats: int = REPEATS, passes=None,
                  budget_s: float = BUDGET_S, on_point=None, weights: str | None = None,
                  compile: bool = True, kinds=KINDS, probe_rounds: bool = True, hold=nullcontext) -> Curve:
    """Time the lean pass over n rows on this rung (see the module docstring): every (kind, n) of `passes`
    (default `every_pass`: the curve; the ladder's other rungs ask for the decode at n = 1 and the prefill of s).

    Two lean passes over the same weights (engine.forward.lean: the weights are shared), each with its own static
    cache: one sequence as long as the longest prefill, and as many sequences as the largest batch, each
    `context` positions long (a real prompt's K/V written by one prefill and copied to each: a pass's time does
    not depend on what the cache holds). A batch whose cache would take more than CACHE_SHARE of free memory is
    left out, and says so. on_point(text) is called before each pass. compile=False runs the same pass eagerly
    (a test's: the same arithmetic, no compile time). `hold()` is entered around each timed round, never around the
    compiles and warm-ups (the app's ladder passes the model's turn: a student's step waits one round).
    """
    from engine import device as dev
    from engine.forward.lean import LeanLlama, compile_settings, compiled_pass, run_once
    from physics import machine

    started = now()
    device, spec = rlm.device, rlm.spec
    elem = float(rlm.elem_bytes)
    passes = list(passes) if passes else every_pass(spec, roof, device, context, kinds)
    from engine import torch_internals

    skips = torch_internals.graph_skips()
    left_out = []
    room = CACHE_SHARE * dev.available_bytes(device)
    fits = [(k, n) for k, n in passes if k == "prefill" or spec.kv_bytes_per_token(elem) * n * (context + 2) <= room]
    left_out += [f"batch n={n}: its K/V cache would not fit in memory" for k, n in passes if (k, n) not in fits]
    passes = fits
    longest = max([n for k, n in passes if k == "prefill"] + [context])
    batch = max([n for k, n in passes if k == "batch"] or [1])
    lean = {"prefill": LeanLlama(rlm.model, max_batch=1, max_len=longest + 1, one_row_kernel=False),
            "batch": LeanLlama(rlm.model, max_batch=batch, max_len=context + 2, one_row_kernel=False)}
    # a GPU's one-row step is the same pass as the batch's at n = 1 (the same kernels): one graph for both
    lean[DECODE] = LeanLlama(rlm.model, max_batch=1, max_len=context + 2) if device.type == "cpu" else lean["batch"]
    ids = torch.randint(0, min(spec.vocab, 32000), (1, longest), device=device,
                        generator=torch.Generator(device=device).manual_seed(0))
    with torch.no_grad():  # the context every batched sequence has: one prefill, copied to each
        for kind in ("batch", DECODE):
            lean[kind](ids[:, :context], torch.arange(context, device=device))
        for cache in (*lean["batch"].k_cache, *lean["batch"].v_cache):
            cache[1:, :, :context] = cache[:1, :, :context]
    if on_point and compile:  # before the first compile: how long the compiles took where this was recorded
        on_point(f"{label}: {compile_forecast(device.type, passes)}")
    fns = {}  # (kind, one row or many) -> the compiled pass
    ready: list[_Warmed] = []  # the passes warmed up, in the order they are timed each round
    compile_ms, spent = {}, 0.0
    for kind, n in passes:  # the warm-up round: each graph compiled, each pass run once more (excluded, labelled)
        if kind == "prefill":  # n tokens of one sequence: ids [batch=1, n] at positions 0 .. n-1
            x, where = ids[:, :n], torch.arange(n, device=device)
        else:  # one token for each of n sequences (the decode step: one): ids [batch=n, 1], at position `context`
            x, where = ids[0, :n].reshape(n, 1), torch.tensor([context], device=device)
        last = next((r for r in reversed(ready) if r.kind == kind), None)
        if last is not None and spent + last.warmup_ms * n / last.rows * (repeats + 1) / 1e3 > budget_s:
            left_out.append(f"{kind} n={n}: past the time budget ({budget_s:.0f} s)")
            continue
        if on_point:
            on_point(f"{label}: one lean pass over {n} row{'s' if n > 1 else ''} ({kind}): warming up")
        if n > 1:  # one graph for every n ≥ 2 of this kind
            torch_internals.mark_dynamic(x, 0 if kind == "batch" else 1)
            if kind == "prefill":
                torch_internals.mark_dynamic(where, 0)
        if n > 1:
            name = f"{kind}, every n ≥ 2"
        elif kind == DECODE and device.type == "cpu":
            name = "the decode step (one-row kernel)"
        else:  # one row is the same pass either way: one graph, on the batch's cache
            name = "n = 1 (one token)"
        if name not in fns:
            module = lean[DECODE if name.startswith("the decode") else "batch" if n == 1 else kind]
            fns[name] = compiled_pass(module) if compile else module
        fn = fns[name]
        # a new graph compiles on its first call; on a GPU every new n is also run once and recorded as a CUDA graph
        warmups = 2 if name not in compile_ms or device.type == "cuda" else 1
        warm_ms = sum(run_once(fn, x, where) for _ in range(warmups))
        compile_ms.setdefault(name, warm_ms)
        first = run_once(fn, x, where)
        spent += first * (repeats + 1) / 1e3
        ready.append(_Warmed(kind, n, fn, x, where, first))
    # the timed rounds: every pass once a round, so a slow minute of a shared machine falls on every n alike and
    # the ratios between passes are measured side by side
    samples = [[] for _ in ready]
    rates = RoundRates(device, rlm.dtype) if probe_rounds else None
    rounds = []
    for _ in range(repeats):
        with hold():
            if rates is not None:  # the bounds probed in this round, beside its passes: a slow minute lands on both
                rounds.append(rates())
            for got, r in zip(samples, ready):
                got.append(run_once(r.fn, r.ids, r.input_pos))
    del rates
    points = []
    for got, r in zip(samples, ready):
        kind, n = r.kind, r.rows
        timing = Timing(samples_ms=tuple(got), warmup_ms=r.warmup_ms)
        flops, moved = estimates(spec, kind, n, context, roof.elem_bytes)
        v = verdict(timing.forward_ms, flops, moved, roof)
        points.append(RowsPass(kind=kind, rows=n, samples_ms=timing.samples_ms, warmup_ms=timing.warmup_ms,
                               flops=flops, bytes_moved=moved, memory_ms=v.memory_ms, compute_ms=v.compute_ms,
                               kernel=kernel_of(kind, n, device.type == "cpu")))
        if on_point:
            on_point(f"{label}: {kind} n = {n}: {timing.describe(short=True)}, ×{v.ratio:.2f} its larger bound")
    path = compile_settings(device).words if compile else "gpt-fast's Llama, eager"
    if torch_internals.graph_skips() > skips:
        path += "; inductor declined CUDA graphs for some passes (TORCH_LOGS=perf_hints says why)"
    del lean, fns
    torch.compiler.reset()  # the rung's compiled graphs hold its weights
    machine.release_memory()
    return Curve(rung=label, parameters=int(spec.parameters), dtype=rlm.dtype_name,
                 context=context, path=path,
                 compile_ms=compile_ms,
                 points=tuple(points), left_out=tuple(left_out), wall_s=now() - started,
                 elem_bytes=elem, rounds=tuple(rounds), **({"weights": weights} if weights else {}))
