"""Bytes are time, in words: tables and sentences, each a pure function of a `records.Record` (the figures are
topics/bytes/figures.py's, so `engine bytes` prints these where plotly is not installed, as on a GPU image).

Every word that judges a number ("faster", "about the same", "slower", "within", "off") is computed from that
number here (`verdict`), so a recording where bf16's decode did not speed up is never called faster
(tests/test_bytes.py hands these functions such recordings).
"""

from __future__ import annotations

import re
import statistics

import pandas as pd

from topics.bytes.records import FASTER, SLOPE_WITHIN, STORAGES, Record

PATH = "the lean pass (gpt-fast's Llama, compiled with inductor), random weights: timing only"


def verdict(ratio: float | None) -> str:
    """'faster', 'slower' or 'about the same' for a time over the reference's (FASTER either way)."""
    if ratio is None:
        return "not measured"
    return "faster" if ratio < FASTER else "slower" if ratio > 1 / FASTER else "about the same"


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def storage_rows(rec: Record) -> list[dict]:
    """Per storage: bytes, each pass's median, its bound, its ratio to the reference measured and predicted."""
    rows, ref = [], rec.reference
    for s in rec.storages():
        d, p = rec.get(s, "decode"), rec.get(s, "prefill")
        rows.append({"storage": s, "weights read": mb(d.weight_bytes),
                     "decode ms": round(d.median_ms, 1), "decode bound ms (estimate)": round(d.memory_ms(rec.rounds), 1),
                     "decode in kernels ms": f"{d.kernels_ms:.1f}" if d.kernels_ms else "–",  # text: "–" beside numbers
                     f"decode × {ref}": round(rec.ratio(s, "decode"), 2),
                     f"predicted × {ref} (bytes)": round(rec.predicted_ratio(s, "decode"), 2),
                     "prefill ms": round(p.median_ms, 1) if p else None,
                     "prefill bound ms (estimate)": round(p.compute_ms(rec.rounds), 1) if p else None,
                     f"prefill × {ref}": round(rec.ratio(s, "prefill"), 2) if p else None,
                     f"predicted × {ref} (FLOP rate)": round(rec.predicted_ratio(s, "prefill"), 2) if p else None})
    return rows


def storage_frame(rec: Record) -> pd.DataFrame:
    return pd.DataFrame(storage_rows(rec))


def short_header(column: str) -> str:
    """A storage_frame column's header as the page shows it (the full name in its help), short enough that a
    projector shows every column: 'predicted × fp32 (bytes)' → 'pred. (bytes)', 'decode in kernels ms' → 'in
    kernels ms', 'decode bound ms (estimate)' → 'memory ms (est.)', the prefill's 'compute ms (est.)' (each beside
    its phase's own ms, named by the bound it is, decode's memory and prefill's compute, as the roofline's table
    heads them)."""
    return (re.sub(r"^predicted × .+ \(([^)]*)\)$", r"pred. (\1)", column).replace("decode in kernels", "in kernels")
            .replace(" (estimate)", " (est.)").replace("decode bound", "memory").replace("prefill bound", "compute"))


def damage_frame(rec: Record) -> pd.DataFrame:
    return pd.DataFrame([{"model": d.model, "storage": d.storage, "top-1 agreement": f"{d.agreement:.2%}",
                          "spread over stories": f"{min(d.agree):.1%}–{max(d.agree):.1%}",
                          "KL nats (mean)": f"{d.kl_mean:.2e}", "KL spread": f"{min(d.kl):.1e}–{max(d.kl):.1e}",
                          "stories": len(d.agree), "tokens": d.tokens} for d in rec.damage])


def context_frame(rec: Record) -> pd.DataFrame:
    rows = [{"context": p.context, "K/V read": mb(p.kv_bytes), "weights read": mb(p.weight_bytes),
             "decode ms": round(p.median_ms, 1), "min–max": f"{min(p.samples_ms):.1f}–{max(p.samples_ms):.1f}",
             "memory bound ms (estimate)": round(p.memory_ms(rec.rounds), 1)} for p in rec.context_passes()]
    pair = rec.evicted()
    if pair:
        e = pair[0]
        rows.append({"context": f"{pair[1].context} evicted to {e.context}", "K/V read": mb(e.kv_bytes),
                     "weights read": mb(e.weight_bytes), "decode ms": round(e.median_ms, 1),
                     "min–max": f"{min(e.samples_ms):.1f}–{max(e.samples_ms):.1f}",
                     "memory bound ms (estimate)": round(e.memory_ms(rec.rounds), 1)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the sentences


def storage_sentence(rec: Record) -> str:
    """What the storages did to decode and to prefill, each judged by its own ratio."""
    out = []
    for s in rec.storages():
        if s == rec.reference:
            continue
        d, p = rec.ratio(s, "decode"), rec.ratio(s, "prefill")
        pd_, pp = rec.predicted_ratio(s, "decode"), rec.predicted_ratio(s, "prefill")
        part = (f"{s}: the decode step is {verdict(d)} (×{d:.2f} {rec.reference}'s time; its bytes ×{pd_:.2f})")
        if p is not None:
            part += f", the prefill {verdict(p)} (×{p:.2f}; its compute bound ×{pp:.2f})"
        out.append(part)
    # a step's bytes are its weights' and its K/V's: the weights' column alone gives a little less (int8 ×0.25, ×0.26)
    return "; ".join(out) + ". A decode step's bytes: the weights and the K/V it reads." if out else ""


def why_prefill(rec: Record) -> str:
    """Why each prefill moved as it did: its bound is FLOPs over its arithmetic's peak, not bytes."""
    kept, moved, rounded, ref = [], [], [], rec.reference
    base = rec.get(ref, "prefill")
    for s in rec.storages():
        p, r = rec.get(s, "prefill"), rec.ratio(s, "prefill")
        if s == ref or p is None or r is None or base is None:
            continue
        if p.arith == base.arith:
            kept.append(f"{s} ×{r:.2f} ({verdict(r)})")
            if "bf16 inputs" in p.kernel:  # torch's int4 kernel: the activations rounded to bf16 for its products
                rounded.append(s)
            continue
        peak = sorted(x.peaks[p.arith] / x.peaks[base.arith] for x in rec.rounds)[len(rec.rounds) // 2]
        part = (f"the {s} multiplies in {p.arith}: the {p.arith} matmul probed in each round ran at ×{peak:.2f} "
                f"{ref}'s, so its prefill has a compute bound ×{1 / peak:.2f} {ref}'s and took ×{r:.2f} ({verdict(r)}"
                + (": its arithmetic's rate moved, not its bytes)" if verdict(r) == "faster" else ")"))
        if p.median_ms < p.compute_ms(rec.rounds):
            part += (f"; it beat that bound (×{p.median_ms / p.compute_ms(rec.rounds):.2f}): the compiled pass "
                     f"found a faster {p.arith} path than the eager matmul the probe times, so that figure is "
                     "the probe's rate, not a bound")
        moved.append(part)
    if not kept and not moved:
        return ""
    out = "A prefill of many tokens is compute-bound: its time follows the arithmetic's rate, not the bytes."
    if kept:
        arith = "" if base.arith == ref else f" ({base.arith})"
        out += (f" The weight-only storages read fewer bytes and keep {ref}'s arithmetic{arith}, so their "
                f"prefills keep {ref}'s compute bound: " + ", ".join(kept) + f" {ref}'s time.")
        if rounded:
            out += (" (" + ", ".join(rounded) + f": products in torch's int4 kernel, which rounds its inputs to bf16 "
                    f"and computes apart from {ref}'s matmul; where it moves, the kernel moved it, not the bytes.)")
    if moved:
        joined = "; ".join(moved)
        out += (" " + joined[0].upper() + joined[1:] + ". A CPU with bf16 dot products (AVX-512 BF16) multiplies "
                "bf16 faster than fp32; one without converts each number first, and its prefill slows down.")
    return out


def decode_sentence(rec: Record) -> str:
    """Decode: each storage's step against its memory bound, and the rate its kernel read the weights at."""
    out = []
    for s in rec.storages():
        d = rec.get(s, "decode")
        out.append(f"{s} ×{d.memory_held(rec.rounds):.2f} ({d.read_rate() / 1e9:.1f} GB/s)")
    read = sorted(r.read for r in rec.rounds)[len(rec.rounds) // 2]
    out = ("A decode step reads every weight once for one token: its bound is its bytes over the read rate "
           f"({read / 1e9:.1f} GB/s, a buffer no cache holds, read each round). Each storage's step over that bound (its median over the "
           "bound's), and the rate its weights were read at: " + ", ".join(out) + ".")
    if _timed_apart(rec):  # which part shrank with the bytes is said by products_sentence
        return out
    return out + " Where the ratio grows as the bytes shrink, the kernel that reads them, not the memory, sets the time."


FOLLOWS = 1.25  # a narrower storage's time is said to follow its bytes when within this of their share of bf16's
SAME_REST = 1.33  # the time outside the kernels is called about the same when the largest is within this of the least


def _timed_apart(rec: Record):
    """(the reference's decode pass, [(storage, its decode pass)] for the others) where the kernels were timed apart
    (a CPU's recording since they are), else None."""
    ref = rec.get(rec.reference, "decode")
    split = [(s, rec.get(s, "decode")) for s in rec.storages() if s != rec.reference]
    split = [(s, p) for s, p in split if p is not None and p.kernels_ms]
    return (ref, split) if ref is not None and ref.kernels_ms and split else None


def products_sentence(rec: Record) -> str:
    """A CPU's decode steps split: inside inductor's kernels (the products) against the bytes, and the rest, which
    no byte count shrinks. "" where the kernels were not timed apart (a GPU, an older recording)."""
    apart = _timed_apart(rec)
    if apart is None:
        return ""
    ref, split = apart
    parts = ", ".join(f"{s} ×{p.kernels_ms / ref.kernels_ms:.2f} "
                      f"(its weights ×{p.weight_bytes / ref.weight_bytes:.2f})" for s, p in split)
    rest = {s: p.outside_ms for s, p in ((rec.reference, ref), *split)}
    out = (f"Not all of a step is its products. Inside inductor's compiled kernels (the products, fused with the "
           f"norms; three profiled calls each, after the rounds) {rec.reference}'s step spent {ref.kernels_ms:.1f} ms "
           f"of the {ref.profiled_ms:.1f} ms a profiled call took (the profiler adds its own time: unprofiled, the "
           f"step took {ref.median_ms:.1f} ms), and each other storage's, against that: {parts}. "
           "Where a storage's products take more than its bytes' "
           "share, its kernel, not the memory, sets their time. Outside the kernels (the attention's call, the "
           "Python that calls each kernel, the profiler's own bookkeeping): "
           + ", ".join(f"{s} {ms:.1f} ms" for s, ms in rest.items()) + ".")
    apart = {s for s, _p in split}
    whole = [s for s in rec.storages() if s != rec.reference and rec.get(s, "decode") and s not in apart]
    if whole:  # int4's product is torch's own int4 kernel, outside inductor's: not split
        out += (" Not split: " + ", ".join(whole) + f" (its product is {'an op' if len(whole) == 1 else 'ops'} "
                "outside inductor's kernels, torch's own).")
    alike = [p.outside_ms for p in (ref, *(p for _s, p in split)) if p.arith == ref.arith]  # one graph, one attention
    if len(alike) > 1 and max(alike) <= SAME_REST * min(alike):
        out += (" For the weight-only storages (one graph, one attention) that part is about the same whatever the "
                "bytes: it is why a whole step's ratio sits above its products'")
        b16 = next((p for s, p in split if s == "bf16"), None)
        whole = rec.ratio("bf16", "decode")
        if b16 is not None and whole is not None:
            out += f" (bf16's whole step ×{whole:.2f} {rec.reference}'s, its products ×{b16.kernels_ms / ref.kernels_ms:.2f})"
        out += "."
    return out


def int8_sentence(rec: Record) -> str:
    """int8 and int4 weight-only: faster than bf16 or not, each with its figure."""
    b16, out, slow = rec.ratio("bf16", "decode"), [], False
    for s, share in (("int8", "half"), ("int4", "a quarter of")):
        r = rec.ratio(s, "decode")
        if r is None or b16 is None:
            continue
        d, b = rec.get(s, "decode"), rec.get("bf16", "decode")
        if r < b16 * FASTER:
            fewer = d.bytes / b.bytes  # the step's bytes against bf16's: the time it would take were it bytes alone
            said = (f"{s} weight-only decodes at ×{r:.2f} {rec.reference}'s time, faster than bf16's ×{b16:.2f}: "
                    f"×{r / b16:.2f} bf16's time for {share} its bytes (×{fewer:.2f})")
            if max(d.samples_ms) >= min(b.samples_ms):  # the medians apart, the rounds not: the bars overlap
                said += (f", by medians: their rounds overlap ({s} {min(d.samples_ms):.1f}–{max(d.samples_ms):.1f} ms, "
                         f"bf16 {min(b.samples_ms):.1f}–{max(b.samples_ms):.1f})")
            if r / b16 > FOLLOWS * fewer:  # faster, but far from its bytes' share: the chart shows it, so say so
                said += (f". Its time did not follow its bytes: it ran at ×{d.memory_held(rec.rounds):.1f} its "
                         f"memory bound where bf16 ran at ×{b.memory_held(rec.rounds):.1f}, so its kernel, not the "
                         "memory, set most of its time")
            out.append(said + ".")
            continue
        slow = True
        out.append(f"{s} weight-only decodes at ×{r:.2f} {rec.reference}'s time against bf16's ×{b16:.2f}, though it "
                   f"reads {share} bf16's bytes: its kernel reads at {d.read_rate() / 1e9:.1f} GB/s "
                   f"(×{d.memory_held(rec.rounds):.1f} its memory bound) where bf16's reads at "
                   f"{b.read_rate() / 1e9:.1f}: the kernel, not the memory, sets its time here ({d.kernel}).")
    if slow:
        out.append("Engines read narrow integers faster with kernels written for them: llama.cpp's Q8_0 on a CPU; "
                   "on a GPU, torchao's int8 weight-only (Llama-3-8B on an A100: 153 tokens/s against bf16's 95.6, "
                   "torchao's published figures).")
    return " ".join(out)


def _us(ms: float) -> str:
    """Microseconds to three figures, zeros kept (0.500, 1.30, 0.0279): a CPU's position costs about a µs, a
    GPU's a few hundredths."""
    return f"{1e3 * ms:#.3g}".rstrip(".")


def context_sentence(rec: Record) -> str:
    """The line measured: its slope against its prediction, the rate the attention reached, the crossing."""
    line = rec.line()
    if line is None:
        return ""
    pts = rec.context_passes()
    p = pts[0]
    if line.slope_ms <= 0:  # a warm-up timed, or noise larger than the K/V's cost: no line to set against its bytes
        wide = max(pts, key=lambda q: max(q.samples_ms) - min(q.samples_ms))
        return (f"Each position of context adds {rec.kv_per_token:,} bytes of K/V ({p.arith}, counted from the cache) "
                f"that every decode step reads, {_us(line.predicted_slope_ms)} µs a position at the probed read. "
                f"The steps measured do not rise with context (medians: "
                + ", ".join(f"{q.median_ms:.1f} ms at {q.context:,}" for q in pts)
                + f"; the widest spread {min(wide.samples_ms):.1f}–{max(wide.samples_ms):.1f} ms at "
                f"{wide.context:,}): no slope to set against it.")
    off = line.slope_off
    held = f"within ±{SLOPE_WITHIN * 100:.0f} % of" if line.slope_held else f"×{off:.2f}"
    attention = p.kernel.partition("attention: ")[2]
    rate = ("a plain read of the cache itself" if line.cache_probed else "the read rate") + f", {line.cache_read / 1e9:.1f} GB/s"
    return (f"Each position of context adds {rec.kv_per_token:,} bytes of K/V ({p.arith}, counted from the cache) that "
            f"every decode step reads. Fitted: {_us(line.slope_ms)} µs a position, {held} the predicted "
            f"{_us(line.predicted_slope_ms)} µs (those bytes over {rate}, probed in the same rounds): the "
            f"attention read the cache at {line.read_at / 1e9:.1f} GB/s (its bytes over the fitted slope)"
            + (f" ({attention})." if attention else ".")
            + f" The K/V's time reaches the step's at no context ({line.intercept_ms:.1f} ms, the fitted line's "
            f"start: the weights' read and all the rest) at {line.crossing:,.0f} positions, where the line doubles "
            "its start" + (f", past the longest context measured, {pts[-1].context:,}" if line.crossing > pts[-1].context
                           else "")
            + f"; its bytes reach the weights' bytes at {line.predicted_crossing:,.0f} (×{line.crossing_off:.2f}).")


def context_why(rec: Record) -> str:
    """Why the slope is off its bytes' time, where it is: the attention's arithmetic, and the roof's own buffer."""
    line = rec.line()
    if line is None or line.slope_ms <= 0:
        return ""
    off = line.slope_off
    why = ("" if line.slope_held else
           "Each position costs more than its bytes." if off > 1 else
           "Each position costs less than its bytes at the probed rate.")
    if line.compute_slope_ms > 0:  # the attention's arithmetic per position against its bytes' time
        both = line.predicted_slope_ms + line.compute_slope_ms
        why += (f" Its arithmetic is {line.flops_per_byte:.1f} FLOPs a cache byte (estimate: each K/V head serves "
                f"several query heads), {_us(line.compute_slope_ms)} µs a position at the matmul peak probed, "
                f"{line.compute_slope_ms / line.predicted_slope_ms:.0%} of the bytes' time: a kernel that hid one "
                f"behind the other would pay the larger; one that hid neither, their sum ({_us(both)} µs). "
                f"The fit is ×{line.slope_ms / both:.2f} that sum.")
    if line.cache_probed and abs(line.roof_off - off) > 0.05:
        why += (f" Against the roof's read of another buffer ({line.roof_read / 1e9:.1f} GB/s) the slope is "
                f"×{line.roof_off:.2f} its bytes' time: on this machine two buffers of the same size, or two ways of "
                "reading one, can read at rates apart.")
    return why.strip()


def evicted_sentence(rec: Record) -> str:
    pair = rec.evicted()
    if not pair:
        return ""
    e, full = pair
    r = rec.evicted_ratio()
    said = (f"Evicted to a window of the newest {e.context:,} positions, the step at {full.context:,} reads "
            f"{mb(e.bytes)} instead of {mb(full.bytes)} and takes ×{r:.2f} the full cache's time ({verdict(r)}).")
    w = rec.window
    if w is None:
        return said
    name = "the bundled default model" if w.model == "default" else w.model  # a sweep's short name
    return (f"{said} What it costs in tokens, as the budget page measures the window policy on a trained model "
            f"({name}, not this rung's random weights; a window of {w.budget} of {w.context} positions, "
            f"{w.bytes_ratio:.0%} of the bytes): " + _window_damage(w))


def _window_damage(w) -> str:
    """The window's damage: over several held-out stories, their median and range, where recorded; its one story's
    figures said to be one story's."""
    one = f"top-1 agreement {w.agreement:.1%}, KL {w.kl_mean:.3f} nats"
    if len(w.stories) < 2:
        return f"{one}, on one held-out story ({w.source})."
    return (f"top-1 agreement {statistics.median(w.stories):.1%}, the median of {len(w.stories)} held-out stories "
            f"({min(w.stories):.1%}–{max(w.stories):.1%}); on the one story of its sweep, {one} ({w.source}).")


def prediction_held(rec: Record, storage: str = "bf16") -> str:
    """Which of lesson 12's predictions this storage's measurement bears out, from its two verdicts."""
    d, p = verdict(rec.ratio(storage, "decode")), verdict(rec.ratio(storage, "prefill"))
    if d == "faster" and p == "about the same":
        return "decode faster, prefill about the same"
    if d == "faster" and p == "faster":
        return "both faster"
    if d == "about the same" and p == "about the same":
        return "neither moves"
    return f"none of them: decode {d}, prefill {p}"


def damage_sentence(rec: Record) -> str:
    out = []
    for s in STORAGES[1:]:  # each against fp32
        ds = [d for d in rec.damage if d.storage == s]
        if ds:
            low = min(min(d.agree) for d in ds)
            lo, hi = f"{min(d.agreement for d in ds):.1%}", f"{max(d.agreement for d in ds):.1%}"
            out.append(f"{s} agrees with fp32 on " + (f"{lo}–{hi} of next tokens across the bundled models" if lo != hi
                                                      else f"{lo} of next tokens in each bundled model")
                       + f" (lowest story {low:.1%})")
    return ("Teacher-forced on held-out stories, each storage's top-1 token against fp32's: " + "; ".join(out) + "."
            if out else "")


def other_recording(rec: Record, curve) -> str:
    """Where another recording of the same machine kind (`curve`: the pass-of-n curve's CurveSteps, shown above this
    one) timed the reference's decode step or its prefill of the same rows apart from this recording: both times and
    the rates they ran at. "" on another device, or another rung, or where both agree within FASTER. Ratios are
    taken within one recording; this says why."""
    if curve is None or curve.device != rec.device or abs(curve.parameters / rec.parameters - 1) > 0.05:
        return ""
    said = []
    mine = rec.get(rec.reference, "decode")
    if mine is not None and curve.decode_ms > 0 and not FASTER <= mine.median_ms / curve.decode_ms <= 1 / FASTER:
        said.append(f"the decode step {curve.decode_ms:.1f} ms ({curve.decode_bytes / curve.decode_ms / 1e6:.1f} GB/s "
                    f"read) against {mine.median_ms:.1f} ms ({mine.read_rate() / 1e9:.1f} GB/s), "
                    f"×{mine.median_ms / curve.decode_ms:.2f}")
    pre = rec.get(rec.reference, "prefill")
    theirs = curve.prefill(pre.rows) if pre is not None else None
    if theirs is not None and theirs[0] > 0 and not FASTER <= pre.median_ms / theirs[0] <= 1 / FASTER:
        ms, flops = theirs
        said.append(f"the {pre.rows}-token prefill {ms:.1f} ms ({flops / ms / 1e6:.1f} GFLOP/s) against "
                    f"{pre.median_ms:.1f} ms ({pre.flops / pre.median_ms / 1e6:.1f} GFLOP/s), ×{pre.median_ms / ms:.2f}")
    if not said:
        return ""
    return (f"The pass-of-n curve's recording ({curve.measured_at[:10]}) timed this rung's {rec.reference} passes on "
            f"the same kind of machine, and got other times than this one ({rec.measured_at[:10]}): "
            + "; ".join(said) + ". They are the same passes, timed on another day, so each storage here is set "
            f"against this recording's own {rec.reference} passes, timed in the same rounds, never against the "
            "curve's.")


def measured_on(rec: Record) -> str:
    """Where and when, in a line: what a picture's caption says when `where`'s whole paragraph is folded away."""
    return f"{rec.named} on {rec.device}, measured {rec.measured_at[:16].replace('T', ' ')} UTC"


def where(rec: Record) -> str:
    load = f", load average {rec.load[0]:.1f} → {rec.load[1]:.1f} on its cores" if rec.load else ""
    return (f"{rec.named} ({rec.parameters:,} parameters) on {rec.device}, {rec.threads} thread"
            f"{'s' if rec.threads > 1 else ''}{load}; {PATH}; {len(rec.rounds)} rounds, the roof probed in each; "
            f"measured {rec.measured_at[:16].replace('T', ' ')} UTC")


# ---------------------------------------------------------------- the terminal


def text_tables(rec: Record) -> str:
    lines = [where(rec), ""]
    lines.append(storage_frame(rec).to_string(index=False))
    lines += ["", storage_sentence(rec), why_prefill(rec), decode_sentence(rec), products_sentence(rec),
              int8_sentence(rec), ""]
    context = context_frame(rec)
    if not context.empty:  # a run out of time, or of memory, may have timed no context
        lines.append(context.to_string(index=False))
    lines += ["", context_sentence(rec), context_why(rec), evicted_sentence(rec), ""]
    if rec.damage:
        lines.append(damage_frame(rec).to_string(index=False))
        lines += ["", damage_sentence(rec)]
    lines += [n for n in rec.notes]
    return "\n".join(line for line in lines)
