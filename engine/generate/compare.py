"""Cache on vs cache off on the same prompt and seed: same tokens, different work."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from engine.forward.sampling import Sampling
from engine.generate.stepper import Stepper
from engine.load.loaded import LoadedModel


@dataclass(frozen=True)
class Speedup:
    """Cache-off time over cache-on time, over the decode steps (engine.generate.compare.speedup); None without one."""

    median_ratio: float | None  # the median decode step's
    total_ratio: float | None  # the whole decode's
    cache_total_ms: float
    nocache_total_ms: float


@dataclass(frozen=True)
class RaceReport:
    """What one race measured: both runs, whether they chose the same tokens, and what the cache saved.

    `runs` holds each mode's run (a Stepper, or a LeanRun: its records, generated_ids and generated_text) until the
    page has summarised them (`without_runs`); everything else is figures and words."""

    identical: bool
    first_divergence_step: int | None
    max_logit_diff: float
    tokens: Mapping[str, tuple[int, ...]]  # mode -> the ids it chose
    text: Mapping[str, str]  # mode -> its generated text
    stop_reason: Mapping[str, str | None]
    latency_ms: Mapping[str, tuple[float, ...]]  # mode -> each pass's time, as measured
    phase: tuple[str, ...]  # each pass's phase: prefill, then decode
    speedup: Speedup
    runs: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    how: Mapping[str, str] | None = None  # a compiled race: what ran in each mode
    compile_ms: Mapping[str, Mapping[str, float]] | None = None  # a compiled race: compiling, never in a step's time
    at: str = ""  # a rung: whose shape, which weights
    dtype: str | None = None  # a rung's dtype (None: the model's own)

    @classmethod
    def of(cls, report: RaceReport, **extra) -> RaceReport:
        """The report with what a topic adds: how, compile_ms, at, dtype."""
        return replace(report, **extra)

    def without_runs(self) -> RaceReport:
        """The same figures, the runs' traces let go (the race table keeps what the page needs of them)."""
        return replace(self, runs=None)

    def to_dict(self) -> dict:
        """The JSON edge: every figure (less the runs), and the compiled path's where it ran."""
        out = {"identical": self.identical, "first_divergence_step": self.first_divergence_step,
               "max_logit_diff": self.max_logit_diff, "tokens": {m: list(v) for m, v in self.tokens.items()},
               "text": dict(self.text), "stop_reason": dict(self.stop_reason),
               "latency_ms": {m: list(v) for m, v in self.latency_ms.items()}, "phase": list(self.phase),
               "speedup": vars(self.speedup).copy()}
        for name in ("how", "compile_ms", "at", "dtype"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out



def compare(lm: LoadedModel, prompt: str, new_tokens: int, sampling: Sampling | None = None,
            record: bool = False, on_step=None, stop_on_eos: bool = True) -> RaceReport:
    """Run both modes in lockstep (alternating steps, so neither has the machine to itself; which goes first
    alternates too, so neither always pays the first pass over a new shape).

    `new_tokens` is the number of new tokens each run makes. Returns a RaceReport: identical tokens?, the largest
    logit difference over the steps both took on the same tokens, per-step latencies of both modes and the
    speed-up (median and total, warm-up excluded), and the two runs.
    """
    sampling = sampling or Sampling()
    # warm-up, untimed and dropped: one prefill of this prompt, so neither mode's timed prefill is the first pass
    # over its shape (the cache-on one, going first, took 30.2 ms against the cache-off one's 20.4 at the 26M rung
    # in a fresh process; with this warm-up 18.4 against 20.0)
    Stepper(lm, prompt, sampling=sampling, max_new_tokens=1, record=False).step()
    runs = {mode: Stepper(lm, prompt, use_cache=(mode == "cache"), sampling=sampling,
                          max_new_tokens=new_tokens, record=record, stop_on_eos=stop_on_eos)
            for mode in ("cache", "nocache")}
    max_diff = 0.0
    first_divergence = None
    turn = 0
    while not all(s.done for s in runs.values()):
        order = list(runs.items()) if turn % 2 == 0 else list(runs.items())[::-1]
        turn += 1
        for mode, stepper in order:
            if not stepper.done:
                trace = stepper.step()
                if on_step:
                    on_step(mode, trace)
        a, b = runs["cache"], runs["nocache"]
        same_so_far = a.tokens == b.tokens
        if a.last_logits is not None and b.last_logits is not None and first_divergence is None:
            max_diff = max(max_diff, float((a.last_logits - b.last_logits).abs().max()))
        if not same_so_far and first_divergence is None:
            first_divergence = len(a.records) - 1
    return race_report(runs, first_divergence, max_diff, {m: s.stop_reason for m, s in runs.items()})


def race_report(runs: dict, first_divergence: int | None, max_diff: float, stop_reason: dict) -> RaceReport:
    """What a race of the two modes reports, from its two runs ({"cache": ..., "nocache": ...}: each with records,
    generated_ids, generated_text): the proof, the tokens, each step's time and the speed-up."""
    cache, nocache = runs["cache"], runs["nocache"]
    return RaceReport(
        identical=cache.generated_ids == nocache.generated_ids, first_divergence_step=first_divergence,
        max_logit_diff=float(max_diff), tokens={m: tuple(s.generated_ids) for m, s in runs.items()},
        text={m: s.generated_text for m, s in runs.items()}, stop_reason=dict(stop_reason),
        latency_ms={m: tuple(round(t.latency_ms, 4) for t in s.records) for m, s in runs.items()},
        phase=tuple(t.phase for t in cache.records), speedup=speedup(cache.records, nocache.records), runs=runs)


def speedup(cache_traces, nocache_traces) -> Speedup:
    """No-cache time / cache time over the decode steps (prefill is identical work in both; the load's
    warm-up passes ran before either and are in neither)."""
    def decode_ms(traces):
        return [t.latency_ms for t in traces if t.phase == "decode"]

    c, n = decode_ms(cache_traces), decode_ms(nocache_traces)
    if not c or not n:
        return Speedup(median_ratio=None, total_ratio=None, cache_total_ms=sum(c), nocache_total_ms=sum(n))
    return Speedup(median_ratio=statistics.median(n) / statistics.median(c), total_ratio=sum(n) / sum(c),
                   cache_total_ms=sum(c), nocache_total_ms=sum(n))


@dataclass(frozen=True)
class LayerReuse:
    """One layer's cached K and V against a recomputation with no cache: the largest difference of each."""

    layer: int
    positions: int  # the positions the layer holds (a sliding-window layer holds only the newest)
    max_key_diff: float
    max_value_diff: float


@dataclass(frozen=True)
class KVReuse:
    """Every layer's cached K and V against a recomputation of every position with no cache."""

    positions: int
    layers: tuple[LayerReuse, ...]

    @property
    def max_key_diff(self) -> float:
        return max(x.max_key_diff for x in self.layers)

    @property
    def max_value_diff(self) -> float:
        return max(x.max_value_diff for x in self.layers)


def kv_reuse(lm, ids, cache) -> KVReuse | None:
    """Why K and V are cached and Q is not: recompute every cached position's K and V with no cache at all,
    and compare them with what the cache holds.

    A position's key and value depend only on the tokens up to it, so they never change once computed:
    the cache returns exactly what a full recomputation would (to float rounding). A query is used only
    by its own position's pass, so no later step ever reads an old Q: there is nothing to keep.
    Returns None for a family whose attention is not captured, or with the cache off.
    """
    from engine.forward.cache import kv_length, kv_tensors
    from engine.forward.run import run_pass

    if cache is None or not lm.captures:
        return None
    n = kv_length(cache)
    again = run_pass(lm, ids[:, :n], None, record=True)  # no cache: every position's K and V computed anew
    captured = {c.layer: c for c in again.captures}
    layers = []
    for layer, held in enumerate(kv_tensors(cache)):
        if held is None or layer not in captured:
            continue
        keys, values = held
        kept = keys.shape[2]  # a sliding-window layer holds only the newest positions
        c = captured[layer]
        layers.append(LayerReuse(layer, kept, float((keys - c.k[:, :, -kept:]).abs().max()),
                                 float((values - c.v[:, :, -kept:]).abs().max())))
    return KVReuse(n, tuple(layers))
