"""Benchmarks (`python -m engine bench`): ratios measured side by side in one run.

1. Decode-step latency of the engine against `model.generate` on the same model
   and the same tokens: (a) generate(use_cache=True), (b) the engine with
   recording off, (c) the engine with full traces. Runs are interleaved, the
   first round is a warm-up and is dropped, and medians are reported.
2. Cache off vs cache on at several total lengths, with the FLOPs-estimate
   ratio for the same steps next to the measured one.
3. The size ladder (topics/ladder/measure.py): the model itself and a ~110 M rung of its family with random
   weights, prefill, decode and cache-off decode placed on this device's roofline (`--ladder-sizes`).
4. Serving (topics/serving/measure.py): continuous batching against one request
   at a time, a static padded batch and transformers' generate_batch on the same
   requests; a queue (more requests than batch slots, mixed lengths, arriving over
   time) with continuous against static batching, and the same requests in 200
   random orders; KV memory paged vs reserved; a decode pass shared by B sequences;
   the paged pass's one attention call per layer against the per-request loop it
   replaced (`LoopedPass`, kept here only to time against), with the share of a
   step the attention takes each way.

Every time is engine.timing's (`perf_counter` around a device sync, warm-up apart). Nothing here is a test: it
prints what it measured, and `--json` writes the same record.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import torch
from transformers.utils import logging as hf_logging

from benchmarks.records import AppClick, Bench, CacheRow, LadderRow, MemoryBound, Overhead
from engine.forward.paged import PagedPass
from engine.forward.sampling import Sampling
from engine.generate.stepper import Stepper
from engine.load.loaded import LoadedModel
from engine.timing import now, span, timed
from physics import machine

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside."
TARGET_UNTRACED = 1.05
TARGET_TRACED = 1.25


class StepClock:
    """A generate() streamer that reads the clock after every token (after a device sync)."""

    def __init__(self, device):
        self.device = device
        self.times: list[float] = []

    def put(self, value):
        self.times.append(now(self.device))

    def end(self):
        pass


def generate(lm, prompt_ids: torch.Tensor, new_tokens: int, *, use_cache: bool = True, streamer=None,
             **assist) -> list[int]:
    """transformers' own greedy `generate` on the loaded model: what the benchmarks time the engine against.

    It runs through the engine's registered attention (engine.forward.capture), so it is no check of that
    attention: the tests compare tokens and logits with a separate copy of the model (tests/reference.py).

    `assist` passes assisted-generation arguments through (assistant_model=..., prompt_lookup_num_tokens=...).
    """
    ids = prompt_ids.to(lm.device)
    with lm.turn(), torch.inference_mode():
        # eos_token_id=None: exactly new_tokens tokens, and EOS chosen like any other token (as the Stepper with
        # stop_on_eos=False does); min_new_tokens would instead forbid EOS, a different rule
        out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                do_sample=False, use_cache=use_cache, streamer=streamer, eos_token_id=None,
                                pad_token_id=lm.tokenizer.eos_token_id, **assist)
    return out[0, ids.shape[1]:].tolist()


def generate_step_ms(lm: LoadedModel, prompt_ids: torch.Tensor, new_tokens: int) -> list[float]:
    """Per-decode-step wall times of model.generate (the first put() is the prompt, the second prefill)."""
    clock = StepClock(lm.device)
    generate(lm, prompt_ids, new_tokens, streamer=clock)
    return [(b - a) * 1e3 for a, b in zip(clock.times[1:], clock.times[2:])]


def engine_step_ms(lm: LoadedModel, new_tokens: int, record: bool, use_cache: bool = True,
                   prompt: str = PROMPT) -> tuple[list[float], Stepper]:
    """Per-decode-step wall times of the engine, each step() timed from outside (trace building included)."""
    stepper = Stepper(lm, prompt, use_cache=use_cache, sampling=Sampling(), max_new_tokens=new_tokens,
                      record=record, stop_on_eos=False, repeats=1)  # each pass once, as generate runs it
    stepper.prefill()
    times = []
    while not stepper.done:
        times.append(timed(stepper.decode, lm.device, repeats=1, warmup=0).forward_ms)
    return times, stepper


def overhead(lm: LoadedModel, new_tokens: int = 64, rounds: int = 7, log=print) -> Overhead:
    """Median decode-step latency of generate vs engine (untraced and traced), interleaved.

    Each round runs the three in a different order (so none always goes first), and the ratio of each round's
    medians is kept too: the spread of those per-round ratios is how much to trust the overall one.
    """
    prompt_ids = torch.tensor([lm.tokenizer(PROMPT)["input_ids"]])
    new_tokens = min(new_tokens, lm.spec.max_positions - prompt_ids.shape[1])
    runs = {"generate": lambda: (generate_step_ms(lm, prompt_ids, new_tokens), None),
            "engine": lambda: engine_step_ms(lm, new_tokens, record=False),
            "engine_traced": lambda: engine_step_ms(lm, new_tokens, record=True)}
    samples = {k: [] for k in runs}
    per_round = {"untraced": [], "traced": []}
    for r in range(rounds + 1):  # round 0 is a warm-up, dropped
        order = list(runs)[r % 3:] + list(runs)[: r % 3]
        got = {name: runs[name]() for name in order}
        if r == 0:
            same = got["engine"][1].generated_ids == got["engine_traced"][1].generated_ids
            log(f"warm-up round done (excluded); engine traced == untraced tokens: {same}")
            continue
        for name, (times, _) in got.items():
            samples[name] += times
        g = statistics.median(got["generate"][0])
        per_round["untraced"].append(statistics.median(got["engine"][0]) / g)
        per_round["traced"].append(statistics.median(got["engine_traced"][0]) / g)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return Overhead(
        generate_ms=med["generate"],
        engine_ms=med["engine"],
        engine_traced_ms=med["engine_traced"],
        ratio_untraced=med["engine"] / med["generate"],
        ratio_traced=med["engine_traced"] / med["generate"],
        ratio_untraced_rounds=tuple(round(x, 3) for x in per_round["untraced"]),
        ratio_traced_rounds=tuple(round(x, 3) for x in per_round["traced"]),
        steps_per_mode=len(samples["generate"]),
    )


def cache_vs_nocache(lm: LoadedModel, lengths=(64, 256, 512), log=print) -> list[CacheRow]:
    """Total decode time with and without the cache at several total lengths (prompt + new tokens)."""
    prompt_len = len(lm.tokenizer(PROMPT)["input_ids"])
    rows = []
    for total in lengths:
        total = min(total, lm.spec.max_positions)
        new = total - prompt_len
        if new < 2:
            log(f"  {total:4d} tokens: skipped (the benchmark prompt alone is {prompt_len} tokens)")
            continue
        cache_ms, cache_run = engine_step_ms(lm, new, record=False, use_cache=True)
        nocache_ms, nocache_run = engine_step_ms(lm, new, record=False, use_cache=False)
        flops = {name: sum(t.flops_estimate for t in run.records if t.phase == "decode")
                 for name, run in (("cache", cache_run), ("nocache", nocache_run))}
        row = CacheRow(
            tokens=total,
            cache_ms=sum(cache_ms),
            nocache_ms=sum(nocache_ms),
            ratio=sum(nocache_ms) / sum(cache_ms),
            flops_ratio=flops["nocache"] / flops["cache"],
            identical=cache_run.generated_ids == nocache_run.generated_ids,
        )
        log(f"  {total:4d} tokens: cache {row.cache_ms:9.1f} ms  no cache {row.nocache_ms:9.1f} ms  "
            f"measured x{row.ratio:.1f}  FLOPs estimate x{row.flops_ratio:.1f}  same tokens: {row.identical}")
        rows.append(row)
    return rows


def app_click(log=print) -> AppClick | None:
    """The step-through page's cost per "Next token" click, measured with AppTest in a child process
    (the engine itself never imports streamlit)."""
    import json
    import subprocess
    import sys

    from engine.paths import ROOT as root
    proc = subprocess.run([sys.executable, "-m", "benchmarks.app_click"], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"  app click benchmark failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    res = AppClick.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))  # the child's JSON, read back
    log(f"  Next token click (engine + script, AppTest) at {res.context_tokens} tokens of context: "
        f"median {res.click_ms_median:.1f} ms with the default tab open ("
        f"first click {res.warmup_click_ms} ms excluded)")
    for view, r in res.by_view.items():
        log(f"    with the {view!r} tab open: median {r.median_ms:.1f} ms")
    log(f"  Lesson 6, a new seed once its story is made: median {res.lesson6_seed_ms:.1f} ms ("
        f"first seed excluded)")
    return res


def memory_bound(lm: LoadedModel, engine_ms: float, context: int, log=print) -> MemoryBound:
    """A cached decode step's measured time against its memory lower bound: bytes moved / this device's bandwidth."""
    from engine.forward.estimates import step_bytes
    from physics.roofline import probe

    roof = probe(lm.device, lm.dtype, budget_s=1.0)
    moved = step_bytes(lm.spec, 1, context, lm.elem_bytes)
    bandwidth = roof.bandwidth_for(moved)  # the bandwidth measured at as many bytes as the step moves
    bound_ms = moved / bandwidth * 1e3
    log(f"  measured memory bandwidth {bandwidth / 1e9:,.0f} GB/s at that many bytes, matmul {roof.peak_flops / 1e12:,.1f} TFLOP/s; "
        f"a cached decode step at {context} positions moves ~{step_bytes(lm.spec, 1, context, lm.elem_bytes) / 1e6:,.1f} MB "
        f"(estimate): lower bound {bound_ms:.3f} ms, measured {engine_ms:.3f} ms = x{engine_ms / bound_ms:.1f} the bound")
    return MemoryBound(bandwidth / 1e9, roof.peak_flops / 1e12, context, bound_ms, engine_ms, engine_ms / bound_ms)


LADDER_SIZES = ("own", "110M")  # the bench's ladder: the model itself and one rung where the physics shows (~10 s)


def ladder_rows(lm: LoadedModel, sizes=LADDER_SIZES, log=print) -> list[LadderRow]:
    """One `ladder` row per rung (topics/ladder/measure.py): params, weight bytes, the three passes, bounds, labels."""
    from topics.ladder.measure import measure_ladder

    lad = measure_ladder(lm, sizes, repeats=3)
    log(f"  {lad.tokens}-token prefill and a decode step at that context, {lad.threads} "
        f"thread{'' if lad.threads == 1 else 's'}, medians of "
        f"{lad.repeats}; rungs other than the model itself: {lad.weights_note}")
    rows = []
    for r in lad.rungs:
        c = r.curve
        lean = {} if c is None else dict(
            lean_decode_ms=r.lean.median_ms, lean_decode_over_bound=r.lean.median_ms / r.lean.memory_ms,
            rows8_over_one={kind: c.ratio(kind, 8) for kind in ("prefill", "batch") if c.ratio(kind, 8)},
            knee={kind: c.measured_knee(kind, lad.roof) for kind in ("prefill", "batch")},
            knee_predicted=c.predicted_knee("prefill", lad.roof))
        row = LadderRow(size=r.label, parameters=r.parameters, weight_bytes=r.weight_bytes, trained=r.trained,
                        decode_ms=r.decode.median_ms, prefill_ms=r.prefill.median_ms, nocache_ms=r.nocache.median_ms,
                        decode_memory_bound_ms=r.decode.memory_ms, decode_compute_bound_ms=r.decode.compute_ms,
                        prefill_memory_bound_ms=r.prefill.memory_ms, prefill_compute_bound_ms=r.prefill.compute_ms,
                        decode_label=r.decode.label, prefill_label=r.prefill.label, nocache_label=r.nocache.label,
                        **lean)
        log(f"  ladder {r.label:>6} ({r.weight_bytes / 2**20:,.0f} MiB): decode {r.decode.spread()} ms, memory bound "
            f"{r.decode.memory_ms:.3f}: {r.decode.label} · prefill {r.prefill.spread()} ms, compute bound "
            f"{r.prefill.compute_ms:.2f}: {r.prefill.label} · no cache {r.nocache.median_ms:.1f} ms: {r.nocache.label}")
        if lean:
            eight = ", ".join(f"{k} x{v:.2f}" for k, v in row.rows8_over_one.items())
            knees = ", ".join(f"{k} {v}" for k, v in row.knee.items())
            log(f"  lean pass at {r.label}: decode {r.lean.spread()} ms = x{row.lean_decode_over_bound:.2f} its DRAM "
                f"memory bound; 8 rows in one pass over one row: {eight}; knee "
                f"{knees} against ~{row.knee_predicted or 0:.1f} predicted")
        rows.append(row)
    return rows


class LoopedPass(PagedPass):
    """The paged pass as it was before one attention call per layer: each layer gathers every request's keys end to
    end, [1, kv_head, Σ kv_len, head_dim], then calls the eager attention once per request, in a Python loop, on its
    own part (its causal mask built per request). Kept only to time the one-call pass against (`one_call_vs_loop`)."""

    def __init__(self, kv, rows):
        super().__init__(kv, rows)
        q_pos, read, self.spans = 0, [], []
        for r in rows:  # per request: (its fed rows in the pass, its keys in what `update` returns)
            self.spans.append((slice(q_pos, q_pos + r.q_len), slice(len(read), len(read) + r.kv_len)))
            q_pos += r.q_len
            read += r.slots[:r.kv_len]
        self.read_all = torch.tensor(read, dtype=torch.long, device=self.read.device)
        self._loop_masks: dict = {}

    def update(self, keys, values, layer_idx, *args, **kwargs):
        pool_k, pool_v = self.kv.keys[layer_idx], self.kv.values[layer_idx]
        pool_k.index_copy_(0, self.write, keys[0].transpose(0, 1).to(pool_k.dtype))
        pool_v.index_copy_(0, self.write, values[0].transpose(0, 1).to(pool_v.dtype))
        return (pool_k.index_select(0, self.read_all).transpose(0, 1)[None],
                pool_v.index_select(0, self.read_all).transpose(0, 1)[None])

    def attend(self, eager, module, query, key, value, **kwargs):
        window = kwargs.get("sliding_window")
        outs = []
        for i, (rows, keys) in enumerate(self.spans):
            q, k, v = query[:, :, rows], key[:, :, keys], value[:, :, keys]
            out, _ = eager(module, q, k, v, self._mask_of(i, window, query.dtype), **kwargs)
            self.scored += q.shape[2] * k.shape[2]
            outs.append(out)
        return torch.cat(outs, dim=1), None

    def _mask_of(self, i, window, dtype):
        key = (i, window, dtype)
        if key not in self._loop_masks:
            r = self.rows[i]
            if r.q_len == 1 and (window is None or window >= r.kv_len):
                self._loop_masks[key] = None
            else:
                q_pos = torch.arange(r.start, r.kv_len)
                k_pos = torch.arange(r.kv_len)
                allowed = k_pos[None, :] <= q_pos[:, None]
                if window is not None:
                    allowed &= (q_pos[:, None] - k_pos[None, :]) < window
                blocked = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
                self._loop_masks[key] = blocked[None, None].to(self.read.device)
        return self._loop_masks[key]


def _attention_timed(base):
    """`base` with its layers' attention timed (perf_counter around a device sync), into `cls.attention_ms`."""

    class Timed(base):
        attention_ms: list[float] = []

        def attend(self, eager, module, query, *args, **kwargs):
            with span(query.device) as took:
                out = super().attend(eager, module, query, *args, **kwargs)
            Timed.attention_ms.append(took.ms)
            return out

    return Timed


ONE_CALL_WORKLOADS = ((8, 64), (32, 32))  # (requests at once, new tokens each): the throughput part's, and 4x wider


def one_call_vs_loop(lm: LoadedModel, requests: int = 8, new_tokens: int = 64, rounds: int = 3, log=print):
    """`requests` at once (the throughput part's prompts, repeated), one length, served with the one-call paged pass
    and with the per-request loop, alternated round by round after a warm-up round (dropped): tokens/s over each
    way's median round. Then one more run each with the attention timed: its share of the steps' wall time."""
    from engine.generate.serving import RequestSpec, ServingRun
    from topics.serving.measure import PROMPTS
    from topics.serving.record import OneCall

    specs = [RequestSpec(PROMPTS[i % len(PROMPTS)], new_tokens, 0) for i in range(requests)]
    ways = {"one call": PagedPass, "loop": LoopedPass}

    def serve(pass_type):
        run = type("Served", (ServingRun,), {"paged_pass": pass_type})(lm, specs, stop_on_eos=False, record=False,
                                                                         max_requests=len(specs))
        run.run()
        return run

    ms = {k: [] for k in ways}
    tokens = {}
    for r in range(rounds + 1):
        for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            run = serve(ways[name])
            tokens[name] = [q.generated_ids for q in run.requests]
            if r:
                ms[name].append(sum(run.step_ms))
            run.free()
    share = {}
    for name, pass_type in ways.items():
        timed = _attention_timed(pass_type)
        timed.attention_ms.clear()
        run = serve(timed)
        share[name] = sum(timed.attention_ms) / sum(run.step_ms)
        run.free()
    total = len(specs) * new_tokens
    rate = {k: total / (statistics.median(v) / 1e3) for k, v in ms.items()}
    return OneCall(requests=len(specs), new_tokens=new_tokens, rounds=rounds, loop_tokens_per_s=rate["loop"],
                   one_call_tokens_per_s=rate["one call"], loop_attention_share=share["loop"],
                   one_call_attention_share=share["one call"], same_tokens=tokens["one call"] == tokens["loop"])


def log_one_call(o, log=print) -> None:
    log(f"  the paged pass, {o.requests} requests x {o.new_tokens} new tokens at once, medians of {o.rounds} "
        f"alternated rounds:")
    log(f"    before, one eager call per request (a loop)   {o.loop_tokens_per_s:8.0f} tokens/s")
    log(f"    after, one attention call per layer           {o.one_call_tokens_per_s:8.0f} tokens/s   "
        f"x{o.speedup:.2f}; same tokens: {o.same_tokens}")
    log(f"    profile: attention takes {o.loop_attention_share:.0%} of a serving step's wall time before, "
        f"{o.one_call_attention_share:.0%} after (a run each, the layers' attention timed)")


def run_bench(lm: LoadedModel, lengths=(64, 256, 512), rounds: int = 7, app: bool = True, log=print,
              ladder_sizes=LADDER_SIZES) -> Bench:
    """Every part in the module docstring's order, logged as it goes; the record `--json` writes (`to_dict`)."""
    hf_logging.set_verbosity_error()  # generate() warns that max_new_tokens overrides max_length: expected here
    if lm.device.type == "cpu":  # time what the app serves with: one thread for a small model (physics/machine.py)
        machine.use_serving_threads(int(lm.spec.parameters))
    log(f"model {lm.spec.name} ({int(lm.spec.parameters):,} params, {lm.dtype_name}) on {machine.describe(lm.device)}; "
        f"load-time warm-up {lm.warmup_ms:.1f} ms (excluded)")
    log("decode-step latency, median over interleaved rounds:")
    o = overhead(lm, rounds=rounds, log=log)
    log(f"  (a) model.generate          {o.generate_ms:7.3f} ms/step")
    spread = {k: f"per round {min(each):.2f}–{max(each):.2f}"
              for k, each in (("untraced", o.ratio_untraced_rounds), ("traced", o.ratio_traced_rounds))}
    log(f"  (b) engine, recording off   {o.engine_ms:7.3f} ms/step   (b)/(a) = {o.ratio_untraced:.3f}  "
        f"({spread['untraced']})  target <= {TARGET_UNTRACED}")
    log(f"  (c) engine, full traces     {o.engine_traced_ms:7.3f} ms/step   (c)/(a) = {o.ratio_traced:.3f}  "
        f"({spread['traced']})  target <= {TARGET_TRACED}")
    log("decode step against the memory bound:")
    bound = memory_bound(lm, o.engine_ms, len(lm.tokenizer(PROMPT)["input_ids"]) + 32, log=log)
    ladder = None
    if ladder_sizes:
        log("size ladder (python -m engine ladder): the same steps at bigger sizes, on this device's roofline:")
        ladder = tuple(ladder_rows(lm, ladder_sizes, log=log))
    log("cache off vs cache on, total decode time (one run each, same tokens):")
    rows_cache = tuple(cache_vs_nocache(lm, lengths, log=log))
    log("serving: many requests on one model (topics/serving/measure.py):")
    from topics.serving import measure as serving

    served = serving.run_all(lm, log=log)
    one_call = tuple(one_call_vs_loop(lm, n, tokens, log=log) for n, tokens in ONE_CALL_WORKLOADS)
    for each in one_call:
        log_one_call(each, log)
    served = replace(served, one_call=one_call)
    log("the KV cache on a budget (topics/budget/measure.py): every policy against the full cache, one run:")
    from topics.budget import measure as budget

    rows = budget.bench_rows(lm)
    for r in rows:
        parts = "never" if r.parting_step is None else f"step {r.parting_step}"
        dq = "" if r.dequant_ms is None else f", {r.dequant_ms:.2f} of it dequantizing"
        log(f"  {r.policy:<11} budget {r.budget or '-':>3}: {r.bytes_ratio:6.1%} of the full {r.dtype} cache's "
            f"bytes ({r.bytes_ratio_bf16:6.1%} counted at bf16), agreement {r.agreement:6.1%}, mean KL "
            f"{r.kl_mean:.4f}, texts part {parts}, {r.ms_per_step:.2f} ms/step (IQR {r.ms_p25:.2f}-{r.ms_p75:.2f}"
            f"{dq})")
    clicks = None
    if app:
        log("step-through page:")
        clicks = app_click(log=log)
    return Bench(o, bound, ladder, rows_cache, served, tuple(rows), clicks, app, lm.spec.name, machine.describe(lm.device),
                 lm.dtype_name, torch.get_num_threads())
