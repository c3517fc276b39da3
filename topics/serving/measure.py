"""What continuous batching and a paged cache buy, measured on the same requests side by side in one run.

    throughput   tokens/s of the same requests served four ways, alternated round by round so none gets a
                 quieter machine, first round a warm-up (dropped), medians:
                   continuous       our ServingRun (continuous batching, paged cache), recording off
                   one at a time    each request alone, one after another (the Stepper, recording off)
                   static batch     all requests padded to one batch, decoding until the longest is done
                   generate_batch   transformers' own continuous batching, same sizing, on a copy of the model
                 and the same ServingRun with its full per-step record on (traced / untraced)
    memory       KV positions held at every step of a run, against what they hold: paged blocks (measured:
                 the blocks the run took), reserving the model's whole context per request, and one static
                 padded batch (computed for the same requests: what those allocators would have taken)
    step time    one decode pass shared by B sequences, B = 1, 2, 4, ...: matrix-vector work becomes
                 matrix-matrix, and the pass stays nearly flat while it is bound by overheads or by reading
                 the weights; each pass placed on the roofline (`batch_roofline`): its intensity from
                 estimates.batched_decode (B tokens share one read of the weights), its FLOP/s from the
                 measured time, beside a GPU's prediction for the same model and for a published 8B one

perf_counter around a device sync, as everywhere; nothing here is a test: targets are printed beside the figures.
"""

from __future__ import annotations

import statistics
import time

from engine.forward.estimates import batched_decode
from engine.generate.batch import run_batch
from engine.generate.serving.reference import generate_batch, reference_model
from engine.generate.serving.requests import RequestSpec
from engine.generate.serving.run import DEFAULTS, ServingRun
from engine.generate.stepper import Stepper
from engine import device as dev
from engine.load.loaded import LoadedModel

PROMPTS = ["Once upon a time", "Tom had a red ball. He", "The sun was hot and the dog",
           "Lily and Max went to the park to play with", "One day, a little girl named Amy found a baby bird.",
           "Ben wanted a cookie, so he", "The little cat was sad because", "Mia shared her cake with her friends."]
TARGET_OVER_ONE = 3.0  # continuous batching of 8 requests against one at a time
TARGET_OVER_GENERATE_BATCH = 0.9
TARGET_TRACED = 1.3


def serving_run(lm, specs, record: bool = False, **sizing) -> ServingRun:
    run = ServingRun(lm, specs, stop_on_eos=False, record=record, **{**DEFAULTS, **sizing})
    run.run()
    return run


MIXED = [64, 8, 16, 64, 8, 32, 16, 48]  # the same 8 prompts asking for different lengths


def throughput(lm: LoadedModel, prompts: list[str] = PROMPTS, new_tokens: int | list[int] = 64, rounds: int = 3,
               log=print, traced_too: bool = True) -> dict:
    """Tokens/s of the same requests four ways (and traced vs untraced), alternated; round 0 a warm-up.

    new_tokens: one length for all, or one per request. With different lengths a static batch still runs every
    row to the longest (only the tokens asked for count), and generate_batch is left out (it takes one length).
    traced_too=False leaves out the run with its full record on (a page that shows only the four ways)."""
    return throughput_side_by_side(lm, prompts, {"only": new_tokens}, rounds, log, traced_too)["only"]


def throughput_side_by_side(lm: LoadedModel, prompts: list[str], workloads: dict[str, int | list[int]],
                            rounds: int = 1, log=print, traced_too: bool = False) -> dict[str, dict]:
    """`throughput` of several workloads of the same prompts (one length for all, mixed lengths...), every way of
    every workload alternated in the same rounds, so no workload gets a quieter machine than another."""
    plans = {name: _ways(lm, prompts, n, traced_too) for name, n in workloads.items()}
    jobs = [(name, way) for name, (ways, _, _) in plans.items() for way in ways]
    ms: dict[tuple[str, str], list[float]] = {job: [] for job in jobs}
    for r in range(rounds + 1):
        for job in jobs[r % len(jobs):] + jobs[: r % len(jobs)]:
            took = plans[job[0]][0][job[1]]()
            if r:
                ms[job].append(took)
        if r == 0:
            log("  warm-up round done (excluded)")
    out = {}
    for name, (ways, tokens, total) in plans.items():
        med = {k: statistics.median(ms[(name, k)]) for k in ways}
        res = {"requests": len(prompts), "new_tokens": workloads[name], "rounds": rounds,
               "sizing": dict(DEFAULTS), "ms": {k: [round(x, 2) for x in ms[(name, k)]] for k in ways}}
        for k in ("continuous", "one_at_a_time", "static_batch", "generate_batch"):
            res[f"{k}_tokens_per_s"] = total / (med[k] / 1e3) if k in med else None
        res["traced_tokens_per_s"] = total / (med["traced"] / 1e3) if "traced" in med else None
        res["continuous_over_one_at_a_time"] = med["one_at_a_time"] / med["continuous"]
        res["continuous_over_generate_batch"] = (med["generate_batch"] / med["continuous"] if "generate_batch" in med
                                                 else None)
        res["continuous_over_static_batch"] = med["static_batch"] / med["continuous"]
        res["traced_over_untraced"] = med["traced"] / med["continuous"] if "traced" in med else None
        res["same_tokens"] = {k: v == tokens["one_at_a_time"] for k, v in tokens.items()}
        out[name] = res
    return out


def _ways(lm: LoadedModel, prompts: list[str], new_tokens: int | list[int], traced_too: bool):
    """The ways to serve one workload, each a callable returning its measured ms: ({way: fn}, tokens, total)."""
    lengths = new_tokens if isinstance(new_tokens, list) else [new_tokens] * len(prompts)
    specs = [RequestSpec(p, n, 0) for p, n in zip(prompts, lengths)]
    ids = [lm.tokenizer(p)["input_ids"] for p in prompts]
    same_length = len(set(lengths)) == 1
    reference = reference_model(lm) if same_length else None
    tokens: dict[str, list[int] | list[list[int]]] = {}

    def continuous():
        run = serving_run(lm, specs)
        tokens["continuous"] = [r.generated_ids for r in run.requests]
        return sum(run.step_ms)

    def traced():
        return sum(serving_run(lm, specs, record=True).step_ms)

    def one_at_a_time():
        t0, out = time.perf_counter(), []
        for p, n in zip(prompts, lengths):
            s = Stepper(lm, p, max_new_tokens=n, stop_on_eos=False, record=False, repeats=1)
            s.run()
            out.append(s.generated_ids)
        dev.sync(lm.device)
        tokens["one_at_a_time"] = out
        return (time.perf_counter() - t0) * 1e3

    def static_batch():
        t0 = time.perf_counter()
        run = run_batch(lm, prompts, new_tokens=max(lengths), max_batch=len(prompts), record=False,
                        stop_on_eos=False)  # every row to the longest, as one at a time and generate_batch do
        dev.sync(lm.device)
        tokens["static_batch"] = [list(g)[:n] for g, n in zip(run.generated, lengths)]
        return (time.perf_counter() - t0) * 1e3

    def hf_batch():
        out, ms = generate_batch(lm, ids, lengths[0], model=reference, **DEFAULTS)
        tokens["generate_batch"] = out
        return ms

    ways = {"continuous": continuous, "one_at_a_time": one_at_a_time, "static_batch": static_batch,
            "generate_batch": hf_batch, "traced": traced}
    if not same_length:
        del ways["generate_batch"]
    if not traced_too:
        del ways["traced"]
    return ways, tokens, sum(lengths)


def memory(run: ServingRun) -> dict:
    """Positions of KV memory held at each step of a recorded run, three ways, and the share of them wasted
    (held, but holding no token's keys and values), averaged over the steps that ran a pass.

    Paged blocks are counted as the pool holds them: a block in several requests' tables (a shared prefix) is held
    once and its filled positions are stored once, so its waste is what its blocks hold that no request wrote (0 to
    100 %). What sharing saves is said apart: the positions the requests read (each request's own count, a shared
    position once per request) per position stored. The other two allocators share nothing: each request's
    positions are its own."""
    elem = run.kv.bytes_per_block // run.page_size  # bytes of one position, all layers, K and V
    max_len = run.lm.spec.max_positions
    held = {"paged": 0, "reserve_max_length": 0, "static_padding": 0}
    served_total = stored_total = steps = 0
    peak = dict.fromkeys(held, 0)
    longest = max(r.prompt_len for r in run.requests) + max(r.max_new_tokens for r in run.requests)
    for s in run.records:
        if s.forward_ms is None:
            continue
        in_pool = [rid for rid, _ in s.tables]
        served = sum(n for _, n in s.held)  # positions each request reads, a shared one once per request
        stored = stored_positions(s.tables, dict(s.held), run.page_size)  # positions the pool stores, each once
        now = {"paged": s.blocks_used * run.page_size,  # what the run really took: whole blocks
               "reserve_max_length": len(in_pool) * max_len,  # a slab of the model's context per request
               "static_padding": len(run.requests) * longest}  # one padded batch holds every row to the end
        for k, v in now.items():
            held[k] += v
            peak[k] = max(peak[k], v)
        served_total += served
        stored_total += stored
        steps += 1
    out = {"position_bytes": elem, "max_length": max_len,
           "sharing": {"steps": steps, "served": served_total, "stored": stored_total, "held": held["paged"],
                       "saved": served_total - stored_total,  # positions not stored twice, summed over the steps
                       "served_per_held": served_total / held["paged"] if held["paged"] else 0.0}}
    for k in held:
        used = stored_total if k == "paged" else served_total
        out[k] = {"peak_bytes": peak[k] * elem, "wasted": 1 - used / held[k] if held[k] else 0.0,
                  "source": "measured (blocks the run took)" if k == "paged" else "computed for the same requests"}
    return out


def stored_positions(tables, held: dict[str, int], page_size: int) -> int:
    """Positions whose keys and values the pool stores, each once: a block's filled slots are the most any request
    holding it wrote there (requests sharing a prefix block wrote the same slots)."""
    filled: dict[int, int] = {}
    for rid, table in tables:
        n = held.get(rid, 0)
        for i, block in enumerate(table):
            filled[block] = max(filled.get(block, 0), min(page_size, max(0, n - i * page_size)))
    return sum(filled.values())


def step_time_vs_batch(lm: LoadedModel, sizes=(1, 2, 4, 8, 16, 32), steps: int = 8, context: int = 64) -> list[dict]:
    """The measured decode pass with B sequences sharing it: each B gets B requests prefilled to ~context
    positions, then `steps` decode passes are timed (median). Prefix sharing off: every row's keys are its own."""
    out = []
    base = None
    for b in sizes:
        specs = [RequestSpec(PROMPTS[i % len(PROMPTS)], context + steps + 2, 0) for i in range(b)]
        run = ServingRun(lm, specs, stop_on_eos=False, record=False, page_size=16,
                         num_blocks=b * (-(-(context + 3 * steps + 40) // 16)), max_batch_tokens=max(256, 64 * b),
                         prefix_sharing=False)
        while not all(r.decoding for r in run.requests) or min(len(r.tokens) for r in run.requests) < context:
            run.step()
        times = [run.step().forward_ms for _ in range(steps)]
        ms = statistics.median(times)
        base = base or ms
        work = batched_decode(lm.spec, b, context + steps // 2, lm.elem_bytes)  # the middle of the timed steps
        out.append({"batch": b, "decode_ms": ms, "over_batch_1": ms / base, "per_sequence_ms": ms / b,
                    "spread": [round(min(times), 3), round(max(times), 3)], "context": work["context"],
                    "flops": work["flops"], "bytes": work["bytes"], "intensity": work["intensity"],
                    "achieved": work["flops"] / (ms / 1e3)})
    return out


REAL_MODEL = "Llama-3-8B"  # a published shape whose batched decode reaches an H100's ridge (at ~330 requests)


def batch_roofline(rows: list[dict], lm: LoadedModel, here, gpu) -> dict:
    """The measured passes of `step_time_vs_batch` on this device's roofline, and a GPU's PREDICTION beside them
    (roofline.batch_roofline, in its own dtype: nothing ran there), for the same model and for REAL_MODEL; with the
    batch at which each reaches its ridge (estimates.saturating_batch; None: no batch does, each request's K/V
    reads growing as fast as its FLOPs)."""
    from engine.forward.estimates import saturating_batch
    from engine.load.rungs import model_name
    from engine.measure import kvcalc, roofline

    spec, elem_bytes = lm.spec, lm.elem_bytes
    context = rows[0]["context"]
    ridge_here = here.peak_flops / here.bandwidth_for(rows[0]["bytes"])  # at the bytes these passes move
    real = kvcalc.from_table(REAL_MODEL)
    return {"measured": rows, "here": here, "gpu": gpu, "context": context, "ridge_here": ridge_here,
            "saturates_here": saturating_batch(spec, context, elem_bytes, ridge_here),
            "predicted": roofline.batch_roofline(spec, context, gpu), "model": model_name(lm),
            "saturates_gpu": saturating_batch(spec, context, gpu.elem_bytes, gpu.ridge),
            "real": REAL_MODEL, "predicted_real": roofline.batch_roofline(real, context, gpu),
            "saturates_real": saturating_batch(real, context, gpu.elem_bytes, gpu.ridge)}


def _log_ways(res: dict, log) -> None:
    for k, label in (("continuous", "continuous batching (ours)"), ("one_at_a_time", "one request at a time"),
                     ("static_batch", "static batch (padded)"), ("generate_batch", "transformers generate_batch")):
        if res[f"{k}_tokens_per_s"] is not None:
            log(f"    {label:32s} {res[f'{k}_tokens_per_s']:8.0f} tokens/s   same tokens: {res['same_tokens'].get(k)}")


def run_all(lm: LoadedModel, rounds: int = 3, log=print) -> dict:
    """The `serving` part of `python -m engine bench`."""
    res = throughput(lm, rounds=rounds, log=log)
    log(f"  8 requests x {res['new_tokens']} new tokens (page {DEFAULTS['page_size']}, {DEFAULTS['num_blocks']} "
        f"blocks, {DEFAULTS['max_batch_tokens']} tokens per pass), medians of {rounds} alternated rounds:")
    _log_ways(res, log)
    log(f"    continuous / one at a time = x{res['continuous_over_one_at_a_time']:.2f} (target >= {TARGET_OVER_ONE}); "
        f"/ generate_batch = x{res['continuous_over_generate_batch']:.2f} (target >= {TARGET_OVER_GENERATE_BATCH}); "
        f"traced / untraced = {res['traced_over_untraced']:.2f} (target <= {TARGET_TRACED})")
    mixed = throughput(lm, new_tokens=MIXED, rounds=rounds, log=log)
    res["mixed_lengths"] = {k: v for k, v in mixed.items() if k != "sizing"}
    log(f"  the same 8 prompts asking for {MIXED} new tokens (a static batch runs every row to the longest):")
    _log_ways(mixed, log)
    log(f"    continuous / static batch = x{mixed['continuous_over_static_batch']:.2f}; / one at a time = "
        f"x{mixed['continuous_over_one_at_a_time']:.2f}")
    run = serving_run(lm, [RequestSpec(p, 16 + 8 * i, 2 * i) for i, p in enumerate(PROMPTS)], record=True)
    res["memory"] = memory(run)
    log("  KV memory held, averaged over the steps of a run with staggered arrivals and lengths:")
    for k in ("paged", "reserve_max_length", "static_padding"):
        v = res["memory"][k]
        log(f"    {k:20s} peak {v['peak_bytes'] / 2**20:7.2f} MiB   wasted {v['wasted']:6.1%}   ({v['source']})")
    res["step_time_vs_batch"] = step_time_vs_batch(lm)
    log("  one decode pass shared by B sequences (median of 8 passes at ~64 positions each):")
    for row in res["step_time_vs_batch"]:
        log(f"    B = {row['batch']:3d}: {row['decode_ms']:7.2f} ms  (x{row['over_batch_1']:.2f} of B = 1; "
            f"{row['per_sequence_ms']:.3f} ms per sequence)")
    return res



def decode_stall(run: ServingRun, long_id: str) -> dict:
    """While `long_id` prefills, how long do the requests already decoding wait between two of their tokens?

    A gap between two tokens of such a request counts when it overlaps the long prompt's prefill (from its arrival
    to the pass that chose its first token), however short: with chunking off that prefill is one pass, and the
    decoders' gap runs from the step before it to the step after. In steps (passes they sat out, and which) and in
    measured ms (the time between their tokens); and the long request's own time to first token. Read off the
    recorded run's steps: the same records its timeline is drawn from."""
    long = run.requests[int(long_id[1:])]
    start, end = long.arrive, long.first_token_step if long.first_token_step is not None else len(run.records) - 1
    worst_steps, worst_ms, sat_out = 0, 0.0, {}
    for r in run.requests:
        if r.id == long_id or r.first_token_step is None or r.first_token_step >= long.arrive:
            continue  # only those already decoding when the long prompt arrived
        made = [s.step for s in run.records if any(row.id == r.id and row.token_id is not None for row in s.rows)]
        for a, b in zip(made, made[1:]):
            if a <= end and b >= start:  # the gap between these two tokens overlaps the long prompt's prefill
                if b - a > 1:
                    sat_out.setdefault(r.id, []).extend(range(a + 1, b))
                worst_steps = max(worst_steps, b - a - 1)
                worst_ms = max(worst_ms, run.clock_ms(b) - run.clock_ms(a))
    lat = run.latency(long)
    return {"skipped_steps": worst_steps, "longest_gap_ms": worst_ms, "long_ttft_steps": lat.ttft_steps,
            "long_ttft_ms": lat.ttft_ms, "prefill_passes": long.chunks, "long_prompt_tokens": long.prompt_len,
            "sat_out": sat_out}


def same_as_alone(run: ServingRun) -> dict[str, bool]:
    """Per request: are its tokens exactly those of its prompt decoded alone (a Stepper, the same sampling, length
    and stop rule)? Preempted and recomputed, sharing cached blocks or not, a request must not notice the server."""
    out = {}
    for r in run.requests:
        alone = Stepper(run.lm, r.prompt, sampling=r.seq.sampling, max_new_tokens=r.max_new_tokens,
                        stop_on_eos=r.seq.stop_on_eos, record=False, repeats=1)
        alone.run()
        out[r.id] = alone.generated_ids == r.generated_ids
    return out


def policy_comparison(lm: LoadedModel, requests: list[RequestSpec], sizing: dict, sampling=None) -> dict:
    """The same requests served under each preemption policy (engine/generate/serving/scheduler.py), to the end:
    who was preempted and when, the positions computed again, the engine steps it took, and the exactness check (every request's tokens the ones it gets alone)."""
    from engine.generate.serving.run import PREEMPTION

    out = {}
    for policy in PREEMPTION:
        run = ServingRun(lm, requests, sampling=sampling, record=True, **{**sizing, "preemption": policy})
        run.run()
        out[policy] = {"steps": len(run.records), "preemptions": run.preemptions,
                       "preempted": [(s.step, rid) for s in run.records for rid in s.preempted],
                       "recomputed": sum(r.recomputed_tokens for r in run.requests),
                       "same_as_alone": same_as_alone(run)}
        run.free()
    return out


def chunking_comparison(lm: LoadedModel, requests: list[RequestSpec], sizing: dict, sampling=None) -> dict:
    """The same requests with chunked prefill on and off: the decode stall the long prompt causes, each way.

    The long prompt is the request with the longest prompt. Each way keeps its runs' step records and request ids,
    so a page draws the timelines its table was computed from. A short warm-up run goes first (dropped): the
    first paged passes of a process are slower, and would otherwise land on whichever way runs first."""
    warm = ServingRun(lm, requests[:1], sampling=sampling, record=False, **sizing)
    warm.run(3)
    warm.free()
    out = {}
    for chunking in (True, False):
        run = ServingRun(lm, requests, sampling=sampling, **{**sizing, "chunking": chunking})
        run.run()
        long_id = max(run.requests, key=lambda r: r.prompt_len).id
        out["on" if chunking else "off"] = {**decode_stall(run, long_id), "long_id": long_id,
                                            "same_tokens": None, "tokens": [r.generated_ids for r in run.requests],
                                            "steps": list(run.records), "ids": [r.id for r in run.requests]}
        run.free()  # the pool goes; the records copied above stay
    same = out["on"].pop("tokens") == out["off"].pop("tokens")
    out["on"]["same_tokens"] = out["off"]["same_tokens"] = same
    return out


def roomy_check(run: ServingRun, requests: list[RequestSpec], sizing: dict, sampling=None) -> dict:
    """A finished run whose pool was too small (requests preempted and recomputed), against the same requests
    served with a pool that holds them all at once: the same tokens? (the preemption scenario's claim, checked
    like chunking_comparison's "same tokens either way"). Both runs stop where the page's run stops."""
    need = sum(-(-(r.prompt_len + r.max_new_tokens) // run.page_size) for r in run.requests)
    roomy = ServingRun(run.lm, requests, sampling=sampling, record=False, max_requests=len(requests),
                       **{**sizing, "num_blocks": max(sizing["num_blocks"], need)})
    roomy.run()
    tokens = [r.generated_ids for r in roomy.requests]
    preempted = sorted({rid for s in run.records for rid in s.preempted}, key=lambda rid: int(rid[1:]))
    out = {"same_tokens": tokens == [r.generated_ids for r in run.requests], "preempted": preempted,
           "roomy_blocks": roomy.num_blocks, "blocks": run.num_blocks}
    roomy.free()
    return out

