"""What the benchmarks measure: small frozen records of plain numbers and strings (no torch here).

`python -m engine bench --json` and `gpu-check --json` write them; each becomes a dict only there (`to_dict`), with
the keys those files always had.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


def _json(part):
    """A part made elsewhere, as JSON: a record's to_dict(), or a dict as it came (topics not yet on records)."""
    if part is None or isinstance(part, dict):
        return part
    if isinstance(part, (list, tuple)):
        return [_json(p) for p in part]
    return part.to_dict()


# ---------------------------------------------------------------- python -m engine bench


@dataclass(frozen=True)
class Overhead:
    """Median decode-step ms of model.generate against the engine, recording off and on, interleaved rounds."""

    generate_ms: float
    engine_ms: float
    engine_traced_ms: float
    ratio_untraced: float  # engine / generate
    ratio_traced: float  # engine with full traces / generate
    ratio_untraced_rounds: tuple[float, ...]  # each round's ratio of medians: how much to trust the overall one
    ratio_traced_rounds: tuple[float, ...]
    steps_per_mode: int  # decode steps timed per mode, over every round

    def to_dict(self) -> dict:
        return asdict(self) | {"ratio_untraced_rounds": list(self.ratio_untraced_rounds),
                               "ratio_traced_rounds": list(self.ratio_traced_rounds)}


@dataclass(frozen=True)
class CacheRow:
    """Total decode time with and without the cache at one total length, the same tokens asked of both."""

    tokens: int  # prompt + new tokens
    cache_ms: float
    nocache_ms: float
    ratio: float  # nocache / cache, measured
    flops_ratio: float  # the same, in FLOPs (estimate)
    identical: bool  # both runs chose the same tokens

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MemoryBound:
    """A cached decode step's measured time against bytes moved / this device's measured bandwidth."""

    bandwidth_gb_s: float
    peak_tflops: float
    context: int  # positions the step reads
    bound_ms: float
    measured_ms: float
    measured_over_bound: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LadderRow:
    """One rung of the bench's size ladder: its size, its three passes and their bounds and labels."""

    size: str
    parameters: float
    weight_bytes: int
    trained: bool
    decode_ms: float
    prefill_ms: float
    nocache_ms: float
    decode_memory_bound_ms: float
    decode_compute_bound_ms: float
    prefill_memory_bound_ms: float
    prefill_compute_bound_ms: float
    decode_label: str
    prefill_label: str
    nocache_label: str
    lean_decode_ms: float | None = None  # the lean pass's decode step (engine/forward/lean.py), where timed
    lean_decode_over_bound: float | None = None  # its time over its DRAM memory bound
    rows8_over_one: dict[str, float] | None = None  # kind -> 8 rows in one pass over one row
    knee: dict[str, int | None] | None = None  # kind -> the first n at x1.5 the one-row time
    knee_predicted: float | None = None  # the n where the pass's intensity meets the ridge

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ViewClicks:
    """Next-token clicks with one of the step page's views shown."""

    median_ms: float  # the clicks after the first
    warmup_click_ms: float  # the first click, excluded

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AppClick:
    """What a "Next token" click costs on the step page (AppTest), per view, and a new seed in lesson 6."""

    context_tokens: int
    click_ms_median: float  # with the default view shown
    warmup_click_ms: float
    by_view: dict[str, ViewClicks]
    slowest_view: str
    lesson6_seed_ms: float

    def to_dict(self) -> dict:
        return asdict(self) | {"by_view": {view: c.to_dict() for view, c in self.by_view.items()}}

    @classmethod
    def from_dict(cls, doc: dict) -> "AppClick":
        return cls(int(doc["context_tokens"]), float(doc["click_ms_median"]), float(doc["warmup_click_ms"]),
                   {view: ViewClicks(**c) for view, c in doc["by_view"].items()}, doc["slowest_view"],
                   float(doc["lesson6_seed_ms"]))


@dataclass(frozen=True)
class Bench:
    """Everything one `python -m engine bench` measured, on one model and device."""

    overhead: Overhead
    memory_bound: MemoryBound
    ladder: tuple[LadderRow, ...] | None  # None: no ladder asked for
    cache_vs_nocache: tuple[CacheRow, ...]
    serving: object  # topics.serving.measure.run_all's report
    budget: tuple  # topics.budget.records.Summary per policy
    app_click: AppClick | None  # None: it failed
    app_measured: bool  # False: not asked for (--no-app), and no key written
    model: str
    device: str
    dtype: str
    torch_threads: int

    def to_dict(self) -> dict:
        """The JSON edge: the keys `--json` always wrote, in the same order (the overhead's at the top level)."""
        doc = {**self.overhead.to_dict(), "memory_bound": self.memory_bound.to_dict()}
        if self.ladder is not None:
            doc["ladder"] = _json(self.ladder)
        doc |= {"cache_vs_nocache": _json(self.cache_vs_nocache), "serving": _json(self.serving),
                "budget": _json(self.budget)}
        if self.app_measured:
            doc["app_click"] = _json(self.app_click)
        return doc | {"model": self.model, "device": self.device, "dtype": self.dtype,
                      "torch_threads": self.torch_threads}


# ---------------------------------------------------------------- python -m engine gpu-check


@dataclass(frozen=True)
class Target:
    """One GPU target beside this run's figure; holds None where it was not measured."""

    target: str
    measured: str
    holds: bool | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TestRun:
    """The gpu tier, run in its own process."""

    __test__ = False  # pytest: a record, not a test class

    command: str
    passed: bool
    summary: str  # pytest's last line
    wall_s: float
    output_tail: str | None = None  # the last 40 lines, kept when it failed

    def to_dict(self) -> dict:
        doc = asdict(self)
        if self.output_tail is None:
            del doc["output_tail"]
        return doc


@dataclass(frozen=True)
class RaceAtDefaults:
    """The Race page's defaults on the bundled model, cache on and off, every position used (the readable path)."""

    prompt: str
    total_tokens: int
    new_tokens: int
    dtype: str
    identical: bool
    first_divergence_step: int | None
    max_logit_diff: float
    speedup_total: float | None
    speedup_median_step: float | None
    path: str
    wall_s: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RaceAtRung:
    """A real shape (random weights) raced on the lean path."""

    shape: str
    weights: str
    dtype: str
    new_tokens: int
    identical: bool
    first_divergence_step: int | None
    speedup_total: float | None
    speedup_median_step: float | None
    cache_total_ms: float
    nocache_total_ms: float
    how: str
    compile_ms: object  # the race's compile times, as it reports them
    wall_s: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GpuCheck:
    """A gpu-check run: the ladder it measured, and every target with its figure."""

    ladder: object  # topics.ladder.record.Ladder
    device: str
    measured_at: str
    versions: dict[str, str]
    wall_s: float | None  # None until the run is over
    ladder_wall_s: float
    race: RaceAtDefaults | None
    race_at_rung: RaceAtRung | None
    tests: TestRun | None
    targets: tuple[Target, ...]
    bytes: object | None = None  # topics.bytes.records.Record: bytes are time at a real shape (--bytes)

    def to_dict(self) -> dict:
        """The JSON edge: the ladder's keys (so it can ship as assets/ladder_gpu.json) and "gpu_check"."""
        more = {"bytes": _json(self.bytes)} if self.bytes is not None else {}
        return self.ladder.to_dict() | {"gpu_check": {
            "device": self.device, "measured_at": self.measured_at, "versions": self.versions, "wall_s": self.wall_s,
            "ladder_wall_s": self.ladder_wall_s, "race": _json(self.race), "race_at_rung": _json(self.race_at_rung),
            "tests": _json(self.tests), "targets": _json(self.targets)} | more}
