"""`python -m engine gpu-check --json OUT`: every GPU figure the physics asks for, in one run, each beside its target.

On a CUDA machine, in this order (each part's wall time printed):

    ladder        `engine ladder --device cuda` at real shapes in bf16 (default: the bundled model and Llama-3-8B):
                  the readable path at every rung; at the largest, the lean pass (engine.forward.lean: gpt-fast's
                  Llama over the rung's weights, compiled whole) over n = 1 … rows, a prefill of n tokens and a
                  decode step for n sequences at the ladder's context (topics/ladder/curve.py; a batch whose K/V
                  would not fit is left out, and says so), its decode step, and transformers' own recipe beside
                  it, timed in the same run on one reused static cache; the bounds probed in every round
    tests         (--tests) the gpu tier in a subprocess (tests/test_gpu.py)
    races         (--races) the bundled model at the Race page's defaults, and a real shape on the compiled path
    bytes         (--bytes) bytes are time at Llama-3-8B's shape (topics/bytes/): the bf16 model's decode step and
                  prefill beside int8's and int4's weight-only, and the bf16 decode step against context (no damage:
                  that is the bundled models', on a CPU)

The JSON is the ladder's (topics/ladder/record.py's keys, so it can be shipped as assets/ladder_gpu.json
and read back by recorded_ladders()) with one more key, "gpu_check": every target with its figure, the races and
tests where run, the device, date and versions. Exit status: 0 when every target holds, 1 when one does not, 2
when it cannot run (no GPU). These are benchmarks: a target that does not hold is reported, not hidden, and the
figures are kept. The JSON is written as soon as the ladder is measured, then again with the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

from benchmarks.records import GpuCheck, RaceAtDefaults, RaceAtRung, Target, TestRun
from engine.errors import StepError
from engine.paths import ROOT
from engine.timing import now

LADDER_BUDGET_S = 240.0  # the whole GPU ladder, compile included
CHECK_BUDGET_S = 300.0  # all of gpu-check
SIZES = ("own", "Llama-3-8B")  # the bundled model (overhead-bound: what the class steps through) and a real 8 B shape
RACE_RUNG = "TinyLlama-1.1B"
RACE_RUNG_TOKENS = 256


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise StepError("gpu-check needs a CUDA GPU, and there is none here: run it on a GPU machine "
                        "(the CPU's figures come from `python -m engine ladder`).")


def run_tests(log=print) -> TestRun:
    """The gpu tier, in its own process (its GPU memory goes with it): passed or not, and pytest's last line."""
    t0 = now()
    cmd = [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-m", "gpu",
           "tests/test_gpu.py"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if line.strip()]
    passed = proc.returncode == 0
    out = TestRun(" ".join(cmd[1:]), passed, lines[-1] if lines else "", now() - t0,
                  None if passed else "\n".join(lines[-40:]))
    log(f"tests: {out.summary} ({out.wall_s:.0f} s)")
    return out


def race_at_defaults(lm, log=print) -> RaceAtDefaults:
    """The Race page's defaults on the bundled model (its dtype: fp32), cache on and off, every position used."""
    from engine.forward.sampling import Sampling
    from engine.generate.compare import compare

    t0 = now()
    prompts = json.loads((ROOT / "assets" / "prompts.json").read_text(encoding="utf-8"))
    prompt = prompts[0]["prompt"]
    total = lm.spec.max_positions
    new = total - len(lm.tokenizer(prompt)["input_ids"])
    rep = compare(lm, prompt, new, sampling=Sampling(), stop_on_eos=False)
    out = RaceAtDefaults(prompt=prompt, total_tokens=total, new_tokens=new, dtype=lm.dtype_name,
                         identical=rep.identical, first_divergence_step=rep.first_divergence_step,
                         max_logit_diff=rep.max_logit_diff, speedup_total=rep.speedup.total_ratio,
                         speedup_median_step=rep.speedup.median_ratio, path="the Stepper's (readable)",
                         wall_s=now() - t0)
    log(f"race at the defaults ({lm.dtype_name}, {total} tokens): identical {out.identical}, cache saves "
        f"x{out.speedup_total:.1f} in total ({out.wall_s:.0f} s)")
    return out


def race_at_rung(lm, shape: str = RACE_RUNG, new_tokens: int = RACE_RUNG_TOKENS, log=print) -> RaceAtRung:
    """A real shape (bf16, random weights) raced on the lean path: where, on a GPU, the cache pays."""
    import torch

    from physics import machine
    from physics.rungs import rung_model, timing_dtype
    from topics.race.measure import lean_compare

    t0 = now()
    prompts = json.loads((ROOT / "assets" / "prompts.json").read_text(encoding="utf-8"))
    rlm = rung_model(lm, shape, dtype=timing_dtype(lm))
    try:
        weights, dtype = rlm.spec.source, rlm.dtype_name
        rep = lean_compare(rlm, prompts[0]["prompt"], new_tokens)
    finally:
        del rlm
        machine.release_memory()
        torch.compiler.reset()  # the rung's compiled graphs hold its memory
    out = RaceAtRung(shape=shape, weights=weights, dtype=dtype, new_tokens=new_tokens, identical=rep.identical,
                     first_divergence_step=rep.first_divergence_step, speedup_total=rep.speedup.total_ratio,
                     speedup_median_step=rep.speedup.median_ratio, cache_total_ms=rep.speedup.cache_total_ms,
                     nocache_total_ms=rep.speedup.nocache_total_ms, how=dict(rep.how),
                     compile_ms=dict(rep.compile_ms), wall_s=now() - t0)
    log(f"race at {shape} (lean, {out.dtype}, {new_tokens} tokens): cache saves x{out.speedup_total:.1f}, "
        f"identical {out.identical} ({out.wall_s:.0f} s, compile included)")
    return out


def bytes_check(lm, shape: str | None = None, contexts=None, tokens: int | None = None, rounds: int | None = None,
                compile: bool | None = None, log=print, deadline: float | None = None):
    """Bytes are time at a real shape, in bf16, on lm's device (topics.bytes.measure.record_gpu); a storage whose
    compiles would end past `deadline` (a `now()` time) is left out and said."""
    from topics.bytes import measure

    return measure.record_gpu(lm, shape, contexts, tokens, rounds, compile, on_point=lambda text: log(f"  {text}"),
                              command="python -m engine gpu-check --bytes", deadline=deadline)


def bytes_targets(rec) -> list[Target]:
    """Bytes are time on the GPU: int8 and int4 weight-only decode faster in proportion, their prefills do not; the
    decode step against context a line of the K/V's bytes over the bandwidth."""
    if rec is None:
        return []
    ref, out = rec.reference, []
    for storage, most in (("int8", 0.65), ("int4", 0.45)):
        got = rec.ratio(storage, "decode")
        out.append(Target(f"{storage} weight-only decode ≤ ×{most} the {ref}'s time",
                          "not measured" if got is None else f"×{got:.2f}", None if got is None else got <= most))
        got = rec.ratio(storage, "prefill")
        out.append(Target(f"{storage} weight-only prefill ≥ ×0.9 the {ref}'s (not a decode-sized win)",
                          "not measured" if got is None else f"×{got:.2f}", None if got is None else got >= 0.9))
    line = rec.line()
    out.append(Target("decode against context: the fitted slope within ±15 % of the K/V bytes over the bandwidth",
                      "not measured" if line is None else f"×{line.slope_off:.2f} its prediction, crossing at "
                      f"{line.crossing:,.0f} positions against {line.predicted_crossing:,.0f}",
                      None if line is None else line.slope_held))
    return out


def targets(lad, ladder_s: float, race: RaceAtDefaults | None, rung_race: RaceAtRung | None, tests: TestRun | None,
            total_s: float | None) -> list[Target]:
    """The GPU acceptance, each with this run's figure (None: not measured in this run)."""
    out = []
    roof = lad.roof
    big = next((r for r in reversed(lad.rungs) if r.parameters >= 7e9), None)
    label = f" ({big.label})" if big else ""
    what = f"≥ 7 B{label}: lean decode ≤ ×1.5 its memory bound"
    if big is None or big.lean is None:
        out.append(Target(what, "not measured (no such rung, or no lean path)", None))
    else:
        out.append(Target(what, f"×{big.lean.ratio:.2f}: {big.lean.label} ({big.lean.spread()} ms; bound "
                                f"{big.lean.memory_ms:.2f} ms)", big.lean.ratio <= 1.5))
    what = f"≥ 7 B{label}: lean decode faster than transformers' recipe timed beside it"
    if big is None or big.lean_over_recipe is None:
        out.append(Target(what, "not measured", None))
    else:
        out.append(Target(what, f"lean {big.lean.spread()} ms, recipe {big.recipe.spread()} ms: "
                                f"×{big.lean_over_recipe:.3f}", big.lean_over_recipe < 1.0))
    curve = big.curve if big else None
    out += curve_targets(curve, roof, label)
    out.append(Target(f"the whole GPU ladder, compile included, ≤ {LADDER_BUDGET_S / 60:.0f} min",
                      f"{ladder_s:.0f} s (compile {lad.compile_s:.0f} s of it)", ladder_s <= LADDER_BUDGET_S))
    if race is not None:
        out.append(Target(f"the race at the defaults ({race.dtype}): identical tokens over "
                          f"{race.total_tokens} tokens", f"identical {race.identical}; cache saves "
                          f"×{race.speedup_total:.1f}", race.identical))
    if rung_race is not None:
        out.append(Target(f"the race at a rung ({rung_race.shape}, compiled path): the cache pays",
                          f"×{rung_race.speedup_total:.1f} in total, identical {rung_race.identical}",
                          rung_race.speedup_total > 1.0))
    if tests is not None:
        out.append(Target("the gpu tests pass (lean tokens, CUDA graph captured, the race exact)", tests.summary,
                          tests.passed))
    if total_s is not None:
        out.append(Target(f"gpu-check ≤ {CHECK_BUDGET_S / 60:.0f} min", f"{total_s:.0f} s", total_s <= CHECK_BUDGET_S))
    return out


KNEE_WITHIN = 1.5  # a measured knee within this factor of its prediction, either way
FAR_BOUND = 1.3  # a prefill past four ridges within this many times its compute bound


def _over_compute(curve, p) -> float:
    """A pass's time over its compute bound: the median of per-round ratios where the rounds were probed."""
    h = curve.held(p)
    return h.median if h is not None and p.bound == "compute" else p.median_ms / p.compute_ms


def curve_targets(curve, roof, label: str = "") -> list[Target]:
    """The pass over n rows' targets: a prefill past four predicted knees near its compute bound (every such pass
    said, and the one that meets the target named), and each kind's measured knee (where its flat level and slope
    meet) within ×1.5 of its own prediction, either way (the batch's adding every sequence's K/V read)."""
    out = []
    knee = curve.predicted_knee("prefill", roof) if curve else None
    far = [p for p in (curve.of("prefill") if curve else ()) if knee and p.rows >= 4 * knee]
    what = f"≥ 7 B{label}: a prefill pass of n ≥ 4× the predicted knee ≤ ×{FAR_BOUND:g} its compute bound"
    if not far:
        out.append(Target(what, "not measured (no such n timed)", None))
    else:
        # every such n is said; the target asks for one such pass: the nearest its bound decides, and is named
        ratios = [(_over_compute(curve, p), p) for p in far]
        said = "; ".join(f"n = {p.rows}: ×{r:.2f} ({p.median_ms:.2f} ms; bound {p.compute_ms:.2f} ms)"
                         for r, p in ratios)
        best, p = min(ratios, key=lambda rp: rp[0])
        meeting = [q.rows for r, q in ratios if r <= FAR_BOUND]
        met = (f"met by n = {', '.join(map(str, meeting))} (nearest its bound: n = {p.rows}, ×{best:.2f})" if meeting
               else f"no pass meets it (the nearest: n = {p.rows}, ×{best:.2f})")
        out.append(Target(what, f"{met}; each: {said}", best <= FAR_BOUND))
    for kind, words in (("prefill", "the prefill's"), ("batch", "the batched decode's (its K/V reads added)")):
        what = (f"≥ 7 B{label}: {words} measured knee (where its flat level and slope meet) within ×{KNEE_WITHIN:g} "
                f"of its predicted knee, either way")
        k = curve.knee(kind, roof) if curve else None
        if k is None or k.measured is None or not k.predicted:
            predicted = curve.predicted_knee(kind, roof) if curve else None
            guess = f"predicted ~{predicted:.0f}" if predicted else "no knee predicted at this context"
            out.append(Target(what, "not measured" if curve is None else
                              f"not timed in this run ({guess})" if k is None else
                              f"no measured knee within the rows timed ({guess})", None))
        else:
            out.append(Target(what, f"measured n ≈ {k.measured:.0f}, predicted ~{k.predicted:.0f} (×{k.off:.2f})",
                              k.within(KNEE_WITHIN)))
    return out


def table(rows: list[Target]) -> str:
    """Each target beside its figure, for a terminal."""
    mark = {True: "yes", False: "NO", None: "-"}
    width = max(len(r.target) for r in rows)
    lines = [f"{'target':<{width}}  holds  measured"]
    lines += [f"{r.target:<{width}}  {mark[r.holds]:<5}  {r.measured}" for r in rows]
    return "\n".join(lines)


def gpu_check(sizes=None, race_shape: str = RACE_RUNG, tests: bool = False, races: bool = False, log=print,
              device: str = "cuda", race_tokens: int = RACE_RUNG_TOKENS, json_path: str | None = None,
              tokens: int | None = None, compile: bool | None = None, curve_passes=None, bytes_: bool = False,
              bytes_shape: str | None = None, bytes_contexts=None, within: float | None = None) -> GpuCheck:
    """Run everything (see the module docstring); return its record (`to_dict()`: the JSON document).

    device="cpu" (with compile=False) is a dry run of the same code with small sizes (a test's, or before a GPU
    session). json_path: where the document is written as soon as the ladder is measured (a later part that runs
    out of time keeps it). within: seconds the whole run has (a lent GPU's call): the bytes part starts no
    storage's compiles that would end past them, less its timed rounds' share (topics.bytes.measure.deadline), and
    says which it left out.
    """
    from engine.load.load import load_model
    from topics.ladder.measure import measure_ladder, versions

    if device == "cuda":
        require_cuda()
    started = now()
    lm = load_model("default", device=device)  # fp32: the bundled models' default on every device
    log("ladder (real shapes, bf16; the lean pass over n rows and the recipe at the largest rung)…")
    t0 = now()
    lad = measure_ladder(lm, list(sizes) if sizes else list(SIZES), tokens=tokens, lean=False, recipe=None,
                         compile=compile, curve_passes=curve_passes, curve_kinds=("prefill", "batch"),
                         on_progress=lambda f, text: log(f"  {f:4.0%} {text}"))
    ladder_s = now() - t0
    log(lad.text_table())

    def document(race=None, rung_race=None, test_result=None, total_s=None, byt=None) -> GpuCheck:
        rows = targets(lad, ladder_s, race, rung_race, test_result, total_s) + bytes_targets(byt)
        return GpuCheck(lad, lad.device, datetime.now(timezone.utc).isoformat(timespec="seconds"), versions(), total_s,
                        ladder_s, race, rung_race, test_result, tuple(rows), byt)

    if json_path:
        from topics.cli_args import write_json

        write_json(json_path, document().to_dict())  # the JSON edge
        log(f"(the ladder is written to {json_path}; the rest follows)")
    race = race_at_defaults(lm, log) if races else None
    rung_race = race_at_rung(lm, race_shape, race_tokens, log=log) if races else None
    test_result = run_tests(log) if tests else None
    byt = None
    if bytes_:
        from topics.bytes.measure import GPU_SHAPE, deadline

        log(f"bytes are time at {bytes_shape or GPU_SHAPE}'s shape (bf16, then int8 and int4 weight-only; decode "
            "against context)…")
        byt = bytes_check(lm, bytes_shape, bytes_contexts, tokens, compile=compile, log=log,
                          deadline=deadline(started, within))
    return document(race, rung_race, test_result, now() - started, byt)
