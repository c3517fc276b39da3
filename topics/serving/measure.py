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
                 batched.batched_decode (B tokens share one read of the weights), its FLOP/s from the
                 measured time, beside a GPU's prediction for the same model and for a published 8B one.
                 A bigger batch does more work: timed faster than a smaller one (their passes not even
                 overlapping), both are timed again; if it still is, the sweep says the server was busy
    a queue      more requests than batch slots, of mixed lengths, arriving over time, served with continuous
                 and with static batching (`batching_comparison`), alternated rounds after a warm-up; and the same
                 requests in 200 random orders, their engine steps counted both ways (topics/serving/orders.py)
    in pairs     every request at once, one length: continuous and static batching back to back, round after round
                 (`paired`): the same passes either way, so the ratio of each pair says what paging costs

perf_counter around a device sync, as everywhere; nothing here is a test: targets are printed beside the figures.
Every function returns a frozen record (topics/serving/record.py); `to_dict()` only where JSON is written.
"""

from __future__ import annotations

import statistics
import time

from engine.generate.batch import run_batch
from engine.generate.serving.requests import RequestSpec
from engine.generate.serving.run import DEFAULTS, ServingRun
from engine.generate.serving.scheduler import Phase
from engine.generate.stepper import Stepper
from engine.load.loaded import LoadedModel
from engine.timing import span
from physics.batched import batched_decode
from topics.serving.orders import OrderSpread, order_spread
from topics.serving.record import (
    ORDER_SLACK,
    BatchingComparison,
    BatchingWay,
    BatchPass,
    BatchRoofline,
    BatchSweep,
    ChunkingComparison,
    ChunkingWay,
    Held,
    Memory,
    Paired,
    PolicyRun,
    RoomyCheck,
    ServingBench,
    Sharing,
    Stall,
    Throughput,
)
from topics.serving.reference import generate_batch, reference_model
from topics.serving.scenarios import SCENARIOS
from topics.serving.slots import sat_out, slot_use

PROMPTS = ["Once upon a time", "Tom had a red ball. He", "The sun was hot and the dog",
           "Lily and Max went to the park to play with", "One day, a little girl named Amy found a baby bird.",
           "Ben wanted a cookie, so he", "The little cat was sad because", "Mia shared her cake with her friends."]
TARGET_OVER_ONE = 3.0  # continuous batching of 8 requests against one at a time
TARGET_OVER_GENERATE_BATCH = 0.9
TARGET_TRACED = 1.3
TARGET_OVER_STATIC = (0.9, 1.1)  # every request at once, one length: continuous and static do the same passes
TARGET_QUEUE = 1.5  # static / continuous engine steps on the queue's requests, median over random orders
RETIMES = 2  # a batch sweep whose order contradicts physics is timed again at most this many more times


def serving_run(lm, specs, record: bool = False, **sizing) -> ServingRun:
    run = ServingRun(lm, specs, stop_on_eos=False, record=record, **{**DEFAULTS, **sizing})
    run.run()
    return run


MIXED = [64, 8, 16, 64, 8, 32, 16, 48]  # the same 8 prompts asking for different lengths


def throughput(lm: LoadedModel, prompts: list[str] = PROMPTS, new_tokens: int | list[int] = 64, rounds: int = 3,
               log=print, traced_too: bool = True) -> Throughput:
    """Tokens/s of the same requests four ways (and traced vs untraced), alternated; round 0 a warm-up.

    new_tokens: one length for all, or one per request. With different lengths a static batch still runs every
    row to the longest (only the tokens asked for count), and generate_batch is left out (it takes one length).
    traced_too=False leaves out the run with its full record on (a page that shows only the four ways)."""
    return throughput_side_by_side(lm, prompts, {"only": new_tokens}, rounds, log, traced_too)["only"]


def throughput_side_by_side(lm: LoadedModel, prompts: list[str], workloads: dict[str, int | list[int]],
                            rounds: int = 1, log=print, traced_too: bool = False) -> dict[str, Throughput]:
    """`throughput` of several workloads of the same prompts (one length for all, mixed lengths...), every way of
    every workload alternated in the same rounds, so no workload gets a quieter machine than another."""
    plans = {name: _ways(lm, prompts, n, traced_too) for name, n in workloads.items()}
    jobs = [(name, way) for name, (ways, _, _, _) in plans.items() for way in ways]
    ms: dict[tuple[str, str], list[float]] = {job: [] for job in jobs}
    for r in range(rounds + 1):
        for job in jobs[r % len(jobs):] + jobs[: r % len(jobs)]:
            took = plans[job[0]][0][job[1]]()
            if r:
                ms[job].append(took)
        if r == 0:
            log("  warm-up round done (excluded)")
    out = {}
    for name, (ways, tokens, total, passes) in plans.items():
        med = {k: statistics.median(ms[(name, k)]) for k in ways}
        rate = {k: total / (med[k] / 1e3) for k in ways}
        asked = workloads[name]
        out[name] = Throughput(
            requests=len(prompts), new_tokens=tuple(asked) if isinstance(asked, list) else asked, rounds=rounds,
            sizing=dict(DEFAULTS), ms={k: tuple(round(x, 2) for x in ms[(name, k)]) for k in ways},
            passes=dict(passes), same_tokens={k: v == tokens["one_at_a_time"] for k, v in tokens.items()},
            continuous_tokens_per_s=rate["continuous"], one_at_a_time_tokens_per_s=rate["one_at_a_time"],
            static_batch_tokens_per_s=rate["static_batch"], generate_batch_tokens_per_s=rate.get("generate_batch"),
            traced_tokens_per_s=rate.get("traced"),
            continuous_over_one_at_a_time=med["one_at_a_time"] / med["continuous"],
            continuous_over_generate_batch=(med["generate_batch"] / med["continuous"] if "generate_batch" in med
                                            else None),
            continuous_over_static_batch=med["static_batch"] / med["continuous"],
            traced_over_untraced=med["traced"] / med["continuous"] if "traced" in med else None)
    return out


PAIRED_ROUNDS = 9


def paired(lm: LoadedModel, prompts: list[str], new_tokens: int | list[int], way: str, against: str,
           rounds: int = PAIRED_ROUNDS, log=print) -> Paired:
    """Two of `_ways` timed in pairs (record.Paired): a warm-up round, then `rounds` rounds of both back to back, the
    first of the pair alternating; every round's tokens checked the same either way."""
    ways, tokens, _, passes = _ways(lm, prompts, new_tokens, traced_too=False)
    ms, cpu = [], []
    for r in range(rounds + 1):
        pair = (way, against) if r % 2 == 0 else (against, way)
        took, used = {}, {}
        for name in pair:
            c0 = time.process_time()
            took[name] = ways[name]()
            used[name] = (time.process_time() - c0) * 1e3
        if tokens[way] != tokens[against]:
            raise RuntimeError(f"{way} and {against} made different tokens")
        if r:
            ms.append((round(took[way], 2), round(took[against], 2)))
            cpu.append((round(used[way], 2), round(used[against], 2)))
        else:
            log("  warm-up pair done (excluded)")
    return Paired(way=way, against=against, rounds=rounds, ms=tuple(ms), passes=(passes[way], passes[against]),
                  cpu_ms=tuple(cpu))


def _ways(lm: LoadedModel, prompts: list[str], new_tokens: int | list[int], traced_too: bool):
    """The ways to serve one workload, each a callable returning its measured ms: ({way: fn}, tokens, total)."""
    lengths = new_tokens if isinstance(new_tokens, list) else [new_tokens] * len(prompts)
    specs = [RequestSpec(p, n, 0) for p, n in zip(prompts, lengths)]
    ids = [lm.tokenizer(p)["input_ids"] for p in prompts]
    same_length = len(set(lengths)) == 1
    reference = reference_model(lm) if same_length else None
    tokens: dict[str, list[int] | list[list[int]]] = {}
    passes = {"one_at_a_time": sum(lengths), "static_batch": max(lengths)}  # a pass per token; the longest row's

    def continuous():
        run = serving_run(lm, specs)
        tokens["continuous"] = [r.generated_ids for r in run.requests]
        passes["continuous"] = run.passes
        return sum(run.step_ms)

    def traced():
        return sum(serving_run(lm, specs, record=True).step_ms)

    def one_at_a_time():
        out = []
        with span(lm.device) as took:
            for p, n in zip(prompts, lengths):
                s = Stepper(lm, p, max_new_tokens=n, stop_on_eos=False, record=False, repeats=1)
                s.run()
                out.append(s.generated_ids)
        tokens["one_at_a_time"] = out
        return took.ms

    def static_batch():
        with span(lm.device) as took:
            run = run_batch(lm, prompts, new_tokens=max(lengths), max_batch=len(prompts), record=False,
                            stop_on_eos=False)  # every row to the longest, as one at a time and generate_batch do
        tokens["static_batch"] = [list(g)[:n] for g, n in zip(run.generated, lengths)]
        return took.ms

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
    return ways, tokens, sum(lengths), passes


def memory(run: ServingRun, upto: int | None = None) -> Memory:
    """Positions of KV memory held at each step of a recorded run (up to step `upto`, all if None), three ways, and
    the share of them wasted (held, but holding no token's keys and values), averaged over the steps that ran a pass.

    Paged blocks are counted as the pool holds them: a block in several requests' tables (a shared prefix) is held
    once and its filled positions are stored once, so its waste is what its blocks hold that no request wrote (0 to
    100 %). What sharing did is said apart, over the same steps: the positions the requests read (each request's
    own count, a shared position once per request) per position stored, and the prompt tokens not computed
    because their blocks were found held or cached (`prefix_skipped`). The other two allocators share nothing:
    each request's positions are its own."""
    elem = run.kv.bytes_per_block // run.page_size  # bytes of one position, all layers, K and V
    max_len = run.lm.spec.max_positions
    records = run.records if upto is None else run.records[: upto + 1]
    held = {"paged": 0, "reserve_max_length": 0, "static_padding": 0}
    served_total = stored_total = steps = 0
    peak = dict.fromkeys(held, 0)
    longest = max(r.prompt_len for r in run.requests) + max(r.max_new_tokens for r in run.requests)
    for s in records:
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
    sharing = Sharing(steps=steps, served=served_total, stored=stored_total, held=held["paged"],
                      saved=served_total - stored_total,  # positions not stored twice, summed over the steps
                      served_per_held=served_total / held["paged"] if held["paged"] else 0.0,
                      skipped=prefix_skipped(records))

    def allocator(k: str) -> Held:
        used = stored_total if k == "paged" else served_total
        return Held(peak_bytes=peak[k] * elem, wasted=1 - used / held[k] if held[k] else 0.0,
                    source="measured (blocks the run took)" if k == "paged" else "computed for the same requests")

    return Memory(position_bytes=elem, max_length=max_len, sharing=sharing, **{k: allocator(k) for k in held})


def prefix_skipped(steps) -> int:
    """Prompt tokens these steps did not compute: the positions each admitted request took from blocks others held or
    the pool still cached (prefix hits). The one count the status line and the sharing sentence both say."""
    return sum(n for s in steps for _, n in s.prefix_hits)


def stored_positions(tables, held: dict[str, int], page_size: int) -> int:
    """Positions whose keys and values the pool stores, each once: a block's filled slots are the most any request
    holding it wrote there (requests sharing a prefix block wrote the same slots)."""
    filled: dict[int, int] = {}
    for rid, table in tables:
        n = held.get(rid, 0)
        for i, block in enumerate(table):
            filled[block] = max(filled.get(block, 0), min(page_size, max(0, n - i * page_size)))
    return sum(filled.values())


def step_time_vs_batch(lm: LoadedModel, sizes=(1, 2, 4, 8, 16, 32), steps: int = 8, context: int = 64,
                       retimes: int = RETIMES) -> BatchSweep:
    """The measured decode pass with B sequences sharing it: each B gets B requests prefilled to ~context
    positions, then `steps` decode passes are timed (median). Prefix sharing off: every row's keys are its own.

    A few passes at the smallest B go first and are left out (a process's first paged passes are slower, and would
    land on B = 1). A pass of more sequences does more work, so where a bigger B's median came out faster than a
    smaller one's (`_against_physics`), both are timed again, at most `retimes` more times; if the order still
    contradicts physics, the sweep's note says so and that the server was busy."""
    warmup = _time_batch(lm, sizes[0], 3, context)
    times = {b: _time_batch(lm, b, steps, context) for b in sizes}
    timed = dict.fromkeys(sizes, 1)
    for _ in range(retimes):
        wrong = _against_physics(sizes, times)
        if not wrong:
            break
        for b in {b for pair in wrong for b in pair}:
            times[b] = _time_batch(lm, b, steps, context)
            timed[b] += 1
    wrong = _against_physics(sizes, times)
    base = statistics.median(times[sizes[0]])
    rows = []
    for b in sizes:
        ms = statistics.median(times[b])
        work = batched_decode(lm.spec, b, context + steps // 2, lm.elem_bytes)  # the middle of the timed steps
        rows.append(BatchPass(batch=b, decode_ms=ms, over_batch_1=ms / base, per_sequence_ms=ms / b,
                              spread=(round(min(times[b]), 3), round(max(times[b]), 3)), context=work.context,
                              flops=work.flops, bytes=work.bytes, intensity=work.intensity,
                              achieved=work.flops / (ms / 1e3), timed=timed[b]))
    note = None
    if wrong:
        small, big = wrong[0]
        a, b = (statistics.median(times[x]) for x in (small, big))
        note = (f"The server was busy while these were timed: B = {big} came out faster than B = {small} ({b:.1f} "
                f"against {a:.1f} ms, medians) though it does ×{big / small:g} the rows, and it still did when both "
                f"were timed {max(timed[small], timed[big])} times. The points are as measured.")
    return BatchSweep(rows=tuple(rows), warmup_ms=round(sum(warmup), 3), note=note)




def _against_physics(sizes, times: dict[int, list[float]]) -> list[tuple[int, int]]:
    """(smaller B, bigger B) pairs where the bigger batch's median pass came out faster than the smaller's, by more
    than ORDER_SLACK (where a pass is overhead-bound two sizes can time alike): more rows of the same work cannot
    take less time, so that is the machine, not the model."""
    med = {b: statistics.median(times[b]) for b in sizes}
    return [(a, b) for i, a in enumerate(sizes) for b in sizes[i + 1:] if med[b] * ORDER_SLACK < med[a]]


def _time_batch(lm: LoadedModel, b: int, steps: int, context: int) -> list[float]:
    """`steps` decode passes of b sequences at ~context positions each, timed (ms each)."""
    specs = [RequestSpec(PROMPTS[i % len(PROMPTS)], context + steps + 2, 0) for i in range(b)]
    run = ServingRun(lm, specs, stop_on_eos=False, record=False, page_size=16,
                     num_blocks=b * (-(-(context + 3 * steps + 40) // 16)), max_batch_tokens=max(256, 64 * b),
                     prefix_sharing=False)
    while not all(r.decoding for r in run.requests) or min(len(r.tokens) for r in run.requests) < context:
        run.step()
    times = [run.step().forward_ms for _ in range(steps)]
    run.free()
    return times


REAL_MODEL = "Llama-3-8B"  # a published shape whose batched decode reaches an H100's ridge (at ~330 requests)


def batch_roofline(sweep: BatchSweep, lm: LoadedModel, here, gpu) -> BatchRoofline:
    """The measured passes of `step_time_vs_batch` on this device's roofline, and a GPU's PREDICTION beside them
    (roofline.batch_roofline, in its own dtype: nothing ran there), for the same model and for REAL_MODEL; with the
    batch at which each reaches its ridge (batched.saturating_batch; None: no batch does, each request's K/V
    reads growing as fast as its FLOPs), and the sooner one at which the GPU's step stops being its weights' read
    (batched.batch_knee)."""
    from physics import kvcalc, roofline
    from physics.batched import batch_knee, saturating_batch
    from physics.rungs import model_name

    spec, elem_bytes, rows = lm.spec, lm.elem_bytes, sweep.rows
    context = rows[0].context
    ridge_here = here.ridge  # the device's one ridge (these passes may fit its cache: that is the cache's roof)
    real = kvcalc.from_table(REAL_MODEL)
    return BatchRoofline(
        measured=rows, here=here, gpu=gpu, context=context, ridge_here=ridge_here,
        saturates_here=saturating_batch(spec, context, elem_bytes, ridge_here),
        predicted=tuple(roofline.batch_roofline(spec, context, gpu)), model=model_name(lm),
        saturates_gpu=saturating_batch(spec, context, gpu.elem_bytes, gpu.ridge), real=REAL_MODEL,
        predicted_real=tuple(roofline.batch_roofline(real, context, gpu)),
        saturates_real=saturating_batch(real, context, gpu.elem_bytes, gpu.ridge),
        knee_gpu=batch_knee(spec, context, gpu.elem_bytes, gpu.ridge),
        knee_real=batch_knee(real, context, gpu.elem_bytes, gpu.ridge))


def _log_ways(res: Throughput, log) -> None:
    for k, label in (("continuous", "continuous batching (ours)"), ("one_at_a_time", "one request at a time"),
                     ("static_batch", "static batch (padded)"), ("generate_batch", "transformers generate_batch")):
        if res.tokens_per_s(k) is not None:
            passes = f"   {res.passes[k]} passes" if k in res.passes else ""  # generate_batch's are its own
            log(f"    {label:32s} {res.tokens_per_s(k):8.0f} tokens/s   same tokens: {res.same_tokens.get(k)}{passes}")


def log_queue(q: BatchingComparison, log=print) -> None:
    """The queue comparison in a few lines (the bench and `python -m engine serve --compare-batching`)."""
    log(f"  a queue: {q.requests} requests of {min(q.lengths)}-{max(q.lengths)} new tokens arriving over steps "
        f"{min(q.arrivals)}-{max(q.arrivals)}, {q.slots} batch slots; medians of {q.rounds} alternated rounds:")
    for way in (q.continuous, q.static):
        log(f"    {way.batching + ' batching':24s} {way.tokens_per_s:8.0f} tokens/s   {way.engine_steps} engine steps, "
            f"{way.idle_slot_steps} slot-steps wasted (padding or empty) while a request waited")
    log(f"    continuous / static = x{q.ratio:.2f} in this order; same tokens either way: {q.same_tokens}")


def order_note(o: OrderSpread, given: str = "the shipped order") -> str:
    """Where the given order stands among the random ones, in words: the page and the CLI say the same."""
    if o.shipped_is_most_favourable:
        where = (f"the most favourable to continuous batching of all: no random order does better, "
                 f"{o.at_or_above_shipped:.0%} of them do as well")
    else:
        where = f"{o.at_or_above_shipped:.0%} of random orders are at least as favourable to continuous batching"
    return f"{given} gives x{o.shipped:.2f} ({o.shipped_steps[1]} against {o.shipped_steps[0]} steps): {where}"


def log_orders(o: OrderSpread, log=print, given: str = "the shipped order") -> None:
    """The same requests in random orders (topics/serving/orders.py): static/continuous engine steps."""
    log(f"  the same requests in {o.orders} random orders (seed {o.seed}; the real scheduler's engine steps, no "
        f"pass run): static / continuous steps median x{o.median:.2f} (target >= {TARGET_QUEUE}), p10 x{o.p10:.2f}, "
        f"p90 x{o.p90:.2f}")
    log(f"    {order_note(o, given)}")


def run_all(lm: LoadedModel, rounds: int = 3, log=print) -> ServingBench:
    """The `serving` part of `python -m engine bench`."""
    res = throughput(lm, rounds=rounds, log=log)
    log(f"  8 requests x {res.new_tokens} new tokens (page {DEFAULTS['page_size']}, {DEFAULTS['num_blocks']} "
        f"blocks, {DEFAULTS['max_batch_tokens']} tokens per pass), medians of {rounds} alternated rounds:")
    _log_ways(res, log)
    log(f"    continuous / one at a time = x{res.continuous_over_one_at_a_time:.2f} (target >= {TARGET_OVER_ONE}); "
        f"/ generate_batch = x{res.continuous_over_generate_batch:.2f} (target >= {TARGET_OVER_GENERATE_BATCH}); "
        f"traced / untraced = {res.traced_over_untraced:.2f} (target <= {TARGET_TRACED})")
    equal = paired(lm, PROMPTS, res.new_tokens, "continuous", "static_batch", rounds=PAIRED_ROUNDS, log=log)
    lo, hi = TARGET_OVER_STATIC
    log(f"    continuous / static batch = x{equal.median:.2f} by the clock, x{equal.cpu_median:.2f} by the CPU time "
        f"each used (medians of {equal.rounds} rounds of the two back to back; per round x{min(equal.ratios):.2f}-"
        f"x{max(equal.ratios):.2f} and x{min(equal.cpu_ratios):.2f}-x{max(equal.cpu_ratios):.2f}; target x{lo}-x{hi}: "
        f"every request at once and one length, the same {equal.passes[0]} passes and the same work either way)")
    mixed = throughput(lm, new_tokens=MIXED, rounds=rounds, log=log)
    log(f"  the same 8 prompts asking for {MIXED} new tokens, all at once (a static batch runs every row to the "
        "longest; continuous batching drops finished rows, but with no queue it takes as many passes):")
    _log_ways(mixed, log)
    log(f"    continuous / static batch = x{mixed.continuous_over_static_batch:.2f}; / one at a time = "
        f"x{mixed.continuous_over_one_at_a_time:.2f}")
    queue = batching_comparison(lm, rounds=rounds, log=log)
    log_queue(queue, log)
    sc = SCENARIOS["queue"]
    orders = order_spread(lm, sc["requests"], sc["sizing"])
    log_orders(orders, log)
    run = serving_run(lm, [RequestSpec(p, 16 + 8 * i, 2 * i) for i, p in enumerate(PROMPTS)], record=True)
    mem = memory(run)
    log("  KV memory held, averaged over the steps of a run with staggered arrivals and lengths:")
    for k in Memory.ALLOCATORS:
        v = getattr(mem, k)
        log(f"    {k:20s} peak {v.peak_bytes / 2**20:7.2f} MiB   wasted {v.wasted:6.1%}   ({v.source})")
    sweep = step_time_vs_batch(lm)
    log(f"  one decode pass shared by B sequences (median of 8 passes at ~64 positions each; warm-up "
        f"{sweep.warmup_ms:.1f} ms excluded):")
    for row in sweep.rows:
        log(f"    B = {row.batch:3d}: {row.decode_ms:7.2f} ms  (x{row.over_batch_1:.2f} of B = 1; "
            f"{row.per_sequence_ms:.3f} ms per sequence" + (f"; timed {row.timed} times" if row.timed > 1 else "")
            + ")")
    if sweep.note:
        log(f"    {sweep.note}")
    return ServingBench(throughput=res, mixed=mixed, queue=queue, memory=mem, batch=sweep, orders=orders,
                        equal=equal)


def decode_stall(run: ServingRun, long_id: str) -> Stall:
    """What the requests in the pool lived through while `long_id` (the longest prompt) was served: the steps each
    sat out (topics.serving.slots.sat_out, the very cells the timeline draws dashed), what each such
    step's pass held instead, the longest measured wait between two consecutive tokens of another request while the
    long prompt was prefilled (from its arrival to its first token), and the long request's own time to first token.
    Read off the recorded run's steps: the same records its timeline is drawn from."""
    long = run.requests[int(long_id[1:])]
    out = sat_out(run.records)
    steps = {k for v in out.values() for k in v}
    filled = {s.step: tuple((r.id, r.q_len) for r in s.rows) for s in run.records if s.step in steps}
    start, end = long.arrive, long.first_token_step if long.first_token_step is not None else len(run.records) - 1
    longest = 0.0
    for r in run.requests:  # the others' waits between two tokens that overlap the long prompt's prefill
        if r is not long:
            gaps = zip(r.token_steps, r.token_steps[1:])
            longest = max([longest] + [run.clock_ms(b) - run.clock_ms(a) for a, b in gaps if a <= end and b >= start])
    lat = run.latency(long)
    return Stall(sat_out=out, filled_by=filled, longest_gap_ms=longest, long_id=long_id,
                 long_ttft_steps=lat.ttft_steps, long_ttft_ms=lat.ttft_ms, prefill_passes=long.chunks,
                 long_prompt_tokens=long.prompt_len, prompt_tokens={r.id: r.prompt_len for r in run.requests})


def same_as_alone(run: ServingRun, alone: dict[str, list[int]] | None = None) -> dict[str, bool]:
    """Per request: are its tokens exactly those of its prompt decoded alone (a Stepper, the same sampling, length
    and stop rule)? Preempted and recomputed, sharing cached blocks or not, a request must not notice the server.
    `alone` keeps each request's tokens alone by id, for runs of the same requests (each decoded alone once)."""
    alone = {} if alone is None else alone
    out = {}
    for r in run.requests:
        if r.id not in alone:
            stepper = Stepper(run.lm, r.prompt, sampling=r.seq.sampling, max_new_tokens=r.max_new_tokens,
                              stop_on_eos=r.seq.stop_on_eos, record=False, repeats=1)
            stepper.run()
            alone[r.id] = stepper.generated_ids
        out[r.id] = alone[r.id] == r.generated_ids
    return out


def policy_comparison(lm: LoadedModel, requests: list[RequestSpec], sizing: dict,
                      sampling=None) -> tuple[PolicyRun, ...]:
    """The same requests served under each preemption policy (engine/generate/serving/scheduler.py), to the end:
    who was preempted and when, the positions computed again, the engine steps it took, and the exactness check
    (every request's tokens the ones it gets alone)."""
    from engine.generate.serving.run import PREEMPTION

    out, alone = [], {}  # the same requests under every policy: each decoded alone once
    for policy in PREEMPTION:
        run = ServingRun(lm, requests, sampling=sampling, record=True, **{**sizing, "preemption": policy})
        run.run()
        out.append(PolicyRun(policy=policy, steps=len(run.records), preemptions=run.preemptions,
                             preempted=tuple((s.step, rid) for s in run.records for rid in s.preempted),
                             recomputed=sum(r.recomputed_tokens for r in run.requests),
                             same_as_alone=same_as_alone(run, alone)))
        run.free()
    return tuple(out)


def chunking_comparison(lm: LoadedModel, requests: list[RequestSpec], sizing: dict,
                        sampling=None) -> ChunkingComparison:
    """The same requests with chunked prefill on and off: what each way made the requests in the pool sit out.

    The long prompt is the request with the longest prompt. Each way keeps its run's step records and request ids,
    so a page draws the timelines its table was computed from. A short warm-up run goes first (dropped): the
    first paged passes of a process are slower, and would otherwise land on whichever way runs first."""
    warm = ServingRun(lm, requests[:1], sampling=sampling, record=False, **sizing)
    warm.run(3)
    warm.free()
    ways, tokens = {}, {}
    for chunking in (True, False):
        run = ServingRun(lm, requests, sampling=sampling, **{**sizing, "chunking": chunking})
        run.run()
        long_id = max(run.requests, key=lambda r: r.prompt_len).id
        ways[chunking] = ChunkingWay(stall=decode_stall(run, long_id), steps=tuple(run.records),
                                     ids=tuple(r.id for r in run.requests))
        tokens[chunking] = [r.generated_ids for r in run.requests]
        run.free()  # the pool goes; the records kept above stay
    return ChunkingComparison(on=ways[True], off=ways[False], same_tokens=tokens[True] == tokens[False])


def roomy_check(run: ServingRun, requests: list[RequestSpec], sizing: dict, sampling=None) -> RoomyCheck:
    """A finished run whose pool was too small (requests preempted and recomputed), against the same requests
    served with a pool that holds them all at once: the same tokens? (the preemption scenario's claim, checked
    like chunking_comparison's "same tokens either way"). Both runs stop where the page's run stops."""
    need = sum(-(-(r.prompt_len + r.max_new_tokens) // run.page_size) for r in run.requests)
    roomy = ServingRun(run.lm, requests, sampling=sampling, record=False, max_requests=len(requests),
                       **{**sizing, "num_blocks": max(sizing["num_blocks"], need)})
    roomy.run()
    tokens = [r.generated_ids for r in roomy.requests]

    def in_order(ids) -> tuple[str, ...]:
        return tuple(sorted(set(ids), key=lambda rid: int(rid[1:])))

    recomputed = in_order(row.id for s in run.records for row in s.rows if row.phase == Phase.RECOMPUTE)
    out = RoomyCheck(same_tokens=tokens == [r.generated_ids for r in run.requests],
                     preempted=in_order(rid for s in run.records for rid in s.preempted), recomputed=recomputed,
                     roomy_blocks=roomy.num_blocks, blocks=run.num_blocks)
    roomy.free()
    return out


# ---------------------------------------------------------------- a queue: continuous against static batching


def batching_comparison(lm: LoadedModel, requests: list[RequestSpec] | None = None, sizing: dict | None = None,
                        sampling=None, rounds: int = 3, record: bool = False, log=print) -> BatchingComparison:
    """The same requests served with continuous and with static batching (engine/generate/serving/scheduler.py),
    the two ways alternated round by round after a warm-up round (dropped); each way's tokens/s is its tokens over
    the median round's wall time (the sum of its steps' wall times, perf_counter around a device sync). Defaults:
    the queue scenario (more requests than batch slots, mixed lengths, arriving over time), every request making
    all its tokens (end-of-text an ordinary token, so both ways make the same tokens). `record`: keep the last
    round's step records of each way (a page draws their timelines; recording costs both ways alike)."""
    sc = SCENARIOS["queue"]
    requests = sc["requests"] if requests is None else requests
    sizing = {**(sc["sizing"] if sizing is None else sizing)}

    def serve(way: str, recorded: bool) -> ServingRun:
        run = ServingRun(lm, requests, sampling=sampling, stop_on_eos=False, record=recorded,
                         **{**sizing, "batching": way})
        run.run()
        return run

    ms: dict[str, list[float]] = {"continuous": [], "static": []}
    last: dict[str, ServingRun] = {}
    for r in range(rounds + 1):
        for way in (("continuous", "static") if r % 2 == 0 else ("static", "continuous")):
            run = serve(way, record)
            if r:
                ms[way].append(sum(run.step_ms))
            if way in last:
                last[way].free()
            last[way] = run
        if r == 0:
            log("  warm-up round done (excluded)")
    if not record:  # the schedule does not depend on the clock: one recorded run each, untimed, says what it was
        for way in last:
            last[way].free()
            last[way] = serve(way, True)
    slots = sizing.get("max_seqs") or len(requests)

    def way(name: str) -> BatchingWay:
        run = last[name]
        return BatchingWay(batching=name, tokens_per_s=run.generated_tokens / (statistics.median(ms[name]) / 1e3),
                           ms=tuple(round(x, 2) for x in ms[name]), engine_steps=run.step_index, passes=run.passes,
                           tokens=run.generated_tokens,
                           idle_slot_steps=sum(u.wasted_while_waiting for u in slot_use(run.records, slots)),
                           steps=tuple(run.records) if record else ())

    out = BatchingComparison(requests=len(requests), slots=slots, lengths=tuple(q.max_new_tokens for q in requests),
                             arrivals=tuple(q.arrive for q in requests), rounds=rounds, continuous=way("continuous"),
                             static=way("static"), same_tokens=[q.generated_ids for q in last["continuous"].requests]
                             == [q.generated_ids for q in last["static"].requests],
                             ids=tuple(q.id for q in last["continuous"].requests))
    for run in last.values():
        run.free()
    return out
