"""What a budget measurement returns: small frozen records of plain numbers and strings (no torch here).

The pictures (draw.py) and the page read only these, so a figure is a pure function of a record and the page
never needs torch to draw one. A record becomes a dict only at the JSON edge (`to_dict`: the CLI's --json, the
bench, a recorded sweep).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

BF16_BYTES = 2  # what a bf16 server stores a number in
SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # a dtype as a table or caption says it


@dataclass(frozen=True)
class LayerMap:
    """One layer of a cache at one moment: which positions it holds, and how."""

    layer: int
    held: tuple[int, ...]  # per position 0..pos-1: how many kv_heads hold it (0: evicted, kv_heads: every head)
    quantized: tuple[bool, ...]  # per position: held in fewer bits (fp8 / int8 / int4)
    kv_heads: int
    nbytes: int  # K and V bytes this layer holds, from its tensors
    full_numel: int = 0  # numbers (K and V) held in the cache's own dtype: the held rows, or a quantized tail
    packed_nbytes: int = 0  # bytes of the quantized rows: codes, scales, zero points
    quantized_numel: int = 0  # numbers (K and V) in the quantized rows: what each pass dequantizes


@dataclass(frozen=True)
class CacheMap:
    """A whole cache at one moment: every layer's map, and its bytes against the full cache's."""

    policy: str
    budget: int | None
    positions: int  # positions seen so far
    layers: tuple[LayerMap, ...]
    bytes_held: int  # measured: numel * element_size over the tensors it holds
    bytes_full: int  # the full cache at the same positions, in the model's dtype (measured on the full run)
    prefilled: int = 0  # positions written by the prefill (the rest by decode steps); 0: not said
    dtype: str = "float32"  # the cache's own dtype: the model's, what "full precision" means here
    element_size: int = 4  # bytes a number in that dtype

    @property
    def ratio(self) -> float:
        """Bytes held over the full cache's, both in the cache's own dtype (measured)."""
        return self.bytes_held / self.bytes_full if self.bytes_full else 1.0

    def bytes_held_at(self, element_size: int) -> int:
        """What the same cache would hold if its full-precision numbers took `element_size` bytes (counted from
        its tensors: the full-precision numbers times that size, plus the quantized rows' bytes as they are)."""
        return sum(m.full_numel * element_size + m.packed_nbytes for m in self.layers)

    def bytes_full_at(self, element_size: int) -> int:
        return self.bytes_full // self.element_size * element_size

    @property
    def ratio_bf16(self) -> float:
        """Bytes held over the full cache's if both were a bf16 server's: counted, not run."""
        full = self.bytes_full_at(BF16_BYTES)
        return self.bytes_held_at(BF16_BYTES) / full if full else 1.0

    @property
    def moved_per_step_estimate(self) -> int:
        """Bytes a decode step of this implementation moves through the cache (an estimate, from the tensors held):
        the full-precision rows read once; the quantized rows read packed, written back as a full-precision copy
        and that copy read by attention (quant.py dequantizes every older row, every pass)."""
        return sum(m.full_numel * self.element_size + m.packed_nbytes + 2 * m.quantized_numel * self.element_size
                   for m in self.layers)


@dataclass(frozen=True)
class Forced:
    """Teacher-forced on a held-out text: at each decode step, the policy's next-token distribution vs the full's."""

    policy: str
    budget: int | None
    prompt_tokens: int  # prefilled (in full), then one decode step per remaining token of the text
    agree: tuple[bool, ...]  # per step: same top-1 token as the full cache
    kl: tuple[float, ...]  # per step: KL(full || policy) in nats

    @property
    def agreement(self) -> float:
        return sum(self.agree) / len(self.agree) if self.agree else 1.0

    @property
    def kl_mean(self) -> float:
        return statistics.fmean(self.kl) if self.kl else 0.0


@dataclass(frozen=True)
class SweepPoint:
    """One policy at one budget, teacher-forced: a point of the divergence charts."""

    policy: str
    budget: int
    agreement: float
    kl_mean: float
    bytes_ratio: float  # bytes held / the full cache's, at the end of the text


@dataclass(frozen=True)
class Greedy:
    """Free-running greedy from a prompt: the tokens chosen, and the time of each decode step."""

    policy: str
    budget: int | None
    prompt: str
    tokens: tuple[int, ...]  # generated ids
    pieces: tuple[str, ...]  # the text of each generated token
    step_ms: tuple[float, ...]  # every decode step's forward pass (perf_counter around a device sync)
    warmup_steps: int = 1  # the first decode steps, excluded from the median (one-off costs)
    prompt_ids: tuple[int, ...] = ()  # the prompt's token ids, as the run fed them
    dequant_ms: tuple[float, ...] = ()  # per decode step: the part of step_ms spent dequantizing (quantized only)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def timing(self) -> tuple[float, float, float]:
        """(median, 25th, 75th percentile) of the decode steps after the warm-up, in ms."""
        return spread(self.step_ms[self.warmup_steps:])

    def dequant_timing(self) -> tuple[float, float, float] | None:
        """The same for the dequantize inside each step; None for a cache that holds nothing quantized."""
        timed = self.dequant_ms[self.warmup_steps:]
        return spread(timed) if any(timed) else None


def spread(samples) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) of `samples` in ms; (0, 0, 0) for none."""
    timed = sorted(samples) or [0.0]
    q = statistics.quantiles(timed, n=4) if len(timed) > 1 else [timed[0]] * 3
    return statistics.median(timed), q[0], q[2]


def parting(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """The first step (0 = the first generated token) where the two runs chose different tokens; None if never."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@dataclass(frozen=True)
class Summary:
    """One policy's figures in one flat record: what the CLI prints, the bench shows and `--json` writes."""

    policy: str
    budget: int | None
    dtype: str  # the cache's own dtype (the full cache's and the full-precision rows')
    bytes_held: int  # measured, in that dtype
    bytes_full: int
    bytes_ratio: float
    bytes_ratio_bf16: float  # the same cache counted at 2 bytes a full-precision number, against a bf16 full cache
    moved_ratio_estimate: float  # bytes a decode step moves through the cache over the full cache's (an estimate)
    agreement: float
    kl_mean: float
    steps_compared: int
    parting_step: int | None
    ms_per_step: float
    ms_p25: float
    ms_p75: float
    timed_steps: int
    dequant_ms: float | None  # median of the dequantize inside each timed step (quantized policies), measured

    def to_dict(self) -> dict:
        """The JSON edge: rounded as the CLI and the bench always wrote them."""
        d = asdict(self)
        d.update(bytes_ratio=round(self.bytes_ratio, 4), bytes_ratio_bf16=round(self.bytes_ratio_bf16, 4),
                 moved_ratio_estimate=round(self.moved_ratio_estimate, 4), agreement=round(self.agreement, 4),
                 kl_mean=round(self.kl_mean, 5), ms_per_step=round(self.ms_per_step, 3),
                 ms_p25=round(self.ms_p25, 3), ms_p75=round(self.ms_p75, 3),
                 dequant_ms=None if self.dequant_ms is None else round(self.dequant_ms, 3))
        return d


@dataclass(frozen=True)
class PolicyRow:
    """One policy measured side by side with the full cache, on the same text and the same prompt."""

    policy: str
    budget: int | None
    forced: Forced
    greedy: Greedy
    full: Greedy  # the full cache's free run from the same prompt
    cache: CacheMap  # after the teacher-forced run: the whole held-out context seen
    parting_step: int | None = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "parting_step", parting(self.greedy.tokens, self.full.tokens))

    def summary(self) -> Summary:
        ms, low, high = self.greedy.timing()
        dq = self.greedy.dequant_timing()
        full = self.cache.bytes_full  # the full cache's step reads each of its rows once
        return Summary(self.policy, self.budget, self.cache.dtype, self.cache.bytes_held, full,
                       self.cache.ratio, self.cache.ratio_bf16,
                       self.cache.moved_per_step_estimate / full if full else 1.0,
                       self.forced.agreement, self.forced.kl_mean, len(self.forced.agree), self.parting_step,
                       ms, low, high, max(0, len(self.greedy.step_ms) - self.greedy.warmup_steps),
                       None if dq is None else dq[0])

    def to_dict(self) -> dict:
        """The JSON edge: the summary, and both free-running texts."""
        return {**self.summary().to_dict(), "text": self.greedy.text, "full_text": self.full.text}


@dataclass(frozen=True)
class SinkRow:
    """The attention one layer pays position 0, against what a uniform reader would pay it: averaged over the
    heads, and head by head (one head can be a sink while the average is not)."""

    layer: int
    mass: float  # mean over heads and over the query rows read of the weight on position 0
    uniform: float  # the same mean if every row spread its weight evenly: 1 / (query_pos + 1)
    rows: int  # query rows averaged
    head_mass: tuple[float, ...] = ()  # per head: the mean over the query rows read

    @property
    def ratio(self) -> float:
        return self.mass / self.uniform if self.uniform else 0.0

    @property
    def head_ratios(self) -> tuple[float, ...]:
        return tuple(m / self.uniform if self.uniform else 0.0 for m in self.head_mass)

    @property
    def strongest_head(self) -> int | None:
        return max(range(len(self.head_mass)), key=self.head_mass.__getitem__) if self.head_mass else None

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "head_ratios": list(self.head_ratios)}


@dataclass(frozen=True)
class RecordedSweep:
    """The divergence charts' points recorded for a model (assets/budget_sweep_<model>.json), and where."""

    model: str
    device: str
    dtype: str
    context: int
    measured_at: str  # ISO time
    wall_s: float
    points: tuple[SweepPoint, ...]
    command: str = ""  # what made it

    @classmethod
    def from_dict(cls, doc: dict) -> "RecordedSweep":
        return cls(doc["model"], doc["device"], doc["dtype"], int(doc["context"]), doc["measured_at"],
                   float(doc["wall_s"]), tuple(SweepPoint(**p) for p in doc["points"]), doc.get("command", ""))

    def to_dict(self) -> dict:
        return {"model": self.model, "device": self.device, "dtype": self.dtype, "context": self.context,
                "measured_at": self.measured_at, "wall_s": self.wall_s, "command": self.command,
                "points": [asdict(p) for p in self.points]}


# ---------------------------------------------------------------- every story, with its spread (stories.py)


@dataclass(frozen=True)
class StoryScore:
    """One policy on one held-out story: the teacher-forced counts, and where the free runs parted."""

    story: int  # its index among the stories measured
    tokens: int  # the story's tokens measured (half prefilled, the rest teacher-forced)
    steps: int  # teacher-forced steps compared
    agreeing: int  # of them, with the full cache's top-1 token
    kl_sum: float  # Σ over those steps of KL(full || policy), nats
    parting_step: int | None  # the free runs' first different token (None: never, within the free run)

    @classmethod
    def of(cls, story: int, tokens: int, agree, kl, mine, full) -> "StoryScore":
        return cls(story, tokens, len(agree), int(sum(agree)), float(sum(kl)), parting(tuple(mine), tuple(full)))

    @property
    def agreement(self) -> float:
        return self.agreeing / self.steps if self.steps else 1.0


@dataclass(frozen=True)
class Interval:
    """A 95 % interval (percentile bootstrap over the stories)."""

    low: float
    high: float

    def overlaps(self, other: "Interval") -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class Saturation:
    """fp8's decoded K and V numbers past its frozen scale's range (|x| > 448 · scale), all layers and stories."""

    decoded: int  # decoded numbers seen
    past_range: int  # of them, past the range: they saturate at ±448 when packed
    worst: float  # the largest |x| / (448 · scale): 1.13 is 13 % past the range

    @property
    def share(self) -> float:
        return self.past_range / self.decoded if self.decoded else 0.0


@dataclass(frozen=True)
class PolicySpread:
    """One policy in one dtype over every story: pooled figures, their intervals, each story's own."""

    policy: str
    budget: int | None
    dtype: str  # "float32", "bfloat16", or "bfloat16 vs float32" (bf16's full cache against fp32's)
    stories: tuple[StoryScore, ...]
    agreement_ci: Interval
    kl_ci: Interval
    saturation: Saturation | None = None

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.stories)

    @property
    def agreement(self) -> float:
        """Agreeing steps over every story's steps (pooled)."""
        return sum(s.agreeing for s in self.stories) / self.steps if self.steps else 1.0

    @property
    def kl_mean(self) -> float:
        return sum(s.kl_sum for s in self.stories) / self.steps if self.steps else 0.0

    @property
    def parted(self) -> int:
        """Stories whose free runs parted from the full cache's."""
        return sum(s.parting_step is not None for s in self.stories)

    @property
    def parting_median(self) -> float | None:
        """The median parting step over the stories that parted (None: none did)."""
        steps = [s.parting_step for s in self.stories if s.parting_step is not None]
        return statistics.median(steps) if steps else None

    def to_dict(self) -> dict:
        return {"policy": self.policy, "budget": self.budget, "dtype": self.dtype,
                "stories": [asdict(s) for s in self.stories], "agreement": self.agreement,
                "agreement_ci": asdict(self.agreement_ci), "kl_mean": self.kl_mean, "kl_ci": asdict(self.kl_ci),
                "parted": self.parted, "parting_median": self.parting_median,
                "saturation": None if self.saturation is None else {**asdict(self.saturation),
                                                                    "share": self.saturation.share}}

    @classmethod
    def from_dict(cls, d: dict) -> "PolicySpread":
        sat = d.get("saturation")
        return cls(d["policy"], d["budget"], d["dtype"], tuple(StoryScore(**s) for s in d["stories"]),
                   Interval(**d["agreement_ci"]), Interval(**d["kl_ci"]),
                   None if sat is None else Saturation(sat["decoded"], sat["past_range"], sat["worst"]))


@dataclass(frozen=True)
class Rank:
    """One place of a ranking: a policy, and whether it is tied with the next one down (their intervals overlap)."""

    policy: str
    agreement: float
    interval: Interval
    tied_with_next: bool | None  # None: the last place


@dataclass(frozen=True)
class StorySpread:
    """Every policy over several held-out stories, in fp32 and bf16 (topics/budget/stories.py)."""

    model: str
    device: str
    budget: int
    stories: int
    context: int
    free_tokens: int
    resamples: int
    seed: int
    rows: tuple[PolicySpread, ...]
    measured_at: str = ""
    wall_s: float = 0.0
    command: str = ""
    bf16_bytes: int = BF16_BYTES

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.dtype for r in self.rows if " vs " not in r.dtype))

    def row(self, policy: str, dtype: str) -> PolicySpread | None:
        return next((r for r in self.rows if r.policy == policy and r.dtype == dtype), None)

    def ranking(self, dtype: str, policies) -> tuple[Rank, ...]:
        """The named policies from the most agreement to the least (ties: the lower KL); each place says whether it
        is tied with the next, which it is exactly when their intervals overlap."""
        rows = sorted((r for r in self.rows if r.dtype == dtype and r.policy in policies),
                      key=lambda r: (-r.agreement, r.kl_mean))
        return tuple(Rank(r.policy, r.agreement, r.agreement_ci,
                          None if i == len(rows) - 1 else r.agreement_ci.overlaps(rows[i + 1].agreement_ci))
                     for i, r in enumerate(rows))

    def ranking_words(self, dtype: str, policies) -> str:
        """"a ≈ b > c": ≈ where two neighbours are tied (their 95 % intervals overlap), > where they are not."""
        out = ""
        for r in self.ranking(dtype, policies):
            out += r.policy + ("" if r.tied_with_next is None else " ≈ " if r.tied_with_next else " > ")
        return out

    def apart(self, dtype: str, policies) -> tuple[tuple[str, str], ...]:
        """Every pair of the named policies, neighbours or not, whose intervals do not overlap: (higher, lower). A
        chain of ties can join two policies that are apart: these are the only orders the stories support."""
        ranks = self.ranking(dtype, policies)
        return tuple((a.policy, b.policy) for i, a in enumerate(ranks) for b in ranks[i + 1:]
                     if not a.interval.overlaps(b.interval))

    def ranking_sentence(self, dtype: str, policies, mark=str) -> str:
        """The ranking with its ties, then the pairs the intervals set apart (or that none are). A chain of ties
        ("a ≈ b ≈ c") does not make a tie of its ends, and the words say so. `mark`: how the ranking and each pair
        are set (the page's bold)."""
        apart = ", ".join(mark(f"{a} > {b}") for a, b in self.apart(dtype, policies))
        return (mark(self.ranking_words(dtype, policies)) + " (≈: tied with the next, their 95 % intervals overlap; "
                "ties do not chain); " + (f"set apart by their intervals: {apart}" if apart
                                          else "no two of them apart"))

    def to_dict(self) -> dict:
        return {"model": self.model, "device": self.device, "budget": self.budget, "stories": self.stories,
                "context": self.context, "free_tokens": self.free_tokens, "resamples": self.resamples,
                "seed": self.seed, "measured_at": self.measured_at, "wall_s": self.wall_s, "command": self.command,
                "bf16_bytes": self.bf16_bytes, "rows": [r.to_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, d: dict) -> "StorySpread":
        return cls(d["model"], d["device"], d["budget"], d["stories"], d["context"], d["free_tokens"], d["resamples"],
                   d["seed"], tuple(PolicySpread.from_dict(r) for r in d["rows"]), d.get("measured_at", ""),
                   d.get("wall_s", 0.0), d.get("command", ""), d.get("bf16_bytes", BF16_BYTES))
