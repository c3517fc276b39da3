"""The frozen records of what the Serving page measures (topics/serving/measure.py builds them, draw.py draws them).

    Throughput          tokens/s of the same requests served several ways, alternated rounds, medians
    Memory              KV positions held by paged blocks against two other allocators; what sharing did
    BatchSweep          one decode pass shared by B sequences, B = 1, 2, 4, ...: BatchPass per B, re-timed where
                        its order contradicts physics, flagged where it still does
    BatchRoofline       those passes on this device's roofline, a GPU's prediction beside them
    Stall               what chunked prefill on or off did to the requests already in the pool
    ChunkingComparison  the same requests with chunked prefill on and off (a Stall and the steps of each)
    PolicyRun           the same requests under one preemption policy
    RoomyCheck          a run that preempted against the same requests in a pool that holds them all
    BatchingComparison  the same queue of requests with continuous and static batching, measured side by side
    OrderSpread         static/continuous engine steps over many random orders of the same requests
    OneCall             the serving run with one attention call per layer against the per-request loop it replaced
    ServingBench        the serving part of `python -m engine bench`

Each has named, typed fields; `to_dict()` is only for the JSON edge (`python -m engine bench --json`, the CLI), and
writes the keys the plain dicts these replaced wrote (new fields apart).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from topics.serving.orders import OrderSpread

WAYS = ("continuous", "one_at_a_time", "static_batch", "generate_batch")  # Throughput's ways, in the JSON's order


def _plain(value):
    """Tuples as lists, for JSON (a record keeps tuples: it is frozen all the way down)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- throughput


ORDER_SLACK = 1.1  # a bigger batch's median may come out this much below a smaller one's before it contradicts


@dataclass(frozen=True)
class Throughput:
    """The same requests served each way, every way timed in the same alternated rounds after a warm-up round."""

    requests: int
    new_tokens: int | tuple[int, ...]  # one length for every request, or one each
    rounds: int
    sizing: dict  # the ServingRun sizing every continuous run used
    ms: dict[str, tuple[float, ...]]  # way -> each timed round's wall time, the warm-up left out
    passes: dict[str, int]  # way -> forward passes one serving of the workload took (new)
    same_tokens: dict[str, bool]  # way -> every request's tokens are the ones it gets alone
    continuous_tokens_per_s: float
    one_at_a_time_tokens_per_s: float
    static_batch_tokens_per_s: float
    generate_batch_tokens_per_s: float | None = None  # it takes one length for all: None for mixed lengths
    traced_tokens_per_s: float | None = None  # the continuous run with its full per-step record on
    continuous_over_one_at_a_time: float = 0.0
    continuous_over_generate_batch: float | None = None
    continuous_over_static_batch: float = 0.0
    traced_over_untraced: float | None = None

    def per_round(self, way: str, against: str) -> tuple[float, ...]:
        """`way`'s tokens/s over `against`'s in each timed round (the same tokens: the inverse ratio of their times):
        two ways timed in the same round share its minute of the machine, so this spread says how busy it was."""
        return tuple(b / a for a, b in zip(self.ms.get(way, ()), self.ms.get(against, ())))

    @property
    def lengths(self) -> tuple[int, ...]:
        n = self.new_tokens
        return n if isinstance(n, tuple) else (n,) * self.requests

    def tokens_per_s(self, way: str) -> float | None:
        return getattr(self, f"{way}_tokens_per_s")

    def to_dict(self) -> dict:
        out = {"requests": self.requests, "new_tokens": _plain(self.new_tokens), "rounds": self.rounds,
               "sizing": dict(self.sizing), "ms": _plain(self.ms)}
        for way in WAYS:
            out[f"{way}_tokens_per_s"] = self.tokens_per_s(way)
        out |= {"traced_tokens_per_s": self.traced_tokens_per_s,
                "continuous_over_one_at_a_time": self.continuous_over_one_at_a_time,
                "continuous_over_generate_batch": self.continuous_over_generate_batch,
                "continuous_over_static_batch": self.continuous_over_static_batch,
                "traced_over_untraced": self.traced_over_untraced, "same_tokens": dict(self.same_tokens),
                "passes": dict(self.passes)}
        return out


# ---------------------------------------------------------------- memory


@dataclass(frozen=True)
class Held:
    """What one allocator held of KV memory over a run's steps."""

    peak_bytes: int  # the most it held at any one step
    wasted: float  # the share of what it held that held no token's keys and values, averaged over the steps
    source: str  # "measured (blocks the run took)" or "computed for the same requests"


@dataclass(frozen=True)
class Sharing:
    """What prefix sharing did over the same steps: positions not stored twice, prompt tokens not computed."""

    steps: int  # the steps that ran a pass
    served: int  # positions the requests read, each request's own count (a shared position once per request)
    stored: int  # positions the pool stored, each once
    held: int  # positions of the blocks the pool held
    saved: int  # served - stored: positions not stored twice, summed over the steps (memory)
    served_per_held: float
    skipped: int = 0  # prompt tokens not computed on admission: their blocks were found held or cached (compute)


@dataclass(frozen=True)
class Memory:
    position_bytes: int  # bytes of one position's keys and values, every layer
    max_length: int  # the model's context: what "reserve the max length" holds per request
    sharing: Sharing
    paged: Held
    reserve_max_length: Held
    static_padding: Held

    ALLOCATORS = ("paged", "reserve_max_length", "static_padding")

    def to_dict(self) -> dict:
        return {"position_bytes": self.position_bytes, "max_length": self.max_length, "sharing": asdict(self.sharing),
                **{k: asdict(getattr(self, k)) for k in self.ALLOCATORS}}


# ---------------------------------------------------------------- a decode pass against batch size


@dataclass(frozen=True)
class BatchPass:
    """One decode pass shared by `batch` sequences: the median of its timed passes, and the estimates it is placed by."""

    batch: int
    decode_ms: float  # median of the timed passes
    over_batch_1: float
    per_sequence_ms: float
    spread: tuple[float, float]  # the fastest and the slowest timed pass
    context: int
    flops: float  # estimate
    bytes: float  # estimate
    intensity: float  # estimate: FLOP per byte
    achieved: float  # FLOP/s: the estimate over the measured time
    timed: int = 1  # how many times it was timed: more than once where its order against B contradicted physics

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class BatchSweep:
    rows: tuple[BatchPass, ...]
    warmup_ms: float  # the passes timed before the first B and left out (a process's first paged passes are slower)
    note: str | None  # when a bigger batch still timed faster than a smaller one: what, and that the server was busy

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "warmup_ms": self.warmup_ms, "note": self.note}


@dataclass(frozen=True)
class BatchRoofline:
    """The measured passes on this device's roofline, and a GPU's PREDICTED passes for the same model and a published
    one (physics.roofline.batch_roofline's points, in the GPU's dtype: nothing ran there)."""

    measured: tuple[BatchPass, ...]
    here: object  # physics.roofline.DeviceRoof: this device, measured
    gpu: object  # a DeviceRoof from a datasheet
    context: int
    ridge_here: float
    saturates_here: int | None
    predicted: tuple  # physics.roofline.BatchPoint per batch size
    model: str
    saturates_gpu: int | None
    real: str
    predicted_real: tuple  # the same for the published model
    saturates_real: int | None
    knee_gpu: float = 0.0  # the batch where the GPU's step stops being its weights' read (physics.batched.batch_knee)
    knee_real: float = 0.0  # the same for the published model


# ---------------------------------------------------------------- chunked prefill, preemption policies


@dataclass(frozen=True)
class Stall:
    """The requests in the pool that sat out a pass (topics.serving.slots.sat_out: the timeline's dashed
    cells), and the long prompt's own wait."""

    sat_out: dict[str, tuple[int, ...]]  # request -> the steps it sat out
    filled_by: dict[int, tuple[tuple[str, int], ...]]  # each such step -> the (request, q_len) rows its pass held
    longest_gap_ms: float  # the longest measured wait between two tokens of another request while the long prompt
    #                        was prefilled (a gap that overlaps its arrival .. first token)
    long_id: str  # the request with the longest prompt
    long_ttft_steps: int | None
    long_ttft_ms: float | None
    prefill_passes: int  # passes the long prompt's prefill took
    long_prompt_tokens: int
    prompt_tokens: dict[str, int] = field(default_factory=dict)  # request -> its prompt's tokens

    @property
    def steps(self) -> tuple[int, ...]:
        """Every step in which some request in the pool sat out, in order."""
        return tuple(sorted({k for v in self.sat_out.values() for k in v}))

    @property
    def skipped_steps(self) -> int:
        return len(self.steps)

    def who(self, step: int) -> tuple[str, ...]:
        return tuple(rid for rid, v in self.sat_out.items() if step in v)


@dataclass(frozen=True)
class ChunkingWay:
    stall: Stall
    steps: tuple = ()  # the run's ServingStep records: its timeline is drawn from them
    ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChunkingComparison:
    on: ChunkingWay
    off: ChunkingWay
    same_tokens: bool


@dataclass(frozen=True)
class PolicyRun:
    policy: str
    steps: int  # engine steps to the end
    preemptions: int
    preempted: tuple[tuple[int, str], ...]  # (step, request id)
    recomputed: int  # positions computed a second time
    same_as_alone: dict[str, bool]


@dataclass(frozen=True)
class RoomyCheck:
    same_tokens: bool
    preempted: tuple[str, ...]
    recomputed: tuple[str, ...]  # of those, the ones computed again (the others found their blocks still cached)
    roomy_blocks: int
    blocks: int


# ---------------------------------------------------------------- a queue: continuous against static batching


@dataclass(frozen=True)
class BatchingWay:
    batching: str  # "continuous" or "static"
    tokens_per_s: float  # tokens over the median wall time of the timed rounds
    ms: tuple[float, ...]  # each timed round's wall time (the sum of its steps' wall times)
    engine_steps: int
    passes: int  # steps that ran a forward pass
    tokens: int
    idle_slot_steps: int  # slot-steps idle or computing padding while a request waited (slots.slot_use)
    steps: tuple = field(default=(), repr=False)  # the last round's ServingStep records, where recorded (the timeline)

    def to_dict(self) -> dict:
        return {"batching": self.batching, "tokens_per_s": self.tokens_per_s, "ms": list(self.ms),
                "engine_steps": self.engine_steps, "passes": self.passes, "tokens": self.tokens,
                "idle_slot_steps": self.idle_slot_steps}


@dataclass(frozen=True)
class BatchingComparison:
    requests: int
    slots: int
    lengths: tuple[int, ...]
    arrivals: tuple[int, ...]
    rounds: int
    continuous: BatchingWay
    static: BatchingWay
    same_tokens: bool  # every request's tokens the same either way
    ids: tuple[str, ...]

    @property
    def ratio(self) -> float:
        """Continuous batching's tokens/s over static batching's."""
        return self.continuous.tokens_per_s / self.static.tokens_per_s

    def to_dict(self) -> dict:
        return {"requests": self.requests, "slots": self.slots, "lengths": list(self.lengths),
                "arrivals": list(self.arrivals), "rounds": self.rounds, "continuous": self.continuous.to_dict(),
                "static": self.static.to_dict(), "same_tokens": self.same_tokens,
                "continuous_over_static": self.ratio}


@dataclass(frozen=True)
class Paired:
    """Two ways of serving the same requests timed in pairs: each round runs both back to back (which goes first
    alternates), after a warm-up round; the ratio of each round's two times, so a busy minute slows both alike."""

    way: str
    against: str
    rounds: int
    ms: tuple[tuple[float, float], ...]  # per round: (way's ms, against's ms), wall time
    passes: tuple[int, int]
    cpu_ms: tuple[tuple[float, float], ...] = ()  # the same, in the CPU time this process used (process_time): on a
    # shared machine, the work each way did without the minutes it waited for a core

    @property
    def ratios(self) -> tuple[float, ...]:
        """way's tokens/s over against's, per round (the same tokens: against's time over way's)."""
        return tuple(b / a for a, b in self.ms)

    @property
    def cpu_ratios(self) -> tuple[float, ...]:
        return tuple(b / a for a, b in self.cpu_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_ratios) if self.cpu_ms else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "ratios": list(self.ratios), "median": self.median,
                "cpu_ratios": list(self.cpu_ratios), "cpu_median": self.cpu_median}


@dataclass(frozen=True)
class OneCall:
    """The same serving run (every request at once, one length) with the paged pass attending in one call per layer,
    and with the per-request loop it replaced (benchmarks/bench.py keeps it, to time against): tokens/s over the
    median of alternated rounds, and the share of a step's wall time spent inside the layers' attention (a separate
    run of each, the attention timed with perf_counter around a device sync)."""

    requests: int
    new_tokens: int
    rounds: int
    loop_tokens_per_s: float
    one_call_tokens_per_s: float
    loop_attention_share: float
    one_call_attention_share: float
    same_tokens: bool

    @property
    def speedup(self) -> float:
        return self.one_call_tokens_per_s / self.loop_tokens_per_s

    def to_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


@dataclass(frozen=True)
class ServingBench:
    """The serving part of `python -m engine bench`."""

    throughput: Throughput  # 8 requests, one length
    mixed: Throughput  # the same prompts, mixed lengths
    queue: BatchingComparison  # the queue scenario, continuous against static batching
    memory: Memory
    batch: BatchSweep
    orders: OrderSpread | None = None  # the queue's static/continuous steps over random orders of its requests
    one_call: tuple[OneCall, ...] = ()  # benchmarks/bench.py: the one-call pass against the per-request loop
    equal: Paired | None = None  # every request at once, one length: continuous against static batch, in pairs

    def to_dict(self) -> dict:
        out = self.throughput.to_dict()
        out["mixed_lengths"] = {k: v for k, v in self.mixed.to_dict().items() if k != "sizing"}
        out["memory"] = self.memory.to_dict()
        out["step_time_vs_batch"] = [r.to_dict() for r in self.batch.rows]
        out["step_time_vs_batch_note"] = self.batch.note
        out["queue"] = self.queue.to_dict()
        if self.orders is not None:
            out["queue_orders"] = self.orders.to_dict()
        if self.one_call:
            out["one_call"] = [each.to_dict() for each in self.one_call]
        if self.equal is not None:
            out["continuous_over_static_paired"] = self.equal.to_dict()
        return out
