"""Where each traced step sits on the roofline of this device.

    attainable FLOP/s = min(peak FLOP/s, arithmetic intensity x bandwidth)
    arithmetic intensity = FLOPs / bytes moved        (both estimates, from engine.forward.estimates)
    achieved FLOP/s = FLOPs estimate / measured forward time

Prefill does many FLOPs per weight byte (far right: the compute side of the ridge); a cached
decode step reads every weight for one position (far left: the memory side). Which side a step
sits on is the roofline's prediction; `verdict` says what the measured time shows (a small model's
step is often neither: overhead-bound, many times above both bounds).

One ridge per device and dtype: the device's matmul peak over its DRAM bandwidth (`DeviceRoof.ridge`), in
FLOP/byte, or in tokens (`ridge_tokens`: a pass over n rows reads its weights once and does about 2n FLOPs per
weight, so it meets the ridge near ridge × bytes per weight / 2 rows). Every page, lesson and the race quote
that one figure.

Memory is a hierarchy, so a step's memory bound uses the bandwidth its own bytes get: a 16 MB model that
fits the processor's last-level cache is read from it, several times faster than a 450 MB model streaming
from DRAM every step. That faster rate is the cache's own roof (`cache_bandwidth`), named as such wherever a
step fits the cache, and never the ridge. The probe moves buffers of several sizes (`COPY_MIB`) three ways, a
plain read (a sum: each byte read once, what a decode step does to its weights), a copy (read one buffer, write
the other) and a matrix-vector product, and keeps the fastest at each size; `DeviceRoof.bandwidth_for(bytes)`
is that rate at that many bytes.

What a measured pass is said to be is two statements, kept apart (`Verdict`):
    which side of the ridge   its intensity against the ridge: a prediction from FLOPs and bytes, which a slow
                              minute never moves
    how near its roof         the share of the bandwidth it used (memory side: MBU, as inference engineers call
                              it) or of the matmul peak (compute side: MFU), measured
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from functools import partial

import torch

from engine import device as dev
from engine.timing import now, span

# bytes each bandwidth probe moves, MiB: cache-sized to well past any last-level cache (a CPU's reaches ~500 MiB)
COPY_MIB = {"cpu": (16, 64, 256, 1024), "gpu": (64, 1024)}
STREAM_COLUMNS = 4096  # the matrix-vector probe's row length (a d_model's order)
# the square matmul probed: on a GPU, 8192 (1.1 TFLOP, 1.4 ms on an H200: best of 3, 780-792 TFLOP/s a round).
# 4096's 0.2 ms carried a launch's cost: best of 3 it measured 522-554, below the 587 a 4096-row prefill ran at
MATMUL_N = {"cpu": 1024, "gpu": 8192}
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
    probes: int = field(default=1, compare=False)  # the probes whose best rates it keeps (`best` adds them up)
    threads: tuple = field(default=(), compare=False)  # CPU: torch's threads in each probe kept (() on a GPU)

    @property
    def dtype(self) -> str:
        return DTYPE_NAMES.get(self.elem_bytes, f"{self.elem_bytes:g}-byte")

    @property
    def dram_bandwidth(self) -> float:
        """The rate with the largest buffers probed: data that no cache holds, streaming from memory (a datasheet's
        one figure)."""
        return self.bandwidths[-1][1] if self.bandwidths else self.bandwidth

    @property
    def ridge(self) -> float:
        """THE ridge: arithmetic intensity (FLOP/byte) where the DRAM roof meets the compute roof, in this roof's
        dtype. The one figure every page quotes for this device."""
        return self.peak_flops / self.dram_bandwidth

    @property
    def ridge_tokens(self) -> float:
        """The ridge in tokens (rows of one pass): a pass over n rows reads its weights once and does 2 FLOPs per
        weight per row over elem_bytes per weight (intensity ~ 2n / elem_bytes), so it reaches the ridge at
        n ~ ridge x elem_bytes / 2 (an H200 in bf16: ~180 tokens; this project's CPU in fp32: ~7)."""
        return self.ridge * self.elem_bytes / 2

    @property
    def cache_bandwidth(self) -> float:
        """The best rate probed: data a cache holds (on a CPU, its last-level cache). The cache's own roof."""
        return self.bandwidth

    @property
    def cache_roof(self) -> bool:
        """The probe found a cache much faster than DRAM (CACHE_GAP): pictures draw the cache's roof too."""
        return self.dram_bandwidth < CACHE_GAP * self.bandwidth

    def in_cache(self, bytes_moved: float) -> bool:
        """A pass that moves this many bytes reads them faster than DRAM allows: the cache's roof bounds it."""
        return self.cache_roof and self.bandwidth_for(bytes_moved) > self.dram_bandwidth / CACHE_GAP

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
                          bandwidths=rates, elem_bytes=self.elem_bytes, probes=self.probes + other.probes,
                          threads=tuple(sorted(set(self.threads) | set(other.threads))))


_roofs: dict[tuple[str, str], DeviceRoof] = {}  # (device, dtype) -> this process's roof: one ridge each
_roofs_lock = threading.Lock()


def remember(roof: DeviceRoof, device: torch.device, dtype: torch.dtype) -> DeviceRoof:
    """Keep `roof` as this process's roof for the device and dtype, merged with the one kept (DeviceRoof.best: a
    later probe can only tighten it), and return the roof kept. Every page, lesson, ladder and race reads this one,
    so they all quote one ridge per device and dtype."""
    key = (device.type, str(dtype))
    with _roofs_lock:
        kept = _roofs.get(key)
        _roofs[key] = roof if kept is None else kept.best(roof)
        return _roofs[key]


def device_roof(device: torch.device, dtype: torch.dtype, budget_s: float = 0.6, again: bool = False) -> DeviceRoof:
    """This process's roof for a device and dtype: probed the first time it is asked for (or `again`), then kept."""
    with _roofs_lock:
        kept = _roofs.get((device.type, str(dtype)))
    if kept is not None and not again:
        return kept
    return remember(probe(device, dtype, budget_s=budget_s), device, dtype)


def probe_device(device_name: str, dtype_name: str | None = None, budget_s: float = 0.6,
                 again: bool = False) -> DeviceRoof:
    """`device_roof` by names, as a page holds them: 'auto', 'cpu' or 'cuda', and 'float32' / 'bfloat16' (None: the
    device's own fast dtype). A step is judged against the roof of the dtype it ran in."""
    from engine.device import pick_device, pick_dtype

    device = pick_device(device_name)
    dtype = getattr(torch, dtype_name) if dtype_name else pick_dtype(device)
    return device_roof(device, dtype, budget_s=budget_s, again=again)


def probe(device: torch.device, dtype: torch.dtype = torch.float32, budget_s: float = 1.5,
          on_progress=None) -> DeviceRoof:
    """Measure matmul FLOP/s and memory bandwidth on this device, each within about budget_s seconds.

    Bandwidth is probed at every size of COPY_MIB that free memory allows (twice over), the time shared
    between the sizes and three ways of moving the bytes, the fastest kept at each size:
        read            sums a buffer: every byte read once, as a decode step reads its weights
        copy            reads one buffer and writes the other (both count as bytes moved)
        matrix-vector   reads a [rows, 4096] matrix once
    """
    n = MATMUL_N["cpu" if device.type == "cpu" else "gpu"]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    flops = best_rate(partial(torch.matmul, a, b), 2 * n**3, device, budget_s=budget_s)
    del a, b
    if on_progress:
        on_progress(0.5, "matmul done, measuring memory bandwidth…")
    free = dev.available_bytes(device)
    sizes = [m * 2**20 for m in COPY_MIB["cpu" if device.type == "cpu" else "gpu"] if 2 * m * 2**20 <= free]
    sizes = sizes or [COPY_MIB["cpu"][0] * 2**20]  # the smallest, even where memory is short
    rates, each = [], budget_s / len(sizes) / 3
    for total in sizes:
        whole = torch.empty(total // 4, device=device, dtype=torch.float32).fill_(1.0)  # 4 bytes an element
        read = best_rate(whole.sum, total, device, budget_s=each)
        del whole
        src = torch.empty(total // 8, device=device, dtype=torch.float32).fill_(1.0)  # half the bytes each
        dst = torch.empty_like(src)
        copy = best_rate(partial(dst.copy_, src), total, device, budget_s=each)
        del src, dst
        rows = total // 4 // STREAM_COLUMNS  # float32: 4 bytes an element
        matrix = torch.empty(rows, STREAM_COLUMNS, device=device, dtype=torch.float32).fill_(1.0)
        vector = torch.ones(STREAM_COLUMNS, device=device, dtype=torch.float32)
        stream = best_rate(partial(torch.mv, matrix, vector), matrix.numel() * 4, device, budget_s=each)
        del matrix, vector
        rates.append((total, max(read, copy, stream)))
    if on_progress:
        on_progress(1.0, "done")
    return DeviceRoof(name=f"{device.type} (measured here, {str(dtype).removeprefix('torch.')} matmul)",
                      peak_flops=flops, bandwidth=max(r for _, r in rates), measured=True, bandwidths=tuple(rates),
                      elem_bytes=float(torch.finfo(dtype).bits // 8),
                      threads=(torch.get_num_threads(),) if device.type == "cpu" else ())


class RoundRates:
    """The two bounds' rates probed again, quickly, between rounds of timed passes (topics/ladder/curve.py): a read
    of a buffer no cache holds (the largest of COPY_MIB that memory allows) and a square matmul in the passes'
    dtype, each the best of `runs`. Calling it returns (read bytes/s, matmul FLOP/s) as they stand this minute.
    The read is the faster of two ways, as `probe`'s is: a plain sum (one stream) and a matrix-vector product over
    the same bytes (its kernel reads several places at once, as the lean pass's does: on the Intel Xeon VM one
    core read 11 GB/s one way and 16 the other, docs/measurements.md)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, runs: int = 3):
        cpu = device.type == "cpu"
        free = dev.available_bytes(device)
        mib = [m for m in COPY_MIB["cpu" if cpu else "gpu"] if 4 * m * 2**20 <= free] or [COPY_MIB["cpu"][0]]
        self.device, self.runs = device, runs
        self.buffer = torch.ones(mib[-1] * 2**20 // 4, device=device, dtype=torch.float32)  # read two ways
        n = MATMUL_N["cpu" if cpu else "gpu"]
        self.n = n
        self.a = torch.randn(n, n, device=device, dtype=dtype)
        self.b = torch.randn(n, n, device=device, dtype=dtype)

    def __call__(self) -> tuple[float, float]:
        read = plain_read([self.buffer], self.device, self.runs)
        peak = best_rate(partial(torch.matmul, self.a, self.b), 2 * self.n**3, self.device, runs=self.runs)
        return read, peak


def plain_read(tensors: list[torch.Tensor], device: torch.device, runs: int = 3) -> float:
    """Bytes a second at which these fp32 tensors (contiguous, where they lie) are read, the faster of two ways,
    each the best of `runs`: a sum of each whole (one stream), and a matrix-vector product over each seen as rows of
    STREAM_COLUMNS (several places at once; a tail shorter than a row is left out, its bytes not counted)."""
    whole = sum(t.numel() * t.element_size() for t in tensors)
    rows = [r for r in map(as_rows, tensors) if r.numel()]
    read = best_rate(lambda: [t.sum() for t in tensors], whole, device, runs=runs)
    if not rows:
        return read
    vector = torch.ones(STREAM_COLUMNS, device=device, dtype=torch.float32)
    streamed = sum(r.numel() * r.element_size() for r in rows)
    return max(read, best_rate(lambda: [torch.mv(r, vector) for r in rows], streamed, device, runs=runs))


def as_words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as fp32 words (a view, no copy; an fp32 tensor itself), as plain_read reads a
    buffer: a sum in bf16 widens every number before adding it, a cost of its arithmetic, not of the read."""
    return t if t.element_size() == 4 else t.view(torch.float32)


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's whole rows of STREAM_COLUMNS elements, as a [rows, STREAM_COLUMNS] view (no copy): what
    plain_read's matrix-vector product reads; a tail shorter than a row is left out."""
    return t.view(-1)[: t.numel() // STREAM_COLUMNS * STREAM_COLUMNS].view(-1, STREAM_COLUMNS)


def best_rate(fn, work: float, device: torch.device, runs: int | None = None, budget_s: float = 0.0) -> float:
    """Best observed work/second over `runs` timed runs, or over as many as `budget_s` seconds hold (after one
    warm-up, not counted): a peak is the fastest the device was seen to go, not a typical run."""
    fn()
    best, done, t_end = 0.0, 0, now(device) + budget_s
    while (done < runs) if runs is not None else (now() < t_end):
        with span(device) as took:
            fn()
        best, done = max(best, work / (took.ms / 1e3)), done + 1
    return best


def from_datasheet(card, dtype_bytes: int = 2) -> DeviceRoof:
    """A roofline from a card's datasheet figures (kvcalc.Accelerator: fp16/bf16 dense peak, else fp32), in the dtype
    of its peak: a step predicted on it counts its bytes in that dtype (`predict`)."""
    peak = card.peak_tflops_bf16 if dtype_bytes <= 2 else None
    elem = float(dtype_bytes)
    if peak is None:
        peak, elem = card.peak_tflops_fp32, 4.0
    return DeviceRoof(name=f"{card.name} (datasheet)", peak_flops=float(peak) * 1e12,
                      bandwidth=float(card.bandwidth_gb_s) * 1e9, measured=False, elem_bytes=elem)


def side(intensity: float, roof: DeviceRoof) -> str:
    """Which side of the device's ridge a step's intensity puts it: what the roofline *predicts*, not what was
    measured ('the compute side' right of the ridge, 'the memory side' left of it)."""
    return "the compute side" if intensity >= roof.ridge else "the memory side"


def ridge_for(roof: DeviceRoof, bytes_moved: float) -> float:
    """Where the roof these bytes get (`bandwidth_for`: the cache's where they fit it) meets the matmul peak. The
    memory bound `verdict` quotes is that roof's, so a step between it and THE ridge has its larger bound on the
    other side from THE ridge's prediction."""
    return roof.peak_flops / roof.bandwidth_for(bytes_moved)


def cache_side(intensity: float, bytes_moved: float, roof: DeviceRoof, mark=str) -> str:
    """'' unless the roof these bytes get puts them on the other side from THE ridge; then that, as a clause ('; but
    its 15.5 MiB fit the cache, ...'), so the side said last agrees with the larger of the bounds quoted beside it.
    `mark`: how the side is set (a page's bold)."""
    ridge = ridge_for(roof, bytes_moved)
    if (intensity >= ridge) == (intensity >= roof.ridge):
        return ""
    rate = roof.bandwidth_for(bytes_moved)
    where = ("fit the cache, whose faster roof" if roof.in_cache(bytes_moved) else
             f"are read at {rate / 1e9:,.1f} GB/s (the largest buffers probed: {roof.dram_bandwidth / 1e9:,.1f}), a "
             "roof that")
    theirs = "the compute side" if intensity >= ridge else "the memory side"
    return (f"; but the {bytes_moved / 2**20:,.1f} MiB it moves {where} meets the matmul peak at {ridge:.1f} "
            f"FLOP/byte: against that ridge it is on {mark(theirs)}")


@dataclass(frozen=True)
class Prediction:
    """What a roof PREDICTS for a pass nothing ran there for, in the roof's own dtype."""

    dtype: str
    flops: float  # estimate
    bytes: float  # estimate, counted in `dtype`
    intensity: float  # FLOP/byte
    ridge: float  # the roof's ridge, FLOP/byte
    side: str  # 'the memory side' / 'the compute side': intensity against the ridge
    compute_ms: float  # FLOPs / peak
    memory_ms: float  # bytes / bandwidth
    label: str

    @property
    def predicted_ms(self) -> float:
        """The larger bound: the least time the pass can take there."""
        return max(self.compute_ms, self.memory_ms)

    def words(self) -> str:
        """Inside a sentence: 'predicted on the memory side (126 vs 295 FLOP/byte in bf16)'."""
        return f"predicted on {self.side} ({self.intensity:,.0f} vs {self.ridge:,.0f} FLOP/byte in {self.dtype})"


def predict(spec, q_len: int, past: int, roof: DeviceRoof) -> Prediction:
    """What `roof` PREDICTS for a pass of this model (nothing ran there), counted in the roof's own dtype
    (roof.elem_bytes: bf16 on a datacenter datasheet), never in the dtype this CPU ran:

        intensity     = FLOPs / bytes, both estimates in that dtype (a 400-token prefill of the bundled model:
                        ~161 FLOP/byte in fp32, ~321 in bf16, so 'the compute side' of an H100's 295)
        compute bound = FLOPs / peak, memory bound = bytes / bandwidth; the predicted time is the larger
    """
    from engine.forward.estimates import step_bytes, step_flops

    return _predicted(step_flops(spec, q_len, past), step_bytes(spec, q_len, past, roof.elem_bytes), roof)


def predict_counts(flops: float, bytes_moved: float, elem_bytes: float, roof: DeviceRoof) -> Prediction:
    """`predict` for a pass known by its counts (a recorded ladder's FLOPs and bytes, counted in elem_bytes per
    element): the bytes are counted again in the roof's own dtype (every byte a pass moves is a weight or a K/V
    element, so they scale with the element size), the FLOPs are the same."""
    return _predicted(flops, bytes_moved * roof.elem_bytes / elem_bytes, roof)


def _predicted(flops: float, moved: float, roof: DeviceRoof) -> Prediction:
    ai = flops / moved
    where = side(ai, roof)
    return Prediction(dtype=roof.dtype, flops=flops, bytes=moved, intensity=ai, ridge=roof.ridge, side=where,
                      compute_ms=flops / roof.peak_flops * 1e3, memory_ms=moved / roof.bandwidth_for(moved) * 1e3,
                      label=f"predicted: {where} of the {short_name(roof)}'s ridge ({ai:,.0f} vs {roof.ridge:,.0f} "
                            f"FLOP/byte in {roof.dtype})")


def short_name(roof: DeviceRoof) -> str:
    """'NVIDIA H100 SXM (datasheet)' -> 'NVIDIA H100 SXM': the card, without where its figures come from."""
    return roof.name.split(" (")[0]


def predict_step(t, spec, roof: DeviceRoof) -> Prediction:
    """`predict` for a traced step (its q_len and past), e.g. the bundled prefill on an H100's datasheet."""
    return predict(spec, t.q_len, t.past, roof)


BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class BatchPoint:
    """Batched decode at batch size B, PREDICTED on a roof in its own dtype (nothing ran there)."""

    batch: int
    intensity: float  # FLOP/byte (estimate)
    attainable: float  # FLOP/s the roof allows at that intensity
    predicted_ms: float  # the larger of the two bounds
    side: str  # 'the memory side' / 'the compute side'

    @property
    def ms_per_token(self) -> float:
        return self.predicted_ms / self.batch


def batch_roofline(spec, context: int, roof: DeviceRoof, batches=BATCHES) -> list[BatchPoint]:
    """Batched decode on `roof`, PREDICTED in its dtype (physics.batched.batched_decode): per batch size B,
    the pass's intensity (about B FLOP/byte in bf16), the FLOP/s the roof allows there, and the predicted time, the
    larger of the two bounds. `saturating_batch` names the B where the points reach the ridge."""
    from physics.batched import batched_decode

    out = []
    for b in batches:
        d = batched_decode(spec, b, context, roof.elem_bytes)
        rate = roof.bandwidth_for(d.bytes)
        compute_ms, memory_ms = d.flops / roof.peak_flops * 1e3, d.bytes / rate * 1e3
        out.append(BatchPoint(batch=b, intensity=d.intensity, attainable=min(roof.peak_flops, d.intensity * rate),
                              predicted_ms=max(compute_ms, memory_ms), side=side(d.intensity, roof)))
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
VERDICT_RULE = (f"memory- or compute-bound: that bound is half the time or more (within ×{EXPLAINS:g}); on that side, "
                f"not bound by it: a third to a half (×{EXPLAINS:g} to ×{OVERHEAD:g}); overhead-bound: below a third")


def percent(share: float) -> str:
    """0.62 -> '62%', 0.006 -> '0.6%', 0.0004 -> '<0.1%': a share a class can read, never a false 0%."""
    if share >= 0.01:
        return f"{share:.0%}"
    return f"{share:.1%}" if share >= 0.001 else "<0.1%"


@dataclass(frozen=True)
class Verdict:
    """What a measured time says about a pass: two statements kept apart, and the label that joins them.

        side    which side of the ridge its intensity (estimate) puts it: a prediction, never moved by the time
        share   how near its roof it ran: the larger bound over the measured time (MBU on the memory side, MFU on
                the compute side), measured
    """

    measured_ms: float
    intensity: float  # FLOP/byte (estimate)
    ridge: float  # the device's ridge (FLOP/byte)
    memory_ms: float  # bytes moved / the bandwidth those bytes get here
    compute_ms: float  # FLOPs / peak
    in_cache: bool  # the bytes fit a cache faster than DRAM: the memory bound is the cache's roof
    matmul_share: float | None = None  # the pass's matrix products' share of its time, where timed alone

    @property
    def side(self) -> str:
        """'memory' or 'compute': the intensity against the ridge (the prediction)."""
        return "compute" if self.intensity >= self.ridge else "memory"

    @property
    def bound(self) -> str:
        """'memory' or 'compute': the larger of the two bounds (at the bandwidth the pass's own bytes get)."""
        return "memory" if self.memory_ms >= self.compute_ms else "compute"

    @property
    def ratio(self) -> float:
        """Measured over the larger bound."""
        larger = max(self.memory_ms, self.compute_ms)
        return self.measured_ms / larger if larger > 0 else float("inf")

    @property
    def share(self) -> float:
        """The larger bound over the measured time: the share of its roof the pass used."""
        return 1 / self.ratio if self.ratio > 0 else 0.0

    @property
    def roof_words(self) -> str:
        """What the share is a share of: the roof probed on the machine that ran the pass, never a datasheet's ('the
        measured bandwidth (MBU)', 'the on-chip cache's measured bandwidth' (the processor's, never the KV cache),
        'the measured matmul peak (MFU)'). No 'here': a recording shown on another server is still read against its
        own machine's roof."""
        if self.bound == "compute":
            return "the measured matmul peak (MFU)"
        return ("the on-chip cache's measured bandwidth (the data fits in it)" if self.in_cache else
                "the measured bandwidth (MBU)")

    @property
    def share_cell(self) -> str:
        """The share of its roof in a table cell a projector shows whole: '62% of bandwidth (MBU)', '53% of matmul
        peak (MFU)', '4% of cache bandwidth' (the data fits the processor's cache); `label` says it in full."""
        roof = ("matmul peak (MFU)" if self.bound == "compute" else
                "cache bandwidth" if self.in_cache else "bandwidth (MBU)")
        return f"{percent(self.share)} of {roof}"

    @property
    def kind(self) -> str:
        """memory-bound · memory side · compute-bound · compute side · overhead-bound (thresholds: EXPLAINS, OVERHEAD)."""
        if self.ratio > OVERHEAD:
            return "overhead-bound"
        if self.ratio > EXPLAINS:
            return f"{self.bound} side"
        return f"{self.bound}-bound"

    @property
    def label(self) -> str:
        """The verdict in words: its kind, and the share of its roof it used ('memory-bound: 62% of the
        measured bandwidth (MBU)'); overhead-bound with both shares, and the matmuls' share of the time where known."""
        share = percent(self.share)
        if self.kind == "overhead-bound":
            other = self.compute_ms if self.bound == "memory" else self.memory_ms
            theirs = f"; its matrix products {self.matmul_share:.0%} of the time" if self.matmul_share is not None else ""
            roof = "matmul peak" if self.bound == "memory" else "on-chip cache's bandwidth" if self.in_cache else "bandwidth"
            return f"overhead-bound: {share} of {self.roof_words}, {percent(other / self.measured_ms)} of the {roof}{theirs}"
        if self.kind.endswith("side"):
            return f"on the {self.bound} side, not {self.bound}-bound: {share} of {self.roof_words}"
        return f"{self.bound}-bound: {share} of {self.roof_words}"


def verdict(forward_ms: float, flops: float, bytes_moved: float, roof: DeviceRoof,
            matmul_share: float | None = None) -> Verdict:
    """What a measured time says about a pass (see `Verdict`).

        memory bound  = bytes moved / bandwidth      (the least time reading and writing them can take;
                                                      the bandwidth this device gets at that many bytes)
        compute bound = FLOPs / peak FLOP/s          (the least time the arithmetic can take)

    A pass is labelled by its larger bound only when that bound explains most of its time: within EXPLAINS (×2),
    half the time or more ('memory-bound: 62% of the measured bandwidth (MBU)'). From ×2 to OVERHEAD (×3) it is on that
    side, not bound by it ('on the memory side, not memory-bound: 41% of the bandwidth'). Further above both, it
    waits on neither: the fixed cost of launching many small operations and the Python around them
    ('overhead-bound', both shares small, the matmuls' share of the time beside them where it was timed).
    """
    return Verdict(measured_ms=forward_ms, intensity=flops / bytes_moved if bytes_moved else 0.0, ridge=roof.ridge,
                   memory_ms=bytes_moved / roof.bandwidth_for(bytes_moved) * 1e3,
                   compute_ms=flops / roof.peak_flops * 1e3, in_cache=roof.in_cache(bytes_moved),
                   matmul_share=matmul_share)


def step_verdict(t, roof: DeviceRoof) -> Verdict:
    """`verdict` for one traced step: its measured median forward time against its estimated FLOPs and bytes."""
    return verdict(t.forward_ms, t.flops_estimate, t.bytes_estimate, roof)


def h100() -> DeviceRoof:
    """An H100's roofline from the bundled datasheet table, in bf16, to PREDICT a step on (`predict`); its steps'
    intensity is counted in bf16, not in the fp32 a CPU trace's intensity_estimate uses."""
    from physics.kvcalc import accelerator

    return from_datasheet(accelerator("NVIDIA H100 SXM"))


@dataclass(frozen=True)
class RoofPoint:
    """One pass placed on a roofline picture: x its intensity, y the FLOP/s it achieved (or is predicted to)."""

    step: int
    kind: str  # 'prefill', 'decode (cache)', 'decode (no cache)'
    intensity: float  # FLOP/byte (estimate)
    achieved: float  # FLOP/s: FLOPs (estimate) over the measured (or predicted) time
    ms: float  # the measured median, or the predicted time
    bytes_estimate: float
    predicted: bool = False

    @property
    def label(self) -> str:
        return f"step {self.step}, predicted: {self.ms:.3g} ms" if self.predicted else f"step {self.step}"


def _kind(t) -> str:
    return t.phase if t.phase == "prefill" else ("decode (cache)" if t.use_cache else "decode (no cache)")


def place(traces) -> list[RoofPoint]:
    """Each step's arithmetic intensity and achieved FLOP/s (from estimates and measured time)."""
    return [RoofPoint(step=t.step, kind=_kind(t), intensity=t.intensity_estimate,
                      achieved=t.flops_estimate / (t.forward_ms / 1e3), ms=t.forward_ms, bytes_estimate=t.bytes_estimate)
            for t in traces if t.forward_ms > 0]


def predicted_points(traces, spec, roof: DeviceRoof) -> list[RoofPoint]:
    """`place` on a roof nothing ran on: each step's pass PREDICTED there (`predict_step`, in the roof's dtype), placed
    at its intensity and on the roof itself (FLOPs over the predicted time), labelled 'predicted'."""
    out = []
    for t in traces:
        p = predict_step(t, spec, roof)
        out.append(RoofPoint(step=t.step, kind=_kind(t), intensity=p.intensity, achieved=p.flops / (p.predicted_ms / 1e3),
                             ms=p.predicted_ms, bytes_estimate=p.bytes, predicted=True))
    return out
