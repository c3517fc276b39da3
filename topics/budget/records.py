"""What a budget measurement returns: small frozen records of plain numbers and strings (no torch here).

The pictures (draw.py) and the page read only these, so a figure is a pure function of a record and the page
never needs torch to draw one.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LayerMap:
    """One layer of a cache at one moment: which positions it holds, and how."""

    layer: int
    held: tuple[int, ...]  # per position 0..pos-1: how many kv_heads hold it (0: evicted, kv_heads: every head)
    quantized: tuple[bool, ...]  # per position: held in fewer bits (fp8 / int8 / int4)
    kv_heads: int
    nbytes: int  # K and V bytes this layer holds, from its tensors


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

    @property
    def ratio(self) -> float:
        return self.bytes_held / self.bytes_full if self.bytes_full else 1.0


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

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def timing(self) -> tuple[float, float, float]:
        """(median, 25th, 75th percentile) of the decode steps after the warm-up, in ms."""
        timed = sorted(self.step_ms[self.warmup_steps:]) or [0.0]
        q = statistics.quantiles(timed, n=4) if len(timed) > 1 else [timed[0]] * 3
        return statistics.median(timed), q[0], q[2]


def parting(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """The first step (0 = the first generated token) where the two runs chose different tokens; None if never."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


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

    def as_dict(self) -> dict:
        """One flat row: what the CLI prints, `--json` writes and the bench shows."""
        ms, low, high = self.greedy.timing()
        return {"policy": self.policy, "budget": self.budget, "bytes_held": self.cache.bytes_held,
                "bytes_full": self.cache.bytes_full, "bytes_ratio": round(self.cache.ratio, 4),
                "agreement": round(self.forced.agreement, 4), "kl_mean": round(self.forced.kl_mean, 5),
                "steps_compared": len(self.forced.agree), "parting_step": self.parting_step,
                "ms_per_step": round(ms, 3), "ms_p25": round(low, 3), "ms_p75": round(high, 3),
                "timed_steps": max(0, len(self.greedy.step_ms) - self.greedy.warmup_steps),
                "text": self.greedy.text, "full_text": self.full.text}


@dataclass(frozen=True)
class SinkRow:
    """The attention one layer pays position 0, against what a uniform reader would pay it."""

    layer: int
    mass: float  # mean over heads and over the query rows read of the weight on position 0
    uniform: float  # the same mean if every row spread its weight evenly: 1 / (query_pos + 1)
    rows: int  # query rows averaged

    @property
    def ratio(self) -> float:
        return self.mass / self.uniform if self.uniform else 0.0
