"""`python -m engine gpu-check --json OUT`: every GPU figure issue 34 asks for, in one run, each beside its target.

On a CUDA machine, in this order (each part's wall time printed):

    tests         the gpu tier in a subprocess (tests/test_gpu.py: lean tokens equal the readable path's, the
                  decode step captured as a CUDA graph, the race exact at the defaults over 512 tokens)
    race          the bundled model in fp32 at the Race page's defaults, cache on and off over its 512 positions
    ladder        `engine ladder --device cuda`: real shapes in bf16, the lean path compiled, transformers' recipe
                  beside it at the largest rung; the prefill sweep runs inside it at the sweep's rung (one build,
                  one compile), and its time is not the ladder's
    race at a rung  a real shape on the lean path, cache on and off

The JSON is the ladder's (topics/ladder/record.py's keys, so it can be shipped as assets/ladder_gpu.json
and read back by ladder.recorded()) with one more key, "gpu_check": the sweep, both races, the tests, every
target with its figure, the device, date and versions. Exit status: 0 when every target holds, 1 when one
does not, 2 when it cannot run (no GPU). These are benchmarks: a target that does not hold is reported, not
hidden, and the figures are kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone

from engine.errors import StepError
from engine.paths import ROOT

LADDER_BUDGET_S = 240.0  # the whole GPU ladder, compile included
CHECK_BUDGET_S = 300.0  # all of gpu-check
SWEEP_BUDGET_S = 30.0  # the sweep's timed passes (its compile apart)
RACE_RUNG = "TinyLlama-1.1B"
RACE_RUNG_TOKENS = 256


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise StepError("gpu-check needs a CUDA GPU, and there is none here: run it on a GPU machine "
                        "(the CPU's figures come from `python -m engine ladder`).")


def run_tests(log=print) -> dict:
    """The gpu tier, in its own process (its GPU memory goes with it): passed or not, and pytest's last line."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider", "-m", "gpu",
           "tests/test_gpu.py"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = [line for line in (proc.stdout + proc.stderr).strip().splitlines() if line.strip()]
    out = {"command": " ".join(cmd[1:]), "passed": proc.returncode == 0, "summary": lines[-1] if lines else "",
           "wall_s": time.perf_counter() - t0}
    if not out["passed"]:
        out["output_tail"] = "\n".join(lines[-40:])
    log(f"tests: {out['summary']} ({out['wall_s']:.0f} s)")
    return out


def race_at_defaults(lm, log=print) -> dict:
    """The Race page's defaults on the bundled model (its dtype: fp32), cache on and off, every position used."""
    from engine.forward.sampling import Sampling
    from engine.generate.compare import compare

    t0 = time.perf_counter()
    prompts = json.loads((ROOT / "assets" / "prompts.json").read_text(encoding="utf-8"))
    prompt = prompts[0]["prompt"]
    total = lm.spec.max_positions
    new = total - len(lm.tokenizer(prompt)["input_ids"])
    rep = compare(lm, prompt, new, sampling=Sampling(), stop_on_eos=False)
    out = {"prompt": prompt, "total_tokens": total, "new_tokens": new, "dtype": lm.dtype_name,
           "identical": rep["identical"], "first_divergence_step": rep["first_divergence_step"],
           "max_logit_diff": rep["max_logit_diff"], "speedup_total": rep["speedup"]["total_ratio"],
           "speedup_median_step": rep["speedup"]["median_ratio"], "path": "the Stepper's (readable)",
           "wall_s": time.perf_counter() - t0}
    log(f"race at the defaults ({lm.dtype_name}, {total} tokens): identical {out['identical']}, cache saves "
        f"x{out['speedup_total']:.1f} in total ({out['wall_s']:.0f} s)")
    return out


def race_at_rung(lm, shape: str = RACE_RUNG, new_tokens: int = RACE_RUNG_TOKENS, log=print) -> dict:
    """A real shape (bf16, random weights) raced on the lean path: where, on a GPU, the cache pays."""
    import torch

    from engine import device as dev
    from engine.load.rungs import rung_model
    from engine.load.rungs import timing_dtype
    from topics.race.measure import lean_compare

    t0 = time.perf_counter()
    prompts = json.loads((ROOT / "assets" / "prompts.json").read_text(encoding="utf-8"))
    rlm = rung_model(lm, shape, dtype=timing_dtype(lm))
    try:
        rep = lean_compare(rlm, prompts[0]["prompt"], new_tokens)
        out = {"shape": shape, "weights": rlm.spec.source, "dtype": rlm.dtype_name, "new_tokens": new_tokens,
               "identical": rep.identical, "first_divergence_step": rep.first_divergence_step,
               "speedup_total": rep.speedup.total_ratio, "speedup_median_step": rep.speedup.median_ratio,
               "cache_total_ms": rep.speedup.cache_total_ms, "nocache_total_ms": rep.speedup.nocache_total_ms,
               "how": dict(rep.how), "compile_ms": dict(rep.compile_ms)}
    finally:
        del rlm
        dev.release_memory()
        torch._dynamo.reset()  # the rung's compiled graphs hold its memory
    out["wall_s"] = time.perf_counter() - t0
    log(f"race at {shape} (lean, {out['dtype']}, {new_tokens} tokens): cache saves x{out['speedup_total']:.1f}, "
        f"identical {out['identical']} ({out['wall_s']:.0f} s, compile included)")
    return out


def _target(what: str, measured: str, holds: bool | None) -> dict:
    return {"target": what, "measured": measured, "holds": holds}


def targets(lad, sweep, ladder_s: float, race: dict | None, rung_race: dict | None, tests: dict | None,
            total_s: float | None) -> list[dict]:
    """Issue 34's GPU acceptance, each with this run's figure (None: not measured in this run)."""
    out = []
    big = [r for r in lad.rungs if r.shape_of and r.parameters >= 7e9]
    one = [r for r in lad.rungs if r.shape_of and 0.8e9 <= r.parameters < 2e9]
    for rungs, bound, name in ((big, 1.5, "≥ 7 B"), (one, 2.0, "~1 B")):
        for r in rungs or [None]:
            what = f"{name} real shape{f' ({r.label})' if r else ''}: lean decode ≤ ×{bound} its memory bound, " \
                   "labelled memory-bound"
            if r is None or r.lean is None:
                out.append(_target(what, "not measured (no such rung, or no lean path)", None))
                continue
            out.append(_target(what, f"×{r.lean.ratio:.2f}, {r.lean.label} ({r.lean.median_ms:.2f} ms; bound "
                                     f"{r.lean.memory_ms:.2f} ms)", r.lean.ratio <= bound and r.lean.kind == "memory-bound"))
    for r in big or [None]:
        what = f"≥ 7 B{f' ({r.label})' if r else ''}: lean decode no slower than transformers' recipe, same run"
        if r is None or r.lean_over_recipe is None:
            out.append(_target(what, "not measured", None))
        else:
            out.append(_target(what, f"lean {r.lean.spread()} ms, recipe {r.recipe.spread()} ms: "
                                     f"×{r.lean_over_recipe:.3f}", r.lean_over_recipe <= 1.0))
    if sweep is None or sweep.parameters < 1e9:
        out.append(_target("≥ 1 B: a prefill with s ≥ 2× the ridge ≤ ×1.5 its compute bound, compute-bound",
                           "not measured (no sweep at ≥ 1 B)", None))
        out.append(_target("≥ 1 B: a prefill with s ≤ half the ridge labelled memory-bound", "not measured", None))
    else:
        ridge = sweep.ridge
        high = [p for p in sweep.points if p.intensity >= 2 * ridge]
        low = [p for p in sweep.points if p.intensity <= ridge / 2]
        words = ", ".join(f"s={p.s} ×{p.ratio:.2f} {p.kind}" for p in high) or "no s that far right was timed"
        out.append(_target(f"≥ 1 B ({sweep.rung}): a prefill with s ≥ 2× the ridge ({ridge:.0f} FLOP/byte) ≤ ×1.5 "
                           "its compute bound, compute-bound", words,
                           bool(high) and all(p.kind == "compute-bound" for p in high)
                           and min(p.ratio for p in high) <= 1.5))
        words = ", ".join(f"s={p.s} ×{p.ratio:.2f} {p.kind}" for p in low) or "no s that far left was timed"
        out.append(_target(f"≥ 1 B ({sweep.rung}): a prefill with s ≤ half the ridge labelled memory-bound", words,
                           bool(low) and all(p.kind == "memory-bound" for p in low)))
        crossing = sweep.crossing_s
        out.append(_target("the crossing: where intensity meets the ridge (an H200 in bf16: s ≈ 180)",
                           f"predicted s ≈ {crossing:.0f}" if crossing else "not between two timed lengths", None)
                   | {"measured_crossing_s": sweep.measured_crossing_s})
    out.append(_target(f"the whole GPU ladder, compile included, ≤ {LADDER_BUDGET_S / 60:.0f} min",
                       f"{ladder_s:.0f} s (compile {lad.compile_s:.0f} s of it)", ladder_s <= LADDER_BUDGET_S))
    if race is not None:
        out.append(_target(f"the race at the defaults ({race['dtype']}): identical tokens over "
                           f"{race['total_tokens']} tokens", f"identical {race['identical']}; cache saves "
                           f"×{race['speedup_total']:.1f}", race["identical"]))
    if rung_race is not None:
        out.append(_target(f"the race at a rung ({rung_race['shape']}, lean path): the cache pays",
                           f"×{rung_race['speedup_total']:.1f} in total, identical {rung_race['identical']}",
                           rung_race["speedup_total"] > 1.0))
    if tests is not None:
        out.append(_target("the gpu tests pass (lean tokens, CUDA graph captured, the race exact)", tests["summary"],
                           tests["passed"]))
    if total_s is not None:
        out.append(_target(f"gpu-check ≤ {CHECK_BUDGET_S / 60:.0f} min", f"{total_s:.0f} s", total_s <= CHECK_BUDGET_S))
    return out


def table(rows: list[dict]) -> str:
    """Each target beside its figure, for a terminal."""
    mark = {True: "yes", False: "NO", None: "-"}
    width = max(len(r["target"]) for r in rows)
    lines = [f"{'target':<{width}}  holds  measured"]
    lines += [f"{r['target']:<{width}}  {mark[r['holds']]:<5}  {r['measured']}" for r in rows]
    return "\n".join(lines)


def gpu_check(sizes=None, sweep_shape: str | None = None, race_shape: str = RACE_RUNG, tests: bool = True,
              races: bool = True, log=print, device: str = "cuda", race_tokens: int = RACE_RUNG_TOKENS,
              sweep_lengths=None) -> tuple[dict, list[dict]]:
    """Run everything (see the module docstring); return the JSON document and the targets.

    device="cpu" is a dry run of the same code with small sizes (a test's, or before a GPU session).
    """
    import torch

    from engine.load.load import load_model
    from topics.ladder.measure import measure_ladder, versions
    from topics.ladder.sweep import SWEEP_SHAPE, prefill_sweep

    if device == "cuda":
        require_cuda()
    started = time.perf_counter()
    test_result = run_tests(log) if tests else None
    lm = load_model("default", device=device)  # fp32: the bundled models' default on every device
    race = race_at_defaults(lm, log) if races else None
    want = sweep_shape or SWEEP_SHAPE["cuda"]
    swept = {}

    def sweep_here(rung, rlm, roof) -> None:
        if want.lower() in (rung.label.lower(), str(rung.size).lower()):
            t0 = time.perf_counter()
            log(f"prefill sweep at {rung.label} ({rlm.dtype_name})…")
            swept["sweep"] = prefill_sweep(rlm, roof=roof, name=rung.label, weights=rung.weights,
                                           budget_s=SWEEP_BUDGET_S, **({"lengths": sweep_lengths} if sweep_lengths else {}))
            swept["wall_s"] = time.perf_counter() - t0
        torch._dynamo.reset()  # this rung's compiled graphs go with its weights

    sizes = list(sizes) if sizes else None
    if sizes and want not in [str(s) for s in sizes]:
        log(f"(the sweep's rung {want} is not among --sizes: no sweep)")
    log("ladder (real shapes, bf16, the lean path compiled at every rung)…")
    t0 = time.perf_counter()
    lad = measure_ladder(lm, sizes, also=sweep_here, lean=True,
                         on_progress=lambda f, text: log(f"  {f:4.0%} {text}"))
    ladder_s = time.perf_counter() - t0 - swept.get("wall_s", 0.0)
    sweep = swept["sweep"].on(lad.roof) if "sweep" in swept else None
    log(lad.text_table())
    rung_race = race_at_rung(lm, race_shape, race_tokens, log=log) if races else None
    total_s = time.perf_counter() - started
    rows = targets(lad, sweep, ladder_s, race, rung_race, test_result, total_s)
    doc = lad.to_dict() | {"gpu_check": {
        "device": lad.device, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(), "wall_s": total_s, "ladder_wall_s": ladder_s,
        "sweep": sweep.to_dict() if sweep else None, "sweep_wall_s": swept.get("wall_s"),
        "race": race, "race_at_rung": rung_race, "tests": test_result, "targets": rows}}
    return doc, rows
