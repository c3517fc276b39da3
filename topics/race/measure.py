"""Cache vs no-cache race: the table, growth fits, the playback and the length sweep (figures: topics/race/draw.py).

The race itself is `engine.generate.compare.compare`: both modes measured in lockstep,
alternating steps, so neither has the machine to itself. The page then *plays the
race back* at the measured wall-clock speed of each mode (`progress_at`), so the
cached run visibly finishes first, by exactly the measured factor.

At a rung on a GPU the race times the lean path instead (`lean_compare`: the rung compiled, static cache and
CUDA graphs with the cache on, every position recomputed by the same compiled model with it off), because the
readable path there is launch-bound and would hide what the cache saves; its report says which path ran (`how`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np
import pandas as pd

from engine.generate.compare import RaceReport, Speedup, compare, race_report  # noqa: F401 (the page's names)
from engine.timing import Timing, timed
from physics.units import apart

MODES = ("cache", "nocache")  # the two runs of a race, in the order they are drawn

# said where a race runs in 16 bits (the bundled models load in fp32 everywhere: engine.load.load.model_dtype)
PRECISION_NOTE = ("In {dtype} the two runs can part: with the cache, each step's attention adds up the cached keys "
                  "in one order; without it, every position is recomputed and added up in another. In 16-bit "
                  "floats (8 bits of mantissa in bf16) those sums round differently, and where two tokens' "
                  "logits are nearly tied the rounding can pick the other one; from then on the two texts "
                  "differ. Nothing is wrong with the cache: in float32 (the bundled models' default) the same "
                  "race gives identical tokens.")


def precision_note(dtype_name: str) -> str | None:
    """Why a race in 16-bit floats may show different tokens (None in float32: there it must not)."""
    return PRECISION_NOTE.format(dtype=dtype_name) if dtype_name in ("bfloat16", "float16") else None



# ---------------------------------------------------------------- the records a race crosses the page in


@dataclass(frozen=True)
class GrowthFit:
    """k in time ~ n^k, fitted in log-log space, and its 95 % range (± 1.96 standard errors of the slope)."""

    k: float
    low: float
    high: float


@dataclass(frozen=True)
class Growth:
    """How each run's total decode time grew with the steps (None: too few steps to fit)."""

    cache: GrowthFit | None
    nocache: GrowthFit | None


@dataclass(frozen=True)
class RaceSummary:
    """The race's proof and figures as the page says them: same tokens?, the speed-up, prefill apart, the growth."""

    identical: bool
    max_logit_diff: float
    first_divergence_step: int | None
    speedup: Speedup
    cache_prefill_ms: float
    nocache_prefill_ms: float
    growth: Growth  # measured time
    cache_flops_exponent: float | None  # the work (estimate), fitted the same way
    nocache_flops_exponent: float | None

    def to_dict(self) -> dict:
        return {"identical": self.identical, "max_logit_diff": self.max_logit_diff,
                "first_divergence_step": self.first_divergence_step, **vars(self.speedup),
                "cache_prefill_ms": self.cache_prefill_ms, "nocache_prefill_ms": self.nocache_prefill_ms,
                **{f"{m}_fit": None if f is None else [f.k, f.low, f.high]
                   for m, f in (("cache", self.growth.cache), ("nocache", self.growth.nocache))},
                "cache_flops_exponent": self.cache_flops_exponent,
                "nocache_flops_exponent": self.nocache_flops_exponent}


@dataclass(frozen=True)
class Lane:
    """Where one run's playback stands at a moment: tokens made, of how many, finished, and its measured total."""

    tokens: int
    total: int
    finished: bool
    total_ms: float


@dataclass(frozen=True)
class Lanes:
    """Both runs at the same moment of the playback."""

    cache: Lane
    nocache: Lane

    def of(self, mode: str) -> Lane:
        return {"cache": self.cache, "nocache": self.nocache}[mode]


@dataclass(frozen=True)
class CacheRule:
    """What the cache saved, three ways, for one race's decode steps (`cache_rule`)."""

    flop_ratio: float  # cache-off FLOPs over cache-on FLOPs (estimates)
    measured: float | None  # the measured time ratio (compare's total_ratio)
    positions: tuple[int, int]  # the fewest and most positions a cache-off step recomputed
    ridge_here: float  # this device's one ridge, in tokens
    dtype_here: str
    rule_here: float  # max(1, n / R) averaged over the steps, R = ridge_here
    gpu: str  # the datasheet roof compared with
    ridge_gpu: float
    dtype_gpu: str
    rule_gpu: float
    cached_kind: str = ""  # what a cached step here is (roofline.verdict): the rule reaches only bound steps
    cached_label: str = ""

    def to_dict(self) -> dict:
        return {**vars(self), "positions": list(self.positions)}


@dataclass(frozen=True)
class RaceResult:
    """A finished race, as the page keeps it between reruns: the table it draws from and what it says."""

    df: pd.DataFrame = field(compare=False)  # race_frame: one row per step per mode (also the CSV)
    summary: RaceSummary
    prompt: str
    texts: Mapping[str, str]
    note: str | None  # drawing.caveats.compare_note: the times contradict the work
    at: str
    rule: CacheRule | None
    how: Mapping[str, str] | None
    precision: str | None  # why a 16-bit race may part


# ---------------------------------------------------------------- a race's table, fits and words


def race_frame(report: RaceReport) -> pd.DataFrame:
    """One row per step per mode: the CSV export and the source of every race chart."""
    rows = []
    for mode, stepper in report.runs.items():
        cumulative = 0.0
        for t in stepper.records:
            cumulative += t.latency_ms
            rows.append({"mode": mode, "step": t.step, "phase": t.phase, "kv_len": t.kv_len, "q_len": t.q_len,
                         "token_id": t.token_id, "token": t.token, "latency_ms": round(t.latency_ms, 4),
                         "cumulative_ms": round(cumulative, 4),
                         "flops_estimate": t.flops_estimate, "bytes_estimate": t.bytes_estimate})
    return pd.DataFrame(rows)


def growth_exponent(positions, values) -> float | None:
    """k in values ~ positions^k, fitted by least squares in log-log space (None if too few points)."""
    fit = growth_fit(positions, values)
    return None if fit is None else fit.k


def growth_fit(positions, values) -> GrowthFit | None:
    """The log-log slope and its 95% range (± 1.96 standard errors of the slope); None below three points."""
    pts = [(math.log(p), math.log(v)) for p, v in zip(positions, values) if p > 0 and v > 0]
    if len(pts) < 3:
        return None
    x, y = np.array(pts).T
    (k, c), res, *_ = np.polyfit(x, y, 1, full=True)
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum())
    if n <= 2 or sxx == 0:
        return GrowthFit(float(k), float(k), float(k))
    resid = y - (k * x + c)
    se = math.sqrt(float((resid**2).sum()) / (n - 2) / sxx)
    return GrowthFit(float(k), float(k - 1.96 * se), float(k + 1.96 * se))


def progress_at(df: pd.DataFrame, elapsed_ms: float) -> Lanes:
    """Where each mode was `elapsed_ms` into its own measured run: tokens done, of how many, finished?

    A token counts once the forward pass that chose it has finished (prefill chooses the first).
    """
    lanes = {}
    for mode in MODES:
        d = df[df["mode"] == mode]
        done = int((d["cumulative_ms"] <= elapsed_ms).sum())
        lanes[mode] = Lane(tokens=done, total=len(d), finished=done == len(d),
                           total_ms=float(d["cumulative_ms"].iloc[-1]) if len(d) else 0.0)
    return Lanes(**lanes)


def headline(growth: Growth, busy: bool = False) -> str:
    """What the measured growth shows, in words that the fits support (never more). `busy`: the race's steps were
    timed on a busy server (drawing.caveats.compare_note said so), and the fits are said to be bent by it."""
    if growth.cache is None or growth.nocache is None:
        return "Too few steps to fit a growth rate."
    (kc, lc, hc), (kn, ln, hn) = ((f.k, f.low, f.high) for f in (growth.cache, growth.nocache))

    def ends(lo: float, hi: float) -> str:  # the digits that keep its two ends apart ("1.06–1.06" says nothing)
        return "–".join(apart(lo, hi, digits=2))

    parts = [f"Total decode time grows like n to the power {kc:.2f} with the cache (95% range {ends(lc, hc)}) "
             f"and to the power {kn:.2f} without it ({ends(ln, hn)})."]
    if ln > hc:
        parts.append("Without the cache it measurably grows faster.")
    elif lc > hn:  # against the lesson, and the ranges do not overlap: say what was measured, and why it can be
        parts.append("Here the cached run's time grew measurably faster, against the lesson (its work grows more "
                     "slowly, estimate): timing noise, most likely a busy server. Run again.")
    else:
        parts.append("At this length the two growth rates cannot be told apart: run longer.")
    if hn < 1.9:
        parts.append("The work itself grows like n² without the cache (estimate); the time grows slower while a "
                     "cache-off pass is timed by what every pass pays (reading the weights, launching kernels) "
                     "rather than by its arithmetic: the rule below says how far that lasts on this device.")
    if busy:  # a power of 0.56 for a run whose steps each cost about the same: one slow early step flattens a
        # total's curve
        parts.append("The server was busy while the steps were timed (the note above): a step slowed by other work "
                     "bends these fits, most of all an early one, which flattens a total's curve. Run again when the "
                     "server is quiet.")
    return " ".join(parts)


def cache_rule(df: pd.DataFrame, measured_ratio: float | None, here, gpu) -> CacheRule | None:
    """What the cache saves, three ways, for the decode steps of one race (`race_frame`):

        arithmetic   the FLOP ratio, cache off over cache on (estimates): about n, the positions recomputed
        time         measured here (compare's total_ratio)
        the rule     by the roofline a cache-off step over n positions costs about max(1, n / R) cached steps
                     (roofline.cache_off_steps), R the device's ridge in tokens: below it both passes wait on
                     reading the same weights. Averaged over the race's steps, for this device (its one ridge, in
                     the dtype it ran) and for `gpu`, a datasheet roof, in its own dtype.
    None when a mode has no decode step."""
    from physics.roofline import cache_off_steps

    on = df[(df["mode"] == "cache") & (df["phase"] == "decode")]
    off = df[(df["mode"] == "nocache") & (df["phase"] == "decode")]
    if on.empty or off.empty:
        return None
    ridge_here = here.ridge_tokens
    ns = [int(n) for n in off["q_len"]]

    def rule(ridge: float) -> float:
        return sum(cache_off_steps(n, ridge) for n in ns) / len(ns)

    from physics.roofline import verdict

    cached = verdict(float(on["latency_ms"].median()), float(on["flops_estimate"].median()),
                     float(on["bytes_estimate"].median()), here)
    return CacheRule(flop_ratio=float(off["flops_estimate"].sum() / on["flops_estimate"].sum()),
                     measured=measured_ratio, positions=(min(ns), max(ns)), ridge_here=ridge_here,
                     dtype_here=here.dtype, rule_here=rule(ridge_here), gpu=gpu.name.split(" (")[0],
                     ridge_gpu=gpu.ridge_tokens, dtype_gpu=gpu.dtype, rule_gpu=rule(gpu.ridge_tokens),
                     cached_kind=cached.kind, cached_label=cached.label)


def cache_rule_sentence(r: CacheRule) -> str:
    """`cache_rule` in words: the FLOP ratio, the measured ratio and the rule's prediction here and on a GPU."""
    lo, hi = r.positions
    measured = f"×{r.measured:.1f} measured here" if r.measured else "not measured here"
    return (f"What the cache saved over these {lo}–{hi}-position steps: ×{r.flop_ratio:.0f} in arithmetic (FLOP "
            f"estimates), {measured}. The roofline's rule: a cache-off step over n positions costs about max(1, n / R) "
            f"cached steps, R the ridge in tokens, because below it both passes wait on reading the same weights. Here "
            f"R ≈ {r.ridge_here:.0f} tokens ({r.dtype_here}), so the rule gives ×{r.rule_here:.1f}"
            + (f", against ×{r.measured:.1f} measured (×{r.measured / r.rule_here:.1f} the rule's)" if r.measured else "")
            + f". The rule assumes a cached step held up by reading the weights; this model's is {r.cached_label}"
            + (", so the rule does not reach a model this small (the Scale page's big rung shows it)"
               if r.cached_kind == "overhead-bound" else "")
            + f". On an {r.gpu} at batch 1, R ≈ {r.ridge_gpu:.0f} tokens ({r.dtype_gpu}) and it predicts "
            f"×{r.rule_gpu:.1f}" + (": there the cache would save little time at these lengths (it pays in time "
                                    f"past ~{r.ridge_gpu:.0f} positions), though it always saves the arithmetic."
                                    if r.rule_gpu < 1.5 else
                                    f": there it pays in time past ~{r.ridge_gpu:.0f} positions."))


def summary(report: RaceReport, df: pd.DataFrame) -> RaceSummary:
    """Speed-up, totals and fitted exponents of cumulative decode time vs steps."""
    fits, flops, prefill = {}, {}, {}
    for mode in MODES:
        d = df[(df["mode"] == mode) & (df["phase"] == "decode")]
        prefill[mode] = float(df[(df["mode"] == mode) & (df["phase"] == "prefill")]["latency_ms"].sum())
        fits[mode] = growth_fit(d["step"], d["latency_ms"].cumsum())
        flops[mode] = growth_exponent(d["step"], d["flops_estimate"].cumsum())
    return RaceSummary(identical=report.identical, max_logit_diff=report.max_logit_diff,
                       first_divergence_step=report.first_divergence_step, speedup=report.speedup,
                       cache_prefill_ms=prefill["cache"], nocache_prefill_ms=prefill["nocache"],
                       growth=Growth(fits["cache"], fits["nocache"]), cache_flops_exponent=flops["cache"],
                       nocache_flops_exponent=flops["nocache"])


def sweep(lm, prompt: str, lengths=(32, 64, 128, 256, 512), repeats: int = 3, sampling=None,
          on_progress=None) -> pd.DataFrame:
    """Both modes at several lengths; medians over `repeats` of time per token and total decode time, and the
    fastest and slowest repeat's of each (how far the repeats spread: a busy server shows there)."""
    rows = []
    jobs = [(n, r) for n in lengths for r in range(repeats)]
    for i, (n, r) in enumerate(jobs):
        rep = compare(lm, prompt, new_tokens=n, sampling=sampling, stop_on_eos=False)
        for mode, stepper in rep.runs.items():
            ms = [t.latency_ms for t in stepper.records if t.phase == "decode"]
            rows.append({"tokens": n, "repeat": r, "mode": mode, "total_ms": sum(ms),
                         "ms_per_token": sum(ms) / max(1, len(ms))})
        if on_progress:
            on_progress((i + 1) / len(jobs), f"{n} tokens, repeat {r + 1}/{repeats}")
    df = pd.DataFrame(rows)
    out = df.groupby(["tokens", "mode"], as_index=False)[["total_ms", "ms_per_token"]].median()
    spread = df.groupby(["tokens", "mode"], as_index=False).agg(
        low_ms_per_token=("ms_per_token", "min"), high_ms_per_token=("ms_per_token", "max"),
        low_total_ms=("total_ms", "min"), high_total_ms=("total_ms", "max"))
    return out.merge(spread, on=["tokens", "mode"])


# ---------------------------------------------------------------- the race at a rung, on the lean path


@dataclass(frozen=True)
class LeanStep:
    """One pass of a lean race, with the fields a race's table, charts and notes read from a StepTrace."""

    step: int
    phase: str  # "prefill" or "decode"
    use_cache: bool
    q_len: int  # positions fed: s for the prefill, 1 for a cached step, every position with the cache off
    kv_len: int  # positions attended to
    token_id: int
    token: str
    timing: Timing  # one run, after a device sync (compile and graph recording apart: LeanRun.compile_ms)
    flops_estimate: float
    bytes_estimate: float  # weights and K/V moved (engine.forward.estimates.step_bytes), in the run's dtype

    @property
    def latency_ms(self) -> float:
        return self.timing.forward_ms


@dataclass
class LeanRun:
    """One mode of a lean race: its steps and tokens (what compare's report keeps of a Stepper)."""

    records: list
    generated_ids: list
    generated_text: str = ""


def lean_compare(lm, prompt: str, new_tokens: int, on_step=None, compile: bool | None = None) -> RaceReport:
    """The race on the lean path (physics.compiled), greedy, in lockstep like `compare`; the same report,
    plus `how` (which path ran) and `compile_ms` (each compiled pass's first calls, never in a step).

        cache on   the prefill fills a static cache, then one compiled step a token   [batch=1, 1]
        cache off  every position again at every step (the same model compiled)       [batch=1, n]

    Random weights choose noise, but the same noise in both modes: identical tokens is still the check.
    """
    import torch

    from engine.forward.estimates import step_bytes, step_flops
    from physics.compiled import CompiledRecipe

    ids = lm.tokenizer(prompt, return_tensors="pt")["input_ids"]
    s = ids.shape[1]
    new_tokens = max(1, min(new_tokens, lm.spec.max_positions - s))
    on, off = CompiledRecipe(lm, s + new_tokens, compile), CompiledRecipe(lm, s + new_tokens, compile)
    runs = {"cache": LeanRun([], []), "nocache": LeanRun([], [])}
    seq = {"cache": ids.clone(), "nocache": ids.clone()}
    logits = {}

    def once(fn):  # one run, timed (engine.timing): (its result, its Timing)
        out = []
        timing = timed(lambda: out.append(fn()), lm.device, repeats=1, warmup=0)
        return out[0], timing

    max_diff, first_divergence = 0.0, None
    with lm.turn():
        on.step(on.prefill(ids))  # the warm-ups: compile (and, on a GPU, record the step's graph), apart
        off.recompute(ids)
        for step in range(new_tokens):
            for mode, run in runs.items():
                n = seq[mode].shape[1]
                if mode == "cache" and step == 0:
                    token, timing = once(lambda: on.prefill(seq[mode]))
                    out, q_len = None, n
                elif mode == "cache":
                    out, timing = once(lambda: on.step(int(seq[mode][0, -1])))
                    on.pos += 1
                    token, q_len = int(out.argmax(-1)), 1
                else:
                    out, timing = once(lambda: off.recompute(seq[mode]))
                    token, q_len = int(out.argmax(-1)), n
                logits[mode] = out
                past = n - q_len
                trace = LeanStep(step=step, phase="prefill" if step == 0 else "decode", use_cache=mode == "cache",
                                 q_len=q_len, kv_len=n, token_id=token,
                                 token=lm.tokenizer.decode([token]), timing=timing,
                                 flops_estimate=step_flops(lm.spec, q_len, past),
                                 bytes_estimate=step_bytes(lm.spec, q_len, past, lm.elem_bytes))
                run.records.append(trace)
                run.generated_ids.append(token)
                seq[mode] = torch.cat([seq[mode], torch.tensor([[token]])], dim=1)
                if on_step:
                    on_step(mode, trace)
            a, b = logits.get("cache"), logits.get("nocache")
            if a is not None and b is not None and first_divergence is None:
                max_diff = max(max_diff, float((a.float() - b.float()).abs().max()))
            if runs["cache"].generated_ids != runs["nocache"].generated_ids and first_divergence is None:
                first_divergence = step
    for run in runs.values():
        run.generated_text = lm.tokenizer.decode(run.generated_ids)
    return RaceReport.of(race_report(runs, first_divergence, max_diff, {m: "max_new_tokens" for m in runs}),
                         how={"cache": on.how, "nocache": off.describe("recompute")},
                         compile_ms={"cache": dict(on.compile_ms), "nocache": dict(off.compile_ms)})


# ---------------------------------------------------------------- a race at a rung

CPU_RUNGS = ("26M", "110M")  # grown sizes a race can take on a CPU in a minute or two


def race_sizes(lm) -> tuple[str, ...]:
    """The rungs a race offers on lm's device: grown sizes on a CPU, published shapes on a GPU (physics.rungs)."""
    from physics.rungs import GPU_SIZES

    return tuple(GPU_SIZES[1:]) if lm.device.type == "cuda" else CPU_RUNGS


def race_at(lm, size: str, prompt: str, new_tokens: int, sampling=None, on_step=None) -> RaceReport:
    """The race at a rung of lm's family (or a published shape), built now with random weights and freed after.

    On a GPU the rung runs in the device's fast dtype on the lean path (`lean_compare`: greedy, compiled), where
    the readable path would be launch-bound; on a CPU it runs the Stepper's readable path (`compare`). The report
    gains `at` (whose shape, which weights) and keeps `how` where the lean path ran.
    """
    from physics import machine
    from physics.rungs import RANDOM_WEIGHTS, rung_model, timing_dtype

    rlm = rung_model(lm, size, dtype=timing_dtype(lm))
    try:
        if lm.device.type == "cuda":
            report = lean_compare(rlm, prompt, new_tokens, on_step=on_step)
        else:
            report = RaceReport.of(compare(rlm, prompt, new_tokens, sampling=sampling, on_step=on_step,
                                           stop_on_eos=False))
        return replace(report, at=f"{rlm.spec.name.rsplit(' ', 1)[-1]} parameters ({rlm.dtype_name}), {RANDOM_WEIGHTS}",
                       dtype=rlm.dtype_name)
    finally:
        del rlm
        machine.release_memory()
