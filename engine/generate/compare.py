"""Cache on vs cache off on the same prompt and seed: same tokens, different work."""

from __future__ import annotations

import statistics

from engine.forward.sampling import Sampling
from engine.generate.stepper import Stepper
from engine.load.loaded import LoadedModel


def compare(lm: LoadedModel, prompt: str, new_tokens: int, sampling: Sampling | None = None,
            record: bool = False, on_step=None, stop_on_eos: bool = True) -> dict:
    """Run both modes in lockstep (alternating steps, so neither has the machine to itself).

    `new_tokens` is the number of new tokens each run makes. Returns identical tokens?, the largest logit
    difference over the steps both took on the same tokens, per-step latencies of both
    modes and the speed-up (median and total, warm-up excluded).
    """
    sampling = sampling or Sampling()
    runs = {mode: Stepper(lm, prompt, use_cache=(mode == "cache"), sampling=sampling,
                          max_new_tokens=new_tokens, record=record, stop_on_eos=stop_on_eos)
            for mode in ("cache", "nocache")}
    max_diff = 0.0
    first_divergence = None
    while not all(s.done for s in runs.values()):
        for mode, stepper in runs.items():
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


def race_report(runs: dict, first_divergence: int | None, max_diff: float, stop_reason: dict) -> dict:
    """What a race of the two modes reports, from its two runs ({"cache": ..., "nocache": ...}: each with records,
    generated_ids, generated_text): the proof, the tokens, each step's time and the speed-up."""
    cache, nocache = runs["cache"], runs["nocache"]
    return {
        "identical": cache.generated_ids == nocache.generated_ids,
        "first_divergence_step": first_divergence,
        "max_logit_diff": max_diff,
        "tokens": {"cache": cache.generated_ids, "nocache": nocache.generated_ids},
        "text": {"cache": cache.generated_text, "nocache": nocache.generated_text},
        "latency_ms": {m: [round(t.latency_ms, 4) for t in s.records] for m, s in runs.items()},
        "phase": [t.phase for t in cache.records],
        "speedup": speedup(cache.records, nocache.records),
        "stop_reason": stop_reason,
        "steppers": runs,
    }


def speedup(cache_traces, nocache_traces) -> dict:
    """No-cache time / cache time over the decode steps (prefill is identical work in both; the load's
    warm-up passes ran before either and are in neither)."""
    def decode_ms(traces):
        return [t.latency_ms for t in traces if t.phase == "decode"]

    c, n = decode_ms(cache_traces), decode_ms(nocache_traces)
    if not c or not n:
        return {"median_ratio": None, "total_ratio": None, "cache_total_ms": sum(c), "nocache_total_ms": sum(n)}
    return {
        "median_ratio": statistics.median(n) / statistics.median(c),
        "total_ratio": sum(n) / sum(c),
        "cache_total_ms": sum(c),
        "nocache_total_ms": sum(n),
    }


def kv_reuse(lm, ids, cache) -> dict | None:
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
        layers.append({"layer": layer, "positions": kept,
                       "max_key_diff": float((keys - c.k[:, :, -kept:]).abs().max()),
                       "max_value_diff": float((values - c.v[:, :, -kept:]).abs().max())})
    return {"positions": n, "layers": layers,
            "max_key_diff": max(x["max_key_diff"] for x in layers),
            "max_value_diff": max(x["max_value_diff"] for x in layers)}
