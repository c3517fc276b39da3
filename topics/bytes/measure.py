"""Bytes are time, measured: the lean pass's decode and prefill per storage, the context's line, the damage.

    storages(rlm)        the rung's decode step (one token at a 128-token context) and its 128-token prefill, per
                         storage (topics/bytes/storage.py), every pass once a round and the roof probed in each round
                         beside them (physics.roofline.RoundRates: the read rate and the matmul peak in each
                         compute dtype), as the pass-of-n curve does (topics/ladder/curve.py); the fp32 decode step
                         also at contexts up to past where the K/V's bytes reach the weights', and the longest step
                         again with the cache evicted to a window (the budget page's `window` policy: the newest
                         quarter of the positions held); on a CPU, each decode step's time inside inductor's kernels
                         (its products) from profiled calls once the rounds are done, the rest of the step apart
    damage(models)       each bundled model with its weights rounded to each storage, teacher-forced on held-out stories
                         against fp32: top-1 agreement and KL per story
    record(...)          all of it as one `records.Record`

Timed as every pass is (engine.timing through lean.run_once): perf_counter around a device sync, the first runs
after each compile apart. A decode step's time does not depend on what its cache holds, so the long contexts' caches
are filled with random numbers, not a 20,000-token prefill.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial

import torch

from engine import device as dev
from engine.forward.estimates import step_flops
from engine.forward.lean import compiled_pass, run_once
from engine.paths import ASSETS
from engine.timing import now
from physics import machine
from physics.roofline import RoundRates, as_words, plain_read
from topics.bytes import gpu_kernels
from topics.bytes import storage as st
from topics.bytes.records import Damage, Pass, Rates, Record, WindowDamage
from topics.bytes.store import with_stories

TOKENS = 128  # the prefill's length and the decode step's context
ROUNDS = 5
CONTEXTS = (128, 2048, 4096, 8192, 12288, 16384, 20480)  # past the 112 M rung's crossing (~18,200 in fp32)
WINDOW_SHARE = 0.25  # the evicted cache holds this share of the longest context (the budget page's default budget)
GPU_SHAPE = "Llama-3-8B"  # on a GPU (`engine bytes --device cuda`, `gpu-check --bytes`): a real shape, in bf16,
GPU_CONTEXTS = (384, 16384, 65536, 131072)  # its K/V (128 KiB a position) reaching its 16 GB of weights near 122,000
GPU_TOKENS, GPU_ROUNDS = 384, 3
KERNELS_APART = ("fp32", "bf16", "fp16", "int8", "bf16 model")  # on a CPU, a decode step's products all in
#   inductor's own kernels, timed apart from the rest of the step (int4's product is torch's int4 kernel, outside them)
STORIES = 8
STORY_TOKENS = 192  # each story's first tokens, teacher-forced
HELD_OUT = ASSETS / "held_out" / "tinystories_eval_40.txt"
BUDGET_SWEEP = ASSETS / "budget_sweep_default.json"
PEAK_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # probed where one computes


def contexts_that_fit(kv_per_token: int, device: torch.device, contexts=CONTEXTS) -> tuple[int, ...]:
    room = 0.3 * dev.available_bytes(device)
    return tuple(c for c in contexts if kv_per_token * (c + 2) <= room)


def _warm(fn, ids, pos, *more) -> tuple[float, float]:
    """(compile and first run, the next run): both excluded from the timing."""
    return run_once(fn, ids, pos, *more), run_once(fn, ids, pos, *more)


ROUNDS_S = 30.0  # a time limit (`deadline`): kept for the timed rounds, after the last compile


def deadline(started: float, within: float | None) -> float | None:
    """The `now()` time by which a run given `within` seconds from `started` must have done compiling (None: no
    limit)."""
    return started + within - ROUNDS_S if within else None


def storages(rlm, storages_=None, tokens: int = TOKENS, rounds: int = ROUNDS, contexts=CONTEXTS,
             compile: bool = True, on_point=None, probe=None, notes: list | None = None,
             deadline: float | None = None, hold=nullcontext) -> tuple[tuple, tuple, int, float]:
    """(rounds' Rates, passes, the reference's K/V bytes per position, compile seconds); see the module docstring.
    The first storage (this device's, st.for_device, by default) is the reference: every ratio is taken against
    it, and its decode step is the one timed against context. `probe()`, where given, stands in for the roof's
    probes (a test's: Rates without a second of matmuls). A storage other than the reference that this torch cannot
    build or run (an int4 kernel missing, say) is left out, and why is appended to `notes`. `deadline` (a `now()`
    time): a storage after the reference, or the context's steps, whose compiles would not end before it (each
    taken to cost what the reference's did) is left out the same way, so a run with a time limit keeps a whole
    record of what it did measure (gpu-check on a lent GPU's minutes). `hold()`: entered around each round and each
    profiled call, the timed work, never around a compile: the app's server passes the model's turn, so a student's
    step waits for one round (seconds) and never runs beside a timing, where holding it for the whole job made every
    other page wait its minutes and give up ("The server is busy")."""
    say = on_point or (lambda _text: None)
    storages_ = tuple(storages_ or st.for_device(rlm.device))
    reference = storages_[0]
    device, spec = rlm.device, rlm.spec
    gen = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, min(spec.vocab, 32000), (1, tokens), device=device, generator=gen)
    one, at = ids[:, :1], torch.tensor([tokens], device=device)
    ready, compile_s, kv_ref = [], 0.0, 0  # (Pass without samples, fn, args)
    each_s = 0.0  # what the reference's weights and compiles took: the cost a later one is taken to have

    def out_of_time(what: str) -> bool:
        if deadline is None or not ready or now() + each_s <= deadline:
            return False
        why = (f"{what}: not measured here: its compiles (~{each_s:.0f} s, as the {reference}'s) would end past "
               "the time limit")
        say(why)
        if notes is not None:
            notes.append(why)
        return True

    for name in storages_:
        if out_of_time(name):
            continue
        began = now()
        say(f"{name}: converting the weights, compiling the decode step and the {tokens}-token prefill")
        try:
            lean = st.lean_pass(rlm.model, name, tokens + 2)
            fn = compiled_pass(lean, kernels_profiled=True) if compile else lean
            wbytes, kv = st.read_bytes(lean), st.kv_bytes_per_token(lean)
            mine = []
            for kind, x, pos in (("prefill", ids, torch.arange(tokens, device=device)), ("decode", one, at)):
                c, w = _warm(fn, x, pos)
                compile_s += c / 1e3
                rows = x.shape[1]
                # the K/V a decode step reads: the positions up to its own (the CPU kernel), or every position the
                # static cache holds, masked past its own (SDPA)
                ctx = 0 if kind == "prefill" else tokens + 1 if lean.flash_decode else tokens + 2
                p = Pass(name, kind, rows, ctx, wbytes, kv * ctx, step_flops(spec, rows, 0 if rows > 1 else tokens),
                         (), w, lean.kernel, st.arithmetic(lean))
                mine.append((p, fn, (x, pos)))
        except (RuntimeError, NotImplementedError) as e:
            if name == reference or notes is None:
                raise
            why = f"{name}: not measured here: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            say(why)
            notes.append(why)
            continue
        kv_ref = kv if name == reference else kv_ref
        each_s = now() - began if name == reference else each_s
        ready += mine
    contexts = () if out_of_time("the decode step against context") else contexts_that_fit(kv_ref, device, contexts)
    read_cache = None
    if contexts:
        longest = contexts[-1]
        say(f"{reference}: the decode step at {len(contexts)} contexts up to {longest:,} positions (caches of random "
            "numbers)")
        lean = st.lean_pass(rlm.model, reference, longest + 1)
        with torch.no_grad():
            for c in (*lean.k_cache, *lean.v_cache):
                c.normal_(generator=gen)
        fn = compiled_pass(lean) if compile else lean
        wbytes = st.read_bytes(lean)
        read_cache = _cache_reader(lean)
        window = max(1, int(longest * WINDOW_SHARE))
        at_context = []
        for kind, ctx in [("context", c) for c in contexts] + [("evicted", window)]:
            pos = torch.tensor([ctx - 1], device=device)
            c, w = _warm(fn, one, pos, ctx)
            compile_s += c / 1e3 if kind == "context" and ctx in contexts[:2] else 0.0
            at_context.append((Pass(reference, kind, 1, ctx, wbytes, kv_ref * ctx, step_flops(spec, 1, ctx), (), w,
                                    f"{lean.kernel}; attention: {lean.attention}", st.arithmetic(lean)), fn,
                               (one, pos, ctx)))
        # The first context compiled a graph of its own, the second one for every context, which the first then
        # runs too: on a GPU each context's first two calls on that graph are a warm-up and its CUDA graph's
        # recording (13 and 30 ms against 5 on the H200, docs/measurements.md). So each is warmed again, untimed.
        for _p, fn_, args in at_context:
            _warm(fn_, *args)
        ready += at_context
    probe = probe or _probe(device, {p.arith for p, _fn, _a in ready})
    samples, got_rounds = [[] for _ in ready], []
    for r in range(rounds):
        say(f"round {r + 1} of {rounds}: the roof probed, then every pass once")
        with hold():
            rates = probe()
            got_rounds.append(replace(rates, cache=read_cache()) if read_cache else rates)
            for got, (_p, fn, args) in zip(samples, ready):
                got.append(run_once(fn, *args))
    del probe
    inside = {}
    for p, fn, args in ready:
        if compile and device.type == "cpu" and p.kind == "decode" and p.storage in KERNELS_APART:
            with hold():
                inside[id(p)] = in_kernels_ms(fn, args)
    passes = []
    for got, (p, _fn, _a) in zip(samples, ready):
        kernels, profiled = inside.get(id(p), (0.0, 0.0))
        passes.append(replace(_with(p, got), kernels_ms=kernels, profiled_ms=profiled))
    passes = tuple(passes)
    torch.compiler.reset()
    machine.release_memory()
    return tuple(got_rounds), passes, kv_ref, compile_s


def in_kernels_ms(fn, args, runs: int = 3) -> tuple[float, float]:
    """(ms inside inductor's own C++ kernels, ms the whole call took) for one call of a compiled pass (compiled
    with `kernels_profiled`), both from the same profiled calls, medians of `runs`. The rest of the call is outside
    the kernels: the Python that calls each one, an extern op (the attention's), the guards, and the profiler's own
    bookkeeping."""
    inside, whole = [], []
    for _ in range(runs):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            whole.append(run_once(fn, *args))
        inside.append(sum(e.self_cpu_time_total for e in prof.key_averages() if "cpp_fused" in e.key) / 1e3)
    return statistics.median(inside), statistics.median(whole)


def _probe(device: torch.device, dtypes):
    """The roof this minute: a read and a square matmul in each compute dtype (RoundRates, the curve's
    probe); the read rate the median of the reads."""
    probes = {name: RoundRates(device, PEAK_DTYPES[name]) for name in PEAK_DTYPES if name in dtypes}

    def probe() -> Rates:
        probed = {name: p() for name, p in probes.items()}
        return Rates(read=sorted(v[0] for v in probed.values())[len(probed) // 2],
                     peaks={name: v[1] for name, v in probed.items()})

    return probe


def _cache_reader(lean):
    """A plain read of the long-context step's own K/V cache (every layer's K and V, whole: the longest context
    and the position past it, as 4-byte words: cache_words), the faster of the roof's two ways (a sum, a
    matrix-vector product: physics.roofline.plain_read), best of 3: the rate the context's bytes can be read at
    where they lie. On a shared machine two buffers of the same size can read at rates a quarter apart
    (docs/measurements.md), so the context's slope is predicted from the cache's own read, and the roof's buffer is
    said beside it. Each tensor is read whole, as it lies: on the H200 a slice of the first positions (a stride
    between heads) summed at a third of the roof's read."""
    return partial(plain_read, cache_words(lean), lean.embed.device, 3)


def cache_words(lean) -> list[torch.Tensor]:
    """Every layer's K and V cache, its bytes as fp32 words (physics.roofline.as_words), as the roof's read sums
    its buffer: on the Intel Xeon VM a bf16 sum read the same bytes at ×0.65–0.69 the rate of their words (`python
    -m benchmarks.decode_attention --shape llama-3-8b`, docs/measurements.md). An fp32 cache is its own words."""
    return [as_words(c) for c in (*lean.k_cache, *lean.v_cache)]


def _with(p: Pass, samples) -> Pass:
    return replace(p, samples_ms=tuple(samples))


# ---------------------------------------------------------------- the damage in tokens


def stories(n: int = STORIES) -> list[str]:
    """The first n held-out stories (assets/held_out: no bundled model trained on them)."""
    text = HELD_OUT.read_text(encoding="utf-8")
    return [s.strip() for s in text.split("<|endoftext|>") if s.strip()][:n]


def damage_of(model, tokenizer, name: str, storages_=st.STORAGES, n: int = STORIES,
              tokens: int = STORY_TOKENS) -> list[Damage]:
    """Teacher-forced on n stories: each storage's rounded weights against fp32's, per story."""
    ids = [tokenizer(s, verbose=False)["input_ids"][:tokens] for s in stories(n)]
    with torch.no_grad():
        base = [model(torch.tensor([x])).logits[0].float().log_softmax(-1) for x in ids]
        out = []
        for s in storages_:
            copy_ = st.weight_damage(model, s) if s != "fp32" else model
            agree, kl = [], []
            for x, ref in zip(ids, base):
                got = copy_(torch.tensor([x])).logits[0].float().log_softmax(-1)
                agree.append(float((got.argmax(-1) == ref.argmax(-1)).float().mean()))
                kl.append(float((ref.exp() * (ref - got)).sum(-1).clamp(min=0).mean()))
            out.append(Damage(name, s, tuple(agree), tuple(kl), sum(len(x) for x in ids)))
    return out


def damage(models=None, storages_=st.STORAGES, n: int = STORIES, on_point=None) -> tuple[Damage, ...]:
    from engine.load.load import bundled_models, load_model

    out = []
    for name in models or bundled_models():
        if on_point:
            on_point(f"damage: {name}, {n} held-out stories, {len(storages_)} storages")
        lm = load_model(name, device="cpu", dtype="float32", warmup=False)
        out += damage_of(lm.model, lm.tokenizer, name, storages_, n)
    return tuple(out)


def budget_window() -> WindowDamage | None:
    """The budget page's window policy at the budget whose bytes share is WINDOW_SHARE, from its recording."""
    try:
        doc = json.loads(BUDGET_SWEEP.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pts = [p for p in doc.get("points", ()) if p.get("policy") == "window"]
    if not pts:
        return None
    p = min(pts, key=lambda q: abs(math.log(q["bytes_ratio"] / WINDOW_SHARE)))
    return with_stories(WindowDamage("window", p["budget"], doc["context"], doc["model"], p["agreement"],
                                     p["kl_mean"], p["bytes_ratio"], "assets/budget_sweep_default.json"))


def record(rlm, label: str, command: str = "", rounds: int = ROUNDS, contexts=CONTEXTS, models=None,
           compile: bool = True, on_point=None, storages_=None, tokens: int = TOKENS,
           with_damage: bool = True, deadline: float | None = None, hold=nullcontext) -> Record:
    started = now()
    load0 = os.getloadavg()[0]
    notes = []
    got, passes, kv_ref, compile_s = storages(rlm, storages_, tokens=tokens, rounds=rounds, contexts=contexts,
                                            compile=compile, on_point=on_point, notes=notes, deadline=deadline,
                                            hold=hold)
    hurt = damage(models, on_point=on_point) if with_damage else ()
    if gpu_kernels.why_not(rlm.device) is None:  # a GPU: the block sizes the narrow storages' kernels ran with
        notes.append(gpu_kernels.said())
    return Record(device=machine.describe(rlm.device), rung=label, parameters=int(rlm.spec.parameters),
                  threads=torch.get_num_threads(), load=(round(load0, 2), round(os.getloadavg()[0], 2)),
                  measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), command=command,
                  wall_s=round(now() - started, 1), compile_s=round(compile_s, 1), rounds=got,
                  passes=passes, kv_per_token=kv_ref, damage=hurt, window=budget_window(),
                  reference=passes[0].storage, notes=tuple(notes))


def record_gpu(lm, shape: str | None = None, contexts=None, tokens: int | None = None, rounds: int | None = None,
               compile: bool | None = None, on_point=None, command: str = "", deadline: float | None = None) -> Record:
    """Bytes are time at a real shape (GPU_SHAPE), in bf16, on lm's device: the GPU's storages (the bf16 model the
    reference, int8 and int4 weight-only over it), the bf16 model's step against context; no damage (that is the
    bundled models', measured on a CPU). `python -m engine bytes --device cuda` and `gpu-check --bytes` run it."""
    from physics.rungs import rung_model

    shape = shape or GPU_SHAPE
    rlm = rung_model(lm, shape, dtype=torch.bfloat16)
    return record(rlm, f"{shape} shape", command=command, rounds=rounds or GPU_ROUNDS,
                  contexts=tuple(contexts or GPU_CONTEXTS), compile=lm.device.type == "cuda" if compile is None
                  else compile, on_point=on_point, storages_=st.GPU_STORAGES, tokens=tokens or GPU_TOKENS,
                  with_damage=False, deadline=deadline)
