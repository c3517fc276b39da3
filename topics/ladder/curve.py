"""One pass, n rows: the roofline proven by experiment.

A pass over n rows reads every weight once and does about 2 · parameters · n FLOPs:

    a prefill of n tokens        ids [batch=1, n]     positions 0 .. n-1
    a decode step for n sequences  ids [batch=n, 1]   each at the same context s (a static batch's step)

While the weights' bytes set the time (memory-bound), the time stays flat as n grows; once the FLOPs do
(compute-bound), it grows in proportion to n. The knee sits where the pass's intensity meets the device's
ridge: about ridge × elem_bytes / 2 rows (~7 on this project's CPU in fp32, ~180 on an H200 in bf16). A
ratio to a roof depends on how good the kernel is; the shape of this curve does not (STYLE.md, 25).

Every pass runs on the lean path (engine.forward.lean: gpt-fast's Llama over the rung's own weights, compiled
whole). The curve's passes all use one matrix kernel, the multi-row one (on a CPU oneDNN on packed weights, a
single row padded), so that the row count is the only thing that moves; the rung's decode step (`DECODE`) is
timed apart on the kernel a one-row step runs best with (on a CPU a streamed dot product), and is the ladder's
lean decode. Timed as every step here is: perf_counter around a device sync, warm-up calls apart (they compile: one
graph for n = 1, one for every other n of each kind, the compile time kept in `compile_ms`), medians of
`repeats` runs with their min-max, timed in rounds (every pass once a round, so a slow minute falls on every n
alike and the ratios between passes are measured side by side). Each pass is placed on the ladder's roof (the same `DeviceRoof` every page
quotes): its FLOPs and bytes are estimates (engine.forward.estimates), its bounds those over the roof's peak and
the bandwidth its bytes get.

Two figures read off the curve, each against a prediction made before anything ran:
    measured knee    the smallest n whose time is at least KNEE (×1.5) the n = 1 time
    predicted knee   the n where the pass's intensity (estimate) reaches the ridge (the roof's peak over DRAM's rate)
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace

import torch

from engine.forward.estimates import batched_decode, step_bytes, step_flops
from engine.forward.run import Timing
from engine.measure.roofline import DeviceRoof, verdict

KNEE = 1.5  # the measured knee: the first n whose pass takes this many times the one-row pass
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
CURVE_KEYS = ("rung", "parameters", "dtype", "context", "path", "compile_ms", "points", "left_out", "wall_s")
POINT_KEYS = ("kind", "rows", "samples_ms", "warmup_ms", "flops", "bytes_moved", "memory_ms", "compute_ms")


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

    def of(self, kind: str) -> tuple[RowsPass, ...]:
        return tuple(p for p in self.points if p.kind == kind)

    def one_row_ms(self, kind: str) -> float | None:
        return next((p.median_ms for p in self.of(kind) if p.rows == 1), None)

    def ratio(self, kind: str, rows: int) -> float | None:
        """The n-row pass's time over the one-row pass's (None where either was not timed)."""
        one = self.one_row_ms(kind)
        p = next((p for p in self.of(kind) if p.rows == rows), None)
        return None if one is None or p is None else p.median_ms / one

    def measured_knee(self, kind: str) -> int | None:
        """The smallest n whose pass took at least KNEE times the one-row pass (None: no timed n did)."""
        one = self.one_row_ms(kind)
        return next((p.rows for p in self.of(kind) if one and p.median_ms >= KNEE * one), None)

    def predicted_knee(self, kind: str, roof: DeviceRoof) -> float | None:
        """The n where the pass's intensity (estimate) meets the ridge, log-interpolated between timed n."""
        pts = self.of(kind)
        for a, b in zip(pts, pts[1:]):
            if a.intensity < roof.ridge <= b.intensity:
                t = math.log(roof.ridge / a.intensity) / math.log(b.intensity / a.intensity)
                return math.exp(math.log(a.rows) + t * (math.log(b.rows) - math.log(a.rows)))
        return None

    def on(self, roof: DeviceRoof) -> "Curve":
        return replace(self, points=tuple(p.on(roof) for p in self.points))

    @property
    def compile_s(self) -> float:
        return sum(self.compile_ms.values()) / 1e3

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["points"] = [asdict(p) | {"median_ms": p.median_ms} for p in self.points]
        d["left_out"] = list(self.left_out)
        return d

    @classmethod
    def from_dict(cls, d: dict, roof: DeviceRoof) -> "Curve":
        keep = {f.name for f in fields(cls)}
        top = {k: v for k, v in d.items() if k in keep and k not in ("points", "left_out")}
        points = tuple(RowsPass(**{k: p[k] for k in POINT_KEYS} | {"samples_ms": tuple(p["samples_ms"])})
                       for p in d["points"])
        return cls(**top, points=points, left_out=tuple(d.get("left_out", ()))).on(roof)


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
                  compile: bool = True, kinds=KINDS) -> Curve:
    """Time the lean pass over n rows on this rung (see the module docstring): every (kind, n) of `passes`
    (default `every_pass`: the curve; the ladder's other rungs ask for the decode at n = 1 and the prefill of s).

    Two lean passes over the same weights (engine.forward.lean: the weights are shared), each with its own static
    cache: one sequence as long as the longest prefill, and as many sequences as the largest batch, each
    `context` positions long (a real prompt's K/V written by one prefill and copied to each: a pass's time does
    not depend on what the cache holds). A batch whose cache would take more than CACHE_SHARE of free memory is
    left out, and says so. on_point(text) is called before each pass. compile=False runs the same pass eagerly
    (a test's: the same arithmetic, no compile time).
    """
    from engine import device as dev
    from engine.forward.lean import LeanLlama, compile_settings, compiled_pass, run_once

    started = time.perf_counter()
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
    for _ in range(repeats):
        for got, r in zip(samples, ready):
            got.append(run_once(r.fn, r.ids, r.input_pos))
    points = []
    for got, r in zip(samples, ready):
        kind, n = r.kind, r.rows
        timing = Timing(samples_ms=tuple(got), warmup_ms=r.warmup_ms)
        flops, moved = estimates(spec, kind, n, context, roof.elem_bytes)
        v = verdict(timing.forward_ms, flops, moved, roof)
        points.append(RowsPass(kind=kind, rows=n, samples_ms=timing.samples_ms, warmup_ms=timing.warmup_ms,
                               flops=flops, bytes_moved=moved, memory_ms=v.memory_ms, compute_ms=v.compute_ms))
        if on_point:
            on_point(f"{label}: {kind} n = {n}: {timing.describe(short=True)}, ×{v.ratio:.2f} its larger bound")
    path = compile_settings(device)["words"] if compile else "gpt-fast's Llama, eager"
    if torch_internals.graph_skips() > skips:
        path += "; inductor declined CUDA graphs for some passes (TORCH_LOGS=perf_hints says why)"
    del lean, fns
    torch.compiler.reset()  # the rung's compiled graphs hold its weights
    dev.release_memory()
    return Curve(rung=label, parameters=int(spec.parameters), dtype=rlm.dtype_name,
                 context=context, path=path,
                 compile_ms=compile_ms,
                 points=tuple(points), left_out=tuple(left_out), wall_s=time.perf_counter() - started,
                 elem_bytes=elem, **({"weights": weights} if weights else {}))
