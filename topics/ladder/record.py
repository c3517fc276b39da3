"""The frozen record of a size ladder, like a StepTrace is of one pass: what the Scale page and the CLI show.

    Measured    one pass at one rung: its times (median, min-max, the warm-up apart), its FLOPs and bytes
                (estimates), and what the roofline says of it (physics.roofline.verdict)
    RungResult  one rung: its size and shape (a published model's, or the loaded one's grown), its weights
                (trained, or random for timing only), and its passes: prefill, cached decode, the same decode
                with the cache off on the readable path; where timed (on CUDA), the lean path's prefill and
                decode (physics.compiled) and transformers' own recipe beside them, compile time apart
    Ladder      every rung on one device, the roofline they are placed on, and how the ladder was run

`Ladder.to_dict()` is the JSON (`python -m engine ladder --json`, assets/ladder_*.json); `Ladder.from_dict`
reads it back, so a recorded ladder is drawn by the same functions as a live one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import pandas as pd

from physics.roofline import DeviceRoof, verdict
from physics.units import human_bytes, times
from topics.ladder.curve import Curve

ELEM_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}  # a recorded ladder's dtype, in bytes per element

# the JSON's keys, documented once (tests check a written file has them)
LADDER_KEYS = ("model", "family", "device", "dtype", "threads", "tokens", "prompt", "repeats", "weights_note", "roof",
               "rungs", "left_out", "wall_s", "rss_before_bytes", "rss_after_bytes", "measured_at", "compile_s",
               "versions")
RUNG_KEYS = ("size", "label", "parameters", "weight_bytes", "trained", "weights", "layers", "d_model", "heads",
             "kv_heads", "head_dim", "d_ff", "prefill", "decode", "nocache", "lean", "matmul_ms", "build_ms",
             "same_token", "prefill_matmul_ms", "shape_of", "lean_prefill", "recipe", "compile_ms", "timed", "curve",
             "decode_vs_prefill_per_token", "matmul_share", "cache_saves")
PASSES = ("prefill", "decode", "nocache", "lean", "lean_prefill", "recipe")  # a rung's Measured fields
PASS_KEYS = ("what", "q_len", "past", "tokens", "median_ms", "low_ms", "high_ms", "runs", "warmup_ms", "flops",
             "bytes_moved", "memory_ms", "compute_ms", "kind", "label", "ratio", "path", "side")


@dataclass(frozen=True)
class Measured:
    """One pass at one rung, measured, with its two lower bounds and the roofline's verdict."""

    what: str  # "prefill", "decode", "decode (no cache)", "decode (lean)", "prefill (lean)", "decode (recipe)"
    q_len: int  # positions fed: s for a prefill, 1 for a cached decode step, s + 1 with the cache off
    past: int  # positions already cached before the pass
    tokens: int  # tokens the pass is charged for: a prefill's s prompt tokens, a decode step's one new token
    median_ms: float
    low_ms: float
    high_ms: float
    runs: int
    warmup_ms: float | None  # the first run, excluded from the median
    flops: float  # estimate (engine.forward.estimates)
    bytes_moved: float  # estimate
    memory_ms: float  # bytes moved / measured bandwidth
    compute_ms: float  # FLOPs / measured peak
    kind: str  # compute-bound · memory-bound · compute side · memory side · overhead-bound (roofline.verdict)
    label: str  # roofline.verdict's words, e.g. "overhead-bound (×4.0 above both bounds)"
    ratio: float  # measured / the larger bound
    path: str  # how it ran: the Stepper's eager pass, the lean path (engine.forward.lean), the recipe
    side: str = ""  # 'memory' / 'compute': its intensity against the device's ridge (a prediction; roofline.Verdict)

    @classmethod
    def of(cls, what: str, q_len: int, past: int, tokens: int, timing, flops: float, bytes_moved: float,
           roof: DeviceRoof, path: str) -> "Measured":
        """A pass's engine.forward.run.Timing and estimates, labelled by the existing rule (roofline.verdict)."""
        v = verdict(timing.forward_ms, flops, bytes_moved, roof)
        return cls(what=what, q_len=q_len, past=past, tokens=tokens, median_ms=timing.forward_ms,
                   low_ms=timing.low_ms, high_ms=timing.high_ms, runs=timing.repeats, warmup_ms=timing.warmup_ms,
                   flops=flops, bytes_moved=bytes_moved, memory_ms=v.memory_ms, compute_ms=v.compute_ms,
                   kind=v.kind, label=v.label, ratio=v.ratio, path=path, side=v.side)

    def on(self, roof: DeviceRoof, matmul_share: float | None = None) -> "Measured":
        """The same measurement placed on another roof (the ladder's final one): bounds and label again."""
        v = verdict(self.median_ms, self.flops, self.bytes_moved, roof, matmul_share)
        return replace(self, memory_ms=v.memory_ms, compute_ms=v.compute_ms, kind=v.kind, label=v.label,
                       ratio=v.ratio, side=v.side)

    @property
    def per_token_ms(self) -> float:
        return self.median_ms / self.tokens

    @property
    def intensity(self) -> float:
        """FLOP per byte moved (both estimates): where the pass sits on the roofline's x axis."""
        return self.flops / self.bytes_moved

    @property
    def achieved(self) -> float:
        """FLOP/s: the FLOPs estimate over the measured median."""
        return self.flops / (self.median_ms / 1e3)

    @property
    def bound_ms(self) -> float:
        """The larger of the two lower bounds: the one the label names."""
        return max(self.memory_ms, self.compute_ms)

    def spread(self) -> str:
        """'41.2 (39.8–44.0)': median and min–max, in ms."""
        digits = 1 if self.median_ms >= 10 else 2 if self.median_ms >= 1 else 3
        return f"{self.median_ms:.{digits}f} ({self.low_ms:.{digits}f}–{self.high_ms:.{digits}f})"


def short_verdict(m: Measured) -> str:
    """A pass's verdict in a table cell: its kind and its time over the bound that names it ('memory-bound ×1.18',
    'overhead-bound ×5.01', 'overhead-bound ×2305'); the label says the same in words."""
    return f"{m.kind} {times(m.ratio)}"


@dataclass(frozen=True)
class RungResult:
    """One rung: what it is, and its four passes."""

    size: str  # as asked ("own", "110M")
    label: str  # its exact count, short ("112M")
    parameters: int
    weight_bytes: int
    trained: bool  # the loaded model itself; otherwise random weights, for timing only
    weights: str  # in words: rungs.TRAINED_WEIGHTS or rungs.RANDOM_WEIGHTS
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int | None
    prefill: Measured
    decode: Measured
    nocache: Measured
    lean: Measured | None  # the lean decode path (CUDA), or None where it was not timed
    matmul_ms: float  # the decode step's weight matrices multiplied alone (topics.ladder.profile.matmuls_alone)
    build_ms: float  # building the rung (random init), apart from every timing
    same_token: bool  # cache on and off chose the same next token
    prefill_matmul_ms: float | None = None  # the prefill's weight matrices alone, s rows (None: not timed)
    shape_of: str | None = None  # the published model whose shape the rung is ("Llama-3-8B"); None: grown or own
    lean_prefill: Measured | None = None  # the lean prefill (compiled, every position at once), where timed
    recipe: Measured | None = None  # transformers' own recipe's decode step (static cache + torch.compile), where timed
    compile_ms: dict | None = None  # pass -> its compile and warm-up ms (never in a step's time), where compiled
    timed: int = 1  # times the rung was measured: more than 1 when its repeats spread wide and it was timed again
    curve: Curve | None = None  # the lean pass over n = 1, 2, 4, … rows (topics/ladder/curve.py), where timed

    @property
    def spread(self) -> float:
        """The wider of its prefill's and its decode's repeats: slowest timed run over fastest (1.0: steady)."""
        return max((m.high_ms / m.low_ms if m.low_ms > 0 else 1.0) for m in (self.prefill, self.decode))

    @property
    def decode_vs_prefill_per_token(self) -> float:
        """How many times dearer one decoded token is than one prompt token of the prefill."""
        return self.decode.per_token_ms / self.prefill.per_token_ms

    @property
    def matmul_share(self) -> float:
        """The matmuls' share of the cached decode step (capped at 1: two timings taken apart can disagree)."""
        return min(1.0, self.matmul_ms / self.decode.median_ms)

    @property
    def prefill_matmul_share(self) -> float | None:
        """The prefill's matmuls' share of it (capped at 1), where they were timed alone."""
        return None if self.prefill_matmul_ms is None else min(1.0, self.prefill_matmul_ms / self.prefill.median_ms)

    @property
    def cache_saves(self) -> float:
        """Cache-off step over cache-on step: what the cache buys at this size and context."""
        return self.nocache.median_ms / self.decode.median_ms

    def on(self, roof: DeviceRoof) -> "RungResult":
        """Every pass of the rung placed on `roof` (the readable decode step's label with its matmuls' share)."""
        moved = {name: getattr(self, name).on(roof) for name in PASSES if getattr(self, name)}
        moved["decode"] = self.decode.on(roof, self.matmul_share)
        return replace(self, **moved, curve=self.curve.on(roof) if self.curve else None)

    @property
    def lean_gap(self) -> float | None:
        """decode ÷ prefill per token on the lean path (its decode step, its prefill of s tokens), where both were
        timed: the gap where the hardware, not Python, sets both times."""
        if self.lean is None or self.lean_prefill is None:
            return None
        return self.lean.per_token_ms / self.lean_prefill.per_token_ms

    @property
    def lean_cache_saves(self) -> float | None:
        """What the cache saves on the lean path: its prefill of s tokens (a cache-off step feeds s + 1 positions,
        all at once) over its cached decode step, where both were timed."""
        if self.lean is None or self.lean_prefill is None:
            return None
        return self.lean_prefill.median_ms / self.lean.median_ms

    @property
    def lean_over_recipe(self) -> float | None:
        """The lean decode step's median over the recipe's, timed in the same run (≤ 1: no slower)."""
        return self.lean.median_ms / self.recipe.median_ms if self.lean and self.recipe else None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in PASSES:
            d[name] = None if d[name] is None else asdict(d[name])
        d["curve"] = self.curve.to_dict() if self.curve else None
        return d | {"decode_vs_prefill_per_token": self.decode_vs_prefill_per_token,
                    "matmul_share": self.matmul_share, "cache_saves": self.cache_saves}


@dataclass(frozen=True)
class Ladder:
    """Every rung on one device, placed on the roofline probed there under the same thread count."""

    model: str  # the loaded model the rungs grow from
    family: str  # its architecture (every rung's)
    device: str  # physics.machine.describe, with the threads the ladder used
    dtype: str
    threads: int  # torch threads every pass and the probe ran with
    tokens: int  # s: the prefill's length, and the decode step's context
    prompt: str  # what the s tokens were
    repeats: int  # timed runs per pass after the warm-up
    weights_note: str  # rungs.RANDOM_WEIGHTS: said wherever a rung is shown
    roof: DeviceRoof
    rungs: tuple[RungResult, ...]
    left_out: tuple[str, ...]  # default sizes that would not fit this device's memory
    wall_s: float  # the whole ladder: probe, builds and every pass
    rss_before_bytes: int  # the process's resident memory before and after (0 where it cannot be read)
    rss_after_bytes: int
    measured_at: str  # ISO time
    compile_s: float = 0.0  # of wall_s: compiling the lean path and the recipe (every rung's compile_ms)
    versions: dict | None = None  # python, torch, transformers, CUDA where it ran (a recorded ladder says them)
    recorded: bool = False  # read back from a file (assets/): a recording of another machine, named as one

    def on(self, roof: DeviceRoof) -> "Ladder":
        """Every rung placed on `roof` (this server's roof as it stands now: a later probe may have tightened it)."""
        return replace(self, roof=roof, rungs=tuple(r.on(roof) for r in self.rungs))

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "recorded"}
        d["roof"] = asdict(self.roof) | {"ridge": self.roof.ridge}
        d["rungs"] = [r.to_dict() for r in self.rungs]
        d["left_out"] = list(self.left_out)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Ladder":
        """A ladder read back from its JSON (a recorded one in assets/, or a --json file); every pass labelled again
        from its measured times and the ladder's roof, so a file recorded under an older rule says what the rule
        says now."""
        elem = d["roof"].get("elem_bytes") or ELEM_BYTES.get(d.get("dtype"), 4.0)  # older files: the ladder's dtype
        roof = DeviceRoof(**{k: d["roof"][k] for k in ("name", "peak_flops", "bandwidth", "measured")},
                          bandwidths=tuple((int(b), float(r)) for b, r in d["roof"].get("bandwidths", ())),
                          elem_bytes=float(elem), probes=int(d["roof"].get("probes", 1)))
        keep = {f.name for f in fields(RungResult)}
        passes = {f.name for f in fields(Measured)}
        rungs = []
        for r in d["rungs"]:
            r = {k: v for k, v in r.items() if k in keep}
            for name in PASSES:
                r[name] = None if r.get(name) is None else Measured(**{k: v for k, v in r[name].items() if k in passes})
            r["curve"] = None if r.get("curve") is None else Curve.from_dict(r["curve"], roof)
            rungs.append(RungResult(**r).on(roof))  # labelled by today's rule (roofline.verdict), not the file's
        later = {"compile_s", "versions"}  # fields a ladder recorded before them lacks: their defaults
        top = {f.name: d[f.name] for f in fields(cls) if f.name not in {"roof", "rungs", "left_out", "recorded"} | later}
        top |= {name: d[name] for name in later if name in d}
        return cls(**top, roof=roof, rungs=tuple(rungs), left_out=tuple(d.get("left_out", ())))

    def frame(self) -> pd.DataFrame:
        """One row per rung: the table a page shows (ms are medians with min–max; bounds are estimates).

        The first eight columns are the story and fit a 1280x720 projector: each pass's time and what bounds it (its
        kind and how many times its bound it took, short), what a decoded token costs against a prompt token, what the
        cache saves. Every other number follows, to the right, and the verdicts in full words come last."""
        rows = []
        for r in self.rungs:
            rows.append({
                "size": r.label, "weights": "trained" if r.trained else "random (timing only)",
                "prefill ms (min–max)": r.prefill.spread(), "prefill is (× its bound)": short_verdict(r.prefill),
                "decode ms (min–max)": r.decode.spread(), "decode is (× its bound)": short_verdict(r.decode),
                "decode ÷ prefill per token": round(r.decode_vs_prefill_per_token, 1),
                "cache saves ×": round(r.cache_saves, 1),
                # the rest of the numbers, to the right
                "parameters": r.parameters, "weight bytes": human_bytes(r.weight_bytes),
                "prefill compute bound ms": round(r.prefill.compute_ms, 3),
                "decode memory bound ms": round(r.decode.memory_ms, 3),
                "no-cache decode ms (min–max)": r.nocache.spread(), "no-cache decode is (× its bound)": short_verdict(r.nocache),
                "prefill ms per token": round(r.prefill.per_token_ms, 3),
                "decode ms per token": round(r.decode.per_token_ms, 3),
                "matmul share of decode": f"{r.matmul_share:.0%}",
                "prefill matmuls alone ms": None if r.prefill_matmul_ms is None else round(r.prefill_matmul_ms, 1),
                **({"lean decode ms (min–max)": r.lean.spread(), "lean decode is (× its bound)": short_verdict(r.lean),
                    "lean path": r.lean.path} if r.lean else {}),
                **({"lean prefill ms (min–max)": r.lean_prefill.spread(),
                    "lean prefill is (× its bound)": short_verdict(r.lean_prefill)} if r.lean_prefill else {}),
                **({"lean decode ÷ prefill per token": round(r.lean_gap, 1),
                    "lean: cache saves ×": round(r.lean_cache_saves, 2)} if r.lean_gap else {}),
                **({"recipe decode ms (min–max)": r.recipe.spread(), "lean ÷ recipe": round(r.lean_over_recipe, 2)}
                   if r.recipe and r.lean else {}),
                **({"compile s": round(sum(r.compile_ms.values()) / 1e3, 1)} if r.compile_ms else {}),
                "prefill, in words": r.prefill.label, "decode, in words": r.decode.label,
                "no-cache decode, in words": r.nocache.label,
            })
        return pd.DataFrame(rows)

    def paths_frame(self) -> pd.DataFrame:
        """The table the Scale page shows: one row per rung and path, each naming the path that ran it, the lean
        pass's row first where a rung has one (there the hardware sets the time). A pass a path did not time says
        so in words, never as an empty cell."""
        rows = []
        for r in reversed(self.rungs):  # the big rung first: the one a class asks about
            weights = "trained" if r.trained else "random"
            if r.lean:
                pre = r.lean_prefill
                rows.append({"size": r.label, "path": "lean (compiled)", "weights": weights,
                             "prefill ms": pre.spread() if pre else "not timed",
                             "prefill is": short_verdict(pre) if pre else "–",
                             "decode ms": r.lean.spread(), "decode is": short_verdict(r.lean),
                             "decode ÷ prefill / token": f"×{r.lean_gap:.1f}" if r.lean_gap else "–",
                             "cache saves": times(r.lean_cache_saves) if r.lean_cache_saves else "–"})
            rows.append({"size": r.label, "path": "readable (eager)", "weights": weights,
                         "prefill ms": r.prefill.spread(), "prefill is": short_verdict(r.prefill),
                         "decode ms": r.decode.spread(), "decode is": short_verdict(r.decode),
                         "decode ÷ prefill / token": f"×{r.decode_vs_prefill_per_token:.1f}",
                         "cache saves": times(r.cache_saves)})
        return pd.DataFrame(rows)

    def text_table(self) -> str:
        """The table for a terminal: one line per rung."""
        head = (f"{'size':>14} {'parameters':>13} {'weights':>9} {'prefill ms (min-max)':>24} {'x bound':>7} {'prefill is':<16} "
                f"{'decode ms (min-max)':>22} {'x bound':>7} {'decode is':<16} {'no-cache ms':>12} "
                f"{'ms/tok pre':>10} {'ms/tok dec':>10} {'dec/pre':>7} {'matmul':>6}")
        lines = [head]
        for r in self.rungs:
            lines.append(
                f"{r.label:>14} {r.parameters:>13,} {'trained' if r.trained else 'random':>9} {r.prefill.spread():>24} "
                f"{r.prefill.ratio:>7.2f} {r.prefill.kind:<16} {r.decode.spread():>22} {r.decode.ratio:>7.2f} "
                f"{r.decode.kind:<16} {r.nocache.median_ms:>12.1f} {r.prefill.per_token_ms:>10.3f} "
                f"{r.decode.per_token_ms:>10.3f} {r.decode_vs_prefill_per_token:>7.1f} {r.matmul_share:>6.0%}")
        lean = [r for r in self.rungs if r.lean or r.lean_prefill or r.recipe]
        if lean:
            lines += ["", f"the lean path ({lean[-1].lean.path if lean[-1].lean else 'not timed'}); compile apart:",
                      f"{'size':>14} {'lean prefill ms':>22} {'x bound':>7} {'is':<16} {'lean decode ms':>20} "
                      f"{'x bound':>7} {'is':<16} {'recipe decode ms':>20} {'lean/recipe':>11} {'compile s':>9}"]
            def ratio(x: float | None) -> str:  # a pass not timed shows "-", never a ratio of 0
                return "-" if x is None else f"{x:.2f}"

            for r in lean:
                pre, dec, rec = r.lean_prefill, r.lean, r.recipe
                lines.append(
                    f"{r.label:>14} {pre.spread() if pre else '-':>22} {ratio(pre and pre.ratio):>7} "
                    f"{pre.kind if pre else '-':<16} {dec.spread() if dec else '-':>20} {ratio(dec and dec.ratio):>7} "
                    f"{dec.kind if dec else '-':<16} {rec.spread() if rec else '-':>20} "
                    f"{ratio(r.lean_over_recipe):>11} {sum((r.compile_ms or {}).values()) / 1e3:>9.1f}")
        return "\n".join(lines)
