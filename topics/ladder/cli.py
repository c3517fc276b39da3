"""`python -m engine ladder`: grow the model, time each rung's prefill and decode, print the table."""

from __future__ import annotations

import textwrap

from physics.units import human_bytes
from topics.cli_args import check_json_path, load_from, model_args, positive, write_json


def add_parser(sub) -> None:
    """`python -m engine ladder`: its options (commands/main.py finds it by name)."""
    g = sub.add_parser("ladder", help="grow the model: prefill and decode timed at several sizes on this device's "
                                      "roofline (random weights, timing only)")
    g.add_argument("--sizes", nargs="+", help="parameter counts or published shapes, e.g. own 25M 110M 1.1B "
                                              "SmolLM2-135M Llama-3-8B ('own': the model itself; default: own 25M "
                                              "50M 110M 220M on a CPU; on a GPU own SmolLM2-135M TinyLlama-1.1B "
                                              "Llama-3-8B as memory allows)")
    g.add_argument("--tokens", type=positive, default=None,
                   help="s: the prefill's length and the decode step's context (default 128 on a CPU, 384 on a GPU)")
    g.add_argument("--repeats", type=positive, default=5, help="timed runs per pass after a warm-up run")
    g.add_argument("--json", help="write the ladder here (the keys of topics/ladder/record.py)")
    model_args(g)
    g.set_defaults(func=main)


def label_rule() -> str:
    """How the table's 'is' columns are read off the times (roofline.verdict), in one line."""
    from physics.roofline import EXPLAINS, OVERHEAD

    return (f"labels: X-bound within x{EXPLAINS:g} of that bound (the bound is most of the time); 'X side' from x{EXPLAINS:g} "
            f"to x{OVERHEAD:g} (that side of the ridge, not bound by it); overhead-bound above x{OVERHEAD:g}")


def curve_table(curve, roof) -> str:
    """The pass over n rows, for a terminal: per n, each kind's median (min-max), its ratio to the pass it is
    compared with (the same kind, the same kernel), its share of the roof measured here and, where the bounds were
    probed each round, the median of per-round ratios with their spread; then each kind's knee, measured (where the
    flat level and the slope meet) beside the predicted one, and the figures the lean path is held to."""
    from physics.roofline import percent

    lines = [f"one pass, n rows: {curve.rung} on the lean path ({curve.path}); compile "
             f"{curve.compile_s:.1f} s apart; context {curve.context} for the batched decode; "
             + (f"bounds probed in each of {len(curve.rounds)} rounds beside the passes" if curve.rounds else
                "bounds probed once, before the passes (no per-round probes recorded)"),
             f"{'n':>6} {'prefill ms (min-max)':>24} {'x base':>9} {'share':>9} {'x bound/round':>18} "
             f"{'batch ms (min-max)':>24} {'x base':>9} {'share':>9} {'x bound/round':>18}"]
    rows = sorted({p.rows for p in curve.points if p.kind != "decode"})
    for n in rows:
        cells = []
        for kind in ("prefill", "batch"):
            p = curve.at(kind, n)
            if p is None:
                cells.append(f"{'-':>24} {'-':>9} {'-':>9} {'-':>18}")
                continue
            share = f"{percent(p.share)} {'MBU' if p.bound == 'memory' else 'MFU'}"
            base, ratio = curve.base(kind, n), curve.ratio(kind, n)
            said = f"{ratio:.2f}/n={base.rows}" if ratio is not None else "-"
            h = curve.held(p)
            held = (f"{h.median:.2f} ({h.low:.2f}-{h.high:.2f})" if h else
                    "probe short" if curve.probes_short(p) else "-")
            cells.append(f"{p.median_ms:>9.2f} ({p.low_ms:.2f}-{p.high_ms:.2f}) {said:>9} {share:>9} {held:>18}")
        lines.append(f"{n:>6} " + " ".join(cells))
    bases = sorted({(kind, b.rows, curve.kernel(b)) for kind in ("prefill", "batch") for n in rows
                    if (b := curve.base(kind, n)) is not None})
    lines.append("x base: each pass over the pass of its own kind it is compared with (the n= in its cell), run by "
                 "the same kernel: " + "; ".join(f"{kind} n={r} on {kernel}" for kind, r, kernel in bases))
    for kind in ("prefill", "batch"):
        k = curve.knee(kind, roof)
        if k is None:
            predicted = curve.predicted_knee(kind, roof)
            lines.append(f"knee ({kind}): not timed; predicted "
                         + (f"~{predicted:.1f} rows" if predicted else "none at this context"))
            continue
        lines.append(f"knee ({kind}): predicted "
                     + (f"~{k.predicted:.1f} rows" if k.predicted else "past the rows timed")
                     + (" (each sequence's K/V read added to the products)" if kind == "batch" else "")
                     + (f"; measured {k.measured:.1f} (level {k.level_ms:.2f} ms over n={list(k.level_rows)}, slope "
                        f"{k.slope_ms:.4g} ms a row over n={list(k.slope_rows)}): x{k.off:.2f} the prediction"
                        if k.measured and k.off else "; no measured knee (the passes do not place one)"))
        out = curve.outlier(kind)
        if out is not None:
            lines.append(f"  outlier: the one-row {kind} {out.pass_.median_ms:.2f} ms, x{out.times:.2f} the "
                         f"{out.faster.rows}-row pass (a graph of its own; not in the level)")
    one = next(iter(curve.of("decode")), None)
    if one is not None:
        h = curve.held(one)
        lines.append(f"lean decode (one sequence, context {curve.context}, {curve.kernel(one)}): {one.median_ms:.2f} ms "
                     f"({one.low_ms:.2f}-{one.high_ms:.2f}), x{one.median_ms / one.memory_ms:.2f} its DRAM memory bound "
                     f"({one.memory_ms:.2f} ms)"
                     + (f"; per round x{h.median:.2f} (x{h.low:.2f}-{h.high:.2f})" if h else ""))
    for kind in ("prefill", "batch"):  # each kind past four of its own predicted knees (a batch's adds its K/V)
        knee = curve.predicted_knee(kind, roof)
        far = [p for p in curve.of(kind) if knee and p.rows >= 4 * knee]
        if far:
            lines.append(f"{kind}, n >= 4x its own predicted knee: " + ", ".join(
                f"n = {p.rows} x{p.median_ms / p.compute_ms:.2f}"
                + (f" (per round x{curve.held(p).median:.2f})" if curve.held(p) else "") for p in far)
                + " its compute bound")
    return "\n".join(lines)


def main(args) -> int:
    """Grow the model: prefill and decode timed at several sizes, each placed on this device's roofline."""
    from tqdm import tqdm

    from physics.rungs import plan, timing_dtype
    from topics.ladder import draw as draw
    from topics.ladder.measure import default_tokens, measure_ladder

    check_json_path(args.json)
    lm = load_from(args)
    tokens = args.tokens or default_tokens(lm.device)
    dtype = lm.dtype if args.dtype else timing_dtype(lm)  # a GPU's ladder in bf16 unless --dtype says otherwise
    planned = plan(lm, args.sizes, tokens, dtype)  # a rung that would not fit is refused before the bar starts
    from topics.ladder.curve import compile_forecast

    print(f"the curve's lean pass, before its compiles: {compile_forecast(lm.device.type)}")
    with tqdm(total=100, unit="%", bar_format="{l_bar}{bar}| {elapsed}") as bar:
        def progress(fraction: float, text: str) -> None:
            bar.set_description_str(text[:70])
            bar.update(max(0, round(fraction * 100) - bar.n))

        lad = measure_ladder(lm, args.sizes, tokens=tokens, repeats=args.repeats, on_progress=progress,
                             planned=planned, dtype=dtype)
    r = lad.roof
    print(f"{lad.model} ({lad.family}) on {lad.device}, {lad.dtype}; s = {lad.tokens} tokens ({lad.prompt}); "
          f"medians of {lad.repeats} after a warm-up run (excluded), min-max beside them")
    rates = ", ".join(f"{b / 2**20:,.0f} MiB {v / 1e9:,.1f}" for b, v in r.bandwidths) or f"{r.bandwidth / 1e9:,.1f}"
    print(f"roofline measured here: matmul {r.peak_flops / 1e9:,.1f} GFLOP/s; memory bandwidth GB/s by bytes moved "
          f"(the best of a read, a copy and a matrix-vector product): {rates}; the ridge {r.ridge:.1f} FLOP/byte "
          f"(peak over DRAM's {r.dram_bandwidth / 1e9:,.1f} GB/s), ~{r.ridge_tokens:.0f} rows in {r.dtype}; a step "
          f"whose bytes fit the cache is bounded by the cache's roof; bounds are estimates, labels from "
          f"roofline.verdict")
    print(f"rungs other than the model itself: {lad.weights_note}")
    print()
    print(lad.text_table())
    print(label_rule())
    curve = next((rung.curve for rung in lad.rungs if rung.curve), None)
    if curve is not None:
        print()
        print(curve_table(curve, r))
    print()
    for r in lad.rungs:  # where the hardware sets both passes' times: the lean path's gap and cache saving
        if r.lean_gap:
            print(f"lean path at {r.label}: decode / prefill per token x{r.lean_gap:.0f}, the cache saves "
                  f"x{r.lean_cache_saves:.2f} (readable path: x{r.decode_vs_prefill_per_token:.0f} and "
                  f"x{r.cache_saves:.1f})")
    for said in (draw.roofline_caption(lad), draw.per_token_caption(lad)):
        print(textwrap.fill(said, 118))
        print()
    from topics.ladder.notes import ladder_note

    if ladder_note(lad):
        print(ladder_note(lad))
    if lad.left_out:
        print(f"left out (would not fit this device's memory): {', '.join(lad.left_out)}")
    if lad.compile_s:
        print(f"compiling the lean path (and the recipe): {lad.compile_s:.1f} s of the wall time, never in a step's time")
    print(f"ladder wall time {lad.wall_s:.1f} s; resident memory {human_bytes(lad.rss_before_bytes)} before, "
          f"{human_bytes(lad.rss_after_bytes)} after")
    if args.json:
        write_json(args.json, lad.to_dict())
    return 0
