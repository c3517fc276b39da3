"""A size ladder ("grow the model"): the same prefill and decode steps timed at several sizes of one family.

At 4 M parameters a decode step is overhead-bound: Python and operator dispatch set its time, many times above
both bounds. Grown to 50-200 M parameters the hardware sets it: decode waits on the weights streaming from
memory, prefill on the arithmetic. The ladder shows that in this device's own measurements.

At each rung (built by physics/rungs.py, then given back), every pass goes through the Stepper and
run_pass and is timed as every step here is (perf_counter around a device sync, the warm-up run apart,
median and min-max of `repeats` runs):

    prefill            the s prompt tokens on an empty cache              input_ids [batch=1, s]
    decode             one cached step at context s                       [batch=1, 1] on s cached positions
    decode (no cache)  the same step with the cache off                   [batch=1, s + 1], nothing cached
    matmuls alone      the decode step's weight matrices, nothing else    topics.ladder.profile.matmuls_alone
                       (and the prefill's, s rows each: how far the arithmetic alone sits above the compute bound)
    one pass, n rows   at the curve's rung (`curve_rung`: the first of at least 100 M parameters on a CPU, the
                       largest on a GPU), the lean pass (engine.forward.lean: gpt-fast's Llama over the rung's own
                       weights, compiled whole) over n = 1, 2, 4, … rows, a prefill of n tokens and a decode step
                       for n sequences (topics/ladder/curve.py): the roofline by experiment. Its one-row decode at
                       context s is the rung's lean decode, its prefill of s tokens the lean prefill
    lean path          CUDA, every other rung: the lean decode and prefill, compile time apart (a family the lean
                       pass does not cover: physics.compiled, transformers' own code compiled)
    the recipe         CUDA, the largest rung: transformers' own generate(cache_implementation="static"),
                       auto-compiled, timed beside the lean decode in the same run

On a GPU the rungs are published models' shapes (physics/shapes.py: SmolLM2-135M, TinyLlama-1.1B,
Llama-3-8B), measured in the device's fast dtype (bf16) whatever dtype the bundled model was loaded in, at
s = GPU_TOKENS (past a GPU's ridge in bf16, within the bundled model's 512 positions).

Each pass is placed on this device's roofline, probed before and after the rungs under the same thread count
(the best of the two: `best_roof`), and labelled by roofline.verdict. Every rung runs on the threads the app
serves the largest rung with (physics.machine.serving_threads: all cores but one, which the lecturer's browser on
the same machine needs; one on a 2-core VM), so a rung's step costs what the app's own pass of that size would.
(Two threads on two shared cores let a matmul's median rate drift well below its best: docs/measurements.md has
the figures.) The count is set only while the ladder holds
the model's lock, and restored before it lets go: no student's pass runs beside a timing, or sees the change. The
lock is held a measurement or a round at a time, never while a rung is built or compiled (inductor's kernels are
compiled for the same threads: torch_internals.inductor_cpu_threads), so a student's step waits seconds, not the
rung's minute.
A random rung's weights are stored [out, in], as a checkpoint stores them: the layout the lean pass's one-row
kernel streams (engine/forward/streamed.py), shared by the readable pass.

The prompt is the profile's demo text repeated, its first s tokens: real text the model's
tokenizer reads back (a random rung's own tokens are noise; the prompt's are not the point).

`ladder(lm, ...)` measures once per server, model, device and settings and keeps the result; two callers
asking at once share one build; `again=True` measures anew.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from typing import Callable

import torch

from engine import torch_internals
from engine.errors import StepError
from engine.load.loaded import LoadedModel
from engine.timing import now
from physics import machine
from physics.machine import serving_cores
from physics.rungs import RANDOM_WEIGHTS, Rung, build, model_name, plan, timing_dtype
from topics.ladder.record import Ladder, Measured, RungResult

TOKENS = 128  # s: the prefill's length and the decode step's context (a CPU in fp32: its ridge ~3.4 FLOP/byte,
# ~7 rows, measured on this project's 2-core EPYC; a prefill of 128 tokens sits far past it)
GPU_TOKENS = 384  # on a GPU: about 2x an H200's measured bf16 ridge (~177 FLOP/byte; a bf16 prefill's intensity is
# about s), past an H100's datasheet ridge (~295), so the prefill is on the compute side, and within the bundled
# model's 512 positions
REPEATS = 5  # timed runs per pass, after one warm-up run
PROBE_S = 1.5  # seconds for each half of a roofline probe (matmul, copy): the probe's own default
PROBE_SHARE = 0.05  # of the progress bar, for each of the two probes
RETIME_SPREAD = 1.4  # a rung whose prefill or decode repeats spread wider (slowest / fastest) is timed again...
CURVE_MIN = 100e6  # the curve's rung has at least this many parameters (a smaller step is launch- and Python-bound)
RETIMES = 1  # ...at most this many more times (a ladder on a busy server takes twice as long, not more), and its
#               steadiest measurement kept


def rss_bytes() -> int:
    """This process's resident memory now (Linux), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def default_tokens(device: torch.device) -> int:
    """s when none is given: TOKENS on a CPU, GPU_TOKENS on a GPU."""
    return GPU_TOKENS if device.type == "cuda" else TOKENS


def versions() -> dict[str, str]:
    """What ran the ladder: a recorded one says it."""
    import platform

    import transformers

    out = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}
    if torch.cuda.is_available():
        out["cuda"] = torch.version.cuda
    return out


def prompt_text(lm: LoadedModel, tokens: int) -> str:
    """The demo text repeated, cut to a text the tokenizer reads back as exactly `tokens` ids."""
    from topics.ladder.profile import DEMO_TEXT

    tok = lm.tokenizer
    ids = tok(" ".join([DEMO_TEXT] * (tokens // 8 + 4)))["input_ids"]
    for n in (tokens, tokens - 1, tokens + 1, tokens - 2, tokens + 2):
        text = tok.decode(ids[:n], skip_special_tokens=True)
        if len(tok(text)["input_ids"]) == tokens:
            return text
    raise StepError(f"No prompt of exactly {tokens} tokens could be made for this tokenizer: try another --tokens.")


def matmul_loops(parameters: float) -> int:
    """Loops per timed run of matmuls_alone: enough to be seen on a small model, few on a big one."""
    return max(2, min(20, round(50e6 / parameters)))


def best_roof(a, b):
    """The roof is the best this device did: the higher peak and, size by size, the higher bandwidth of two
    probes (DeviceRoof.best): a busy moment never loosens a bound."""
    return a.best(b)


def measure_rung(rung: Rung, rlm: LoadedModel, prompt: str, roof, repeats: int, lean: bool,
                 build_ms: float, compile: bool | None = None) -> RungResult:
    """The passes of one rung (see the module docstring), each labelled by roofline.verdict."""
    from engine.generate.stepper import Stepper
    from topics.ladder.profile import matmuls_alone

    eager = "the Stepper's pass (eager, dynamic cache)"
    if not rung.own and rlm.device.type == "cpu":
        eager = "the Stepper's pass (eager, dynamic cache)"
    on = Stepper(rlm, prompt, use_cache=True, record=False, repeats=repeats, max_new_tokens=2, stop_on_eos=False)
    pre, dec = on.prefill(), on.decode()  # [batch, s] on an empty cache; then [batch, 1] at context s
    matmul_ms = matmuls_alone(rlm, 1, repeats, loops=matmul_loops(rung.parameters))
    prefill_matmul_ms = matmuls_alone(rlm, pre.q_len, repeats, loops=2)  # the prefill's matmuls: s rows each
    off = Stepper(rlm, prompt, use_cache=False, record=False, repeats=1, max_new_tokens=2, stop_on_eos=False)
    off.prefill()  # set-up, run once: the step after it is the one timed
    off.repeats = repeats
    nc = off.decode()  # [batch, s + 1]: every position again
    s = pre.q_len
    lean_pass = lean_prefill = compile_ms = None
    if lean and lean_supports(rlm) is not None:  # a family gpt-fast's pass does not cover: transformers' own, compiled
        from physics.compiled import CompiledRecipe, time_decode, time_prefill

        ids = on.ids[:, :s]
        run = CompiledRecipe(rlm, s + 2, compile)
        timing, _ = time_prefill(rlm, ids, repeats, run=run)
        lean_prefill = Measured.of("prefill (lean)", s, 0, s, timing, pre.flops_estimate, pre.bytes_estimate, roof,
                                   run.describe("full"))
        timing, _ = time_decode(rlm, ids, repeats, run=run)
        lean_pass = Measured.of("decode (lean)", 1, s, 1, timing, dec.flops_estimate, dec.bytes_estimate, roof, run.how)
        compile_ms = dict(run.compile_ms)
        del run
    shape = rung.shape
    return RungResult(
        size=rung.size, label=rung.label, parameters=rung.parameters, weight_bytes=rung.weight_bytes(rlm.dtype),
        trained=rung.own, weights=rung.weights, layers=shape.layers, d_model=shape.d_model, heads=shape.heads,
        kv_heads=shape.kv_heads, head_dim=shape.head_dim, d_ff=shape.d_ff,
        prefill=Measured.of("prefill", s, 0, s, pre.timing, pre.flops_estimate, pre.bytes_estimate, roof, eager),
        decode=Measured.of("decode", 1, s, 1, dec.timing, dec.flops_estimate, dec.bytes_estimate, roof, eager),
        nocache=Measured.of("decode (no cache)", nc.q_len, 0, 1, nc.timing, nc.flops_estimate, nc.bytes_estimate,
                            roof, eager),
        lean=lean_pass, matmul_ms=matmul_ms, build_ms=build_ms, same_token=dec.token_id == nc.token_id,
        prefill_matmul_ms=prefill_matmul_ms, shape_of=rung.shape_of, lean_prefill=lean_prefill,
        compile_ms=compile_ms)


def lean_passes(result: RungResult, rlm: LoadedModel, prompt: str, roof, repeats: int, curve: bool, lean: bool,
                recipe: bool, on_point=None, compile: bool | None = None, passes=None,
                kinds=("prefill", "batch"), hold=nullcontext) -> RungResult:
    """The rung's lean passes, added to its result, measured once (never timed again with the readable ones):

        gpt-fast's pass (engine.forward.lean), where it covers the family: over n = 1, 2, 4, … rows where `curve`
            (topics/ladder/curve.py), else over 1 and s rows; its one-row decode at context s is the rung's lean
            decode, its prefill of s tokens the lean prefill
        transformers' recipe (physics.compiled.time_recipe) beside the lean decode, where `recipe`
    """
    from topics.ladder.curve import DECODE, measure_curve

    s, dec, pre = result.decode.past, result.decode, result.prefill
    out = {}
    compile_ms = dict(result.compile_ms or {})
    if (curve or lean) and lean_supports(rlm) is None:
        rows = measure_curve(rlm, result.label, roof, s, repeats, passes=passes if curve else [(DECODE, 1), ("prefill", s)],
                             on_point=on_point, weights=result.weights, compile=compile is not False, kinds=kinds,
                             hold=hold)
        one = next(iter(rows.of(DECODE)), None) or next(p for p in rows.of("batch") if p.rows == 1)
        full = next((p for p in rows.of("prefill") if p.rows == s), None)
        out["lean"] = Measured.of("decode (lean)", 1, s, 1, one.timing(), dec.flops, dec.bytes_moved, roof, rows.path)
        if full is not None:
            out["lean_prefill"] = Measured.of("prefill (lean)", s, 0, s, full.timing(), pre.flops, pre.bytes_moved,
                                              roof, rows.path)
        compile_ms |= rows.compile_ms
        out["curve"] = rows if curve else None
    if recipe and (out.get("lean") or result.lean):
        from physics.compiled import time_recipe

        tokens = rlm.tokenizer(prompt, return_tensors="pt")["input_ids"][:, :s]
        with hold():  # its compile too: transformers' recipe compiles and times in one call
            timing, warm_ms, how = time_recipe(rlm, tokens, repeats=repeats)
        out["recipe"] = Measured.of("decode (recipe)", 1, s, 1, timing, dec.flops, dec.bytes_moved, roof, how)
        compile_ms["recipe"] = warm_ms
    return replace(result, **out, compile_ms=compile_ms or None)


def lean_supports(rlm: LoadedModel) -> str | None:
    """None when gpt-fast's lean pass (engine.forward.lean) runs this rung's family, else why not."""
    from engine.forward.lean import supports

    return supports(rlm.model)


def curve_rung(rungs: list[Rung], device: torch.device) -> Rung | None:
    """Where the curve runs: the first rung of at least CURVE_MIN parameters on a CPU (one thread: its passes
    and compile stay within the ladder's minutes), the largest on a GPU."""
    big = [r for r in rungs if r.parameters >= CURVE_MIN]
    if not big:
        return None
    return max(big, key=lambda r: r.parameters) if device.type == "cuda" else min(big, key=lambda r: r.parameters)


def steady(measure: Callable[[], RungResult], say: Callable[[str], None] = lambda text: None,
           retimes: int = RETIMES, wide: float = RETIME_SPREAD) -> RungResult:
    """A rung measured, and measured again while its repeats spread wider than `wide` (a busy moment of the server,
    not the hardware), at most `retimes` more times; the steadiest measurement is kept, and says how many it took.
    A verdict shown to a class is one that held: a rung timed in a busy second is not drawn as it came out."""
    best = measure()
    timed = 1
    while best.spread > wide and timed <= retimes:
        say(f"{best.label}: its repeats spread ×{best.spread:.1f}, timing it again ({timed + 1} of {retimes + 1})…")
        again = measure()
        timed += 1
        if again.spread < best.spread:
            best = again
    return replace(best, timed=timed)


def measure_ladder(lm: LoadedModel, sizes=None, tokens: int | None = None, repeats: int = REPEATS, on_progress=None,
                   seed: int = 0, lean: bool | None = None, planned=None, dtype: torch.dtype | None = None,
                   recipe: bool | None = None, compile: bool | None = None, curve: bool = True,
                   curve_passes=None, curve_kinds=("prefill", "batch")) -> Ladder:
    """Plan every rung (refusing what would not fit), probe the roofline, then build, measure and free each rung.

    on_progress(fraction, text) is called before each part; lean (the lean decode and prefill at every rung)
    defaults to on for CUDA only; `curve` times the lean pass over n rows at `curve_rung` (on every device);
    recipe (transformers' own, beside the lean decode) defaults to the largest rung on CUDA. tokens defaults to
    default_tokens(device), dtype to timing_dtype(lm). `planned` is rungs.plan's answer when the caller has
    already asked (the CLI refuses before its progress bar starts). curve_passes: the curve's (kind, n) passes
    where not its own choice (topics.ladder.curve.every_pass), e.g. a test's few; curve_kinds: which kinds it
    times over n (gpu-check: the prefill alone, and the one-row decode).
    """
    from physics.roofline import probe, remember

    started, rss_before = now(), rss_bytes()
    tokens = tokens or default_tokens(lm.device)
    dtype = dtype or timing_dtype(lm)
    rungs, left_out = planned or plan(lm, sizes, tokens, dtype)  # every refusal comes here, before anything is built
    prompt = prompt_text(lm, tokens)
    largest = max(r.parameters for r in rungs)
    lean = lm.device.type == "cuda" if lean is None else lean
    at_curve = curve_rung(rungs, lm.device) if curve else None
    say = on_progress or (lambda fraction, text: None)
    work = [r.parameters + 5e6 for r in rungs]  # a rung's passes take time in proportion to its size, plus a floor
    share = (1 - 2 * PROBE_SHARE) / sum(work)
    done = PROBE_SHARE
    say(0.0, f"measuring this device's roofline (matmul FLOP/s and memory bandwidth, {PROBE_S * 2:.0f} s)…")
    with lm.turn(), serving_cores(largest) as threads:
        first = probe(lm.device, dtype, budget_s=PROBE_S)
        described = machine.describe(lm.device)
    @contextmanager
    def turn():  # the timed work: in the model's turn, as a student's step takes it, on the rungs' threads
        with lm.background_turn(), serving_cores(largest):
            yield

    def held(measure, *args, **kw):
        with turn():
            return measure(*args, **kw)

    results = []
    with torch_internals.inductor_cpu_threads(machine.serving_threads(int(largest))):  # compiled as timed
        for rung, w in zip(rungs, work):
            # built and compiled outside the model's turn, timed in it a measurement (or round) at a time: a
            # student's step waits seconds, not the rung's minute of building and compiling
            say(done, f"{rung.label}: building ({rung.weights})…")
            t0 = now()
            rlm = build(rung, lm, seed, dtype)
            build_ms = (now() - t0) * 1e3
            timed = recipe if recipe is not None else lm.device.type == "cuda" and rung.parameters == largest
            rows = rung is at_curve
            try:
                say(done + 0.1 * w * share, f"{rung.label}: prefill of {tokens} tokens, decode with the cache on and "
                                            "off…")
                result = steady(partial(held, measure_rung, rung, rlm, prompt, first, repeats, lean, build_ms,
                                        compile=compile), partial(say, done + 0.3 * w * share))
                if rows or lean or timed:
                    result = lean_passes(result, rlm, prompt, first, repeats, curve=rows, lean=lean, recipe=timed,
                                         on_point=partial(say, done + 0.5 * w * share), compile=compile,
                                         passes=curve_passes, kinds=curve_kinds, hold=turn)
                results.append(result)
            finally:
                del rlm
                machine.release_memory()  # the next rung, and every student, gets the memory back
            done += w * share
    say(done, "measuring the roofline again: the roof is the best of the two probes…")
    with lm.turn(), serving_cores(largest):
        # the best of the two probes, kept as this server's roof (every page quotes it: one ridge per device)
        roof = remember(best_roof(first, probe(lm.device, dtype, budget_s=PROBE_S)), lm.device, dtype)
    machine.release_memory()  # the probe's buffers too (128 MiB on a CPU)
    results = [r.on(roof) for r in results]
    say(1.0, "done")
    compile_s = sum(sum((r.compile_ms or {}).values()) for r in results) / 1e3
    return Ladder(model=model_name(lm), family=lm.spec.architecture, device=described,
                  dtype=str(dtype).removeprefix("torch."),
                  threads=threads, tokens=tokens, prompt=f"the demo text repeated, its first {tokens} tokens",
                  repeats=repeats, weights_note=RANDOM_WEIGHTS, roof=roof, rungs=tuple(results),
                  left_out=tuple(left_out), wall_s=now() - started, rss_before_bytes=rss_before,
                  rss_after_bytes=rss_bytes(), measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  compile_s=compile_s, versions=versions())
