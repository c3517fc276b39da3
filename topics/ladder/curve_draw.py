"""One pass, n rows, drawn from its record (topics.ladder.curve.Curve): curve in, figure and words out.

    curve_figure    ms per pass against n rows (both log scales): the prefill of n tokens and the decode step for
                    n sequences, measured (medians, min-max bars); the two lower bounds of the prefill, a flat line
                    (bytes ÷ bandwidth) and a slope (FLOPs ÷ peak), estimates; each kind's predicted knee (the
                    batch's counting every sequence's K/V) and measured knee (its flat level and slope, drawn)
    curve_caption   the chart in sentences, every figure read off the same record
    curve_claim     what a lesson quotes of it

The times are measured; FLOPs, bytes and so both bounds are estimates, said so on the chart.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from drawing.latency import PHONE_NOTE_CHARS, note_box
from drawing.palette import DECODE, ESTIMATE, GREY, PREFILL, layout, log_ticks
from physics.roofline import DeviceRoof, percent, short_name, verdict
from topics.ladder.curve import DECODE as DECODE_KIND
from topics.ladder.curve import Curve
from topics.ladder.notes import curve_note

NAMES = {"prefill": "prefill of n tokens", "batch": "decode step for n sequences"}
COLOURS = {"prefill": PREFILL, "batch": DECODE}
KNEE_WITHIN = 1.5  # a measured knee within this factor of the predicted one, either way: the run shows the roofline
FLAGGED = ("this run was flagged noisy (the note on the chart), so no knee is read off it: measure again when the "
           "server is quiet")


def _ms(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def curve_figure(curve: Curve, roof: DeviceRoof, where: str, scale: float = 1.0, height: int = 430,
                 flag: str | None = None) -> go.Figure:
    """ms per pass against n, both kinds, with the prefill's two bounds, each kind's predicted knee and its measured
    one (the flat level and the fitted slope, drawn where they meet), and a one-row outlier ringed and named.
    `where` says where it was measured, under the title ('measured on this server (…)', 'a recording made on …');
    `flag`, a noisy run's note (topics.ladder.notes.noisy): then no measured knee is drawn, only the predictions."""
    fig = go.Figure()
    pre = curve.of("prefill")
    xs = sorted({p.rows for p in curve.points})
    fig.add_trace(go.Scatter(
        x=[p.rows for p in pre], y=[p.memory_ms for p in pre], name="memory bound: bytes ÷ bandwidth (estimate)",
        mode="lines", line=dict(color=ESTIMATE, width=2, dash="dash"),
        hovertemplate="n = %{x}: %{y:.3g} ms (memory bound)<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[p.rows for p in pre], y=[p.compute_ms for p in pre], name="compute bound: FLOPs ÷ peak (estimate)",
        mode="lines", line=dict(color=ESTIMATE, width=2, dash="dot"),
        hovertemplate="n = %{x}: %{y:.3g} ms (compute bound)<extra></extra>"))
    for kind in ("prefill", "batch"):
        pts = curve.of(kind)
        if not pts:
            continue
        fig.add_trace(go.Scatter(
            x=[p.rows for p in pts], y=[p.median_ms for p in pts], name=f"{NAMES[kind]}, measured",
            mode="lines+markers", line=dict(color=COLOURS[kind], width=4), marker=dict(size=10),
            error_y=dict(type="data", symmetric=False, thickness=2, array=[p.high_ms - p.median_ms for p in pts],
                         arrayminus=[p.median_ms - p.low_ms for p in pts]),
            customdata=[[curve.kernel(p), percent(p.share), "bandwidth" if p.bound == "memory"
                         else "matmul peak"] for p in pts],
            hovertemplate="n = %{x}: %{y:.3g} ms (median; bar: min–max)<br>on %{customdata[0]}"
                          "<br>%{customdata[1]} of the measured %{customdata[2]}<extra>" + NAMES[kind]
                          + "</extra>"))
    for p in curve.of(DECODE_KIND):  # the rung's own decode step: a labelled point of its own
        fig.add_trace(go.Scatter(
            x=[p.rows], y=[p.median_ms], name=f"the decode step ({curve.kernel(p)})", mode="markers",
            marker=dict(color=DECODE, size=15, symbol="star", line=dict(color="#222", width=1)),
            hovertemplate="one decode step: %{y:.3g} ms (median)<extra>" + curve.kernel(p) + "</extra>"))
    for kind in ("prefill", "batch"):  # a one-row pass slower than more rows of its kind: ringed and named
        out = curve.outlier(kind)
        if out is not None:
            p = out.pass_
            fig.add_trace(go.Scatter(
                x=[p.rows], y=[p.median_ms], name=f"outlier: the one-row {kind} (a graph of its own)",
                mode="markers", marker=dict(color="rgba(0,0,0,0)", size=22, line=dict(color=COLOURS[kind], width=2)),
                hovertemplate="%{y:.3g} ms: slower than the pass over " + f"{out.faster.rows} rows"
                              "<extra>not part of the flat level</extra>"))
    negligible = curve.kv_negligible(roof)
    knees = {kind: curve.knee(kind, roof) for kind in ("prefill", "batch")}
    span = (math.log10(min(xs) / 1.4), math.log10(max(xs) * 1.4))  # the x axis's range (below), in log10

    def near_left(n: float) -> bool:
        """n in the plot's left half, where words that end at it can run over the y axis on a phone."""
        return (math.log10(n) - span[0]) / (span[1] - span[0]) < 0.5
    for kind, k in knees.items():
        predicted = curve.predicted_knee(kind, roof)
        if predicted and not (kind == "batch" and negligible) and xs[0] <= predicted <= xs[-1] * 1.4:
            words = "predicted knee" + (" (both kinds: K/V bytes negligible)" if negligible else
                                        " (prefill)" if kind == "prefill" else " (batch,<br>K/V added)")
            fig.add_vline(x=predicted, line=dict(color=GREY if kind == "prefill" else COLOURS[kind], width=2,
                                                 dash="dot"))
            # each kind's words end at its own line, the batch's under the plot's top, in two short lines: two
            # knees close on a log axis (the H200's ~181 and ~107) never write over each other, nor past the plot's
            # right edge. The prefill's, one line over the plot, are centred on a knee in the left half instead (a
            # CPU's ~7 rows): ending there, they ran over the y axis's title on a phone
            centred = negligible or (kind == "prefill" and near_left(predicted))
            fig.add_annotation(x=math.log10(predicted), y=1.0 if kind == "prefill" else 0.97, yref="paper",
                               yanchor="bottom" if kind == "prefill" else "top", showarrow=False,
                               text=f"{words} ≈ {_n(predicted)} rows", align="right",
                               bgcolor="rgba(255,255,255,0.85)",  # over the other knee's line, read whole
                               xanchor="center" if centred else "right", font=dict(size=12 * scale))
        if k is None or k.measured is None or flag:
            continue
        lo, hi = max(xs[0], min(k.level_rows)), max(k.slope_rows)  # the two fitted lines, measured
        fig.add_trace(go.Scatter(
            x=[lo, k.measured, hi], y=[k.level_ms, k.level_ms, k.intercept_ms + k.slope_ms * hi],
            name=f"{kind}: flat level and slope, fitted", mode="lines", showlegend=False,
            line=dict(color=COLOURS[kind], width=1.5, dash="dashdot"), hoverinfo="skip"))
        # under the flat level (the predicted knees' words are over the plot): the later knee's words straight
        # under it, lower, and the other's to its left, so two knees close on a log axis never write over each
        # other, and neither runs past the plot's right edge
        other = knees["batch" if kind == "prefill" else "prefill"]
        later = other is None or other.measured is None or k.measured >= other.measured
        fig.add_annotation(x=math.log10(k.measured), y=math.log10(k.level_ms),
                           text=f"measured knee<br>≈ {_n(k.measured)}", showarrow=True, arrowhead=2,  # narrow
                           ax=(0 if later else -12) * scale, ay=(64 if later else 34) * scale,
                           xanchor="center" if later else "right", bgcolor="rgba(255,255,255,0.85)",
                           font=dict(size=12 * scale, color=COLOURS[kind]))
    ys = [v for p in curve.points for v in (p.low_ms, p.high_ms, p.memory_ms, p.compute_ms)]
    lo, hi = min(ys), max(ys)
    lo = max(lo, min(p.low_ms for p in curve.points) / 30)  # the compute bound may enter from below (an H200's
    #                                                          one-row bound lies three decades under its pass)
    vals, texts = log_ticks(lo / 1.5, hi * 1.5)
    fig.update_yaxes(type="log", title="ms per pass (median, measured)", tickmode="array", tickvals=vals,
                     ticktext=texts, range=[math.log10(lo / 1.5), math.log10(hi * 1.5)])
    ticks = [n for n in xs if n & (n - 1) == 0]  # the doublings; the context's own pass (384) keeps its point
    fig.update_xaxes(type="log", title="n: rows in one pass (log scale)", tickmode="array", tickvals=ticks,
                     ticktext=[tick(n) for n in ticks], tickangle=0,
                     range=[math.log10(min(xs) / 1.4), math.log10(max(xs) * 1.4)])
    layout(fig, f"One pass over n rows: {curve.rung}, {curve.dtype}", height=height, scale=scale)
    # the legend one entry a row at the figure's foot, under the x axis's ticks and title, in a margin sized for
    # it: where it lies does not move with the plot's height (a note over the plot takes some of that)
    entries = sum(1 for t in fig.data if t.name and t.showlegend is not False)
    legend_px = entries * 20 * scale + 8
    fig.update_layout(title=dict(subtitle=dict(text=where, font=dict(size=12 * scale))),
                      margin=dict(t=int(84 * scale), b=int(56 * scale + legend_px)),
                      legend=dict(orientation="v", yref="container", yanchor="bottom", y=0, x=0, traceorder="normal",
                                  font=dict(size=12 * scale)))
    note = curve_note(curve) or flag
    if note:  # a busy server said on the chart, with the figures that show it: over the plot and the
        note_box(fig, note, scale, chars=PHONE_NOTE_CHARS, above_px=22 * scale)  # ridge's label, since the legend lies under it
    return fig


def tick(n: int) -> str:
    """An x tick short enough to stay level beside its neighbours: 512, 1k, 4k."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def eight(curve: Curve) -> int:
    """The n the captions quote for 'several rows in one pass': 8 where timed, else the nearest timed n above 1."""
    ns = [p.rows for p in curve.of("prefill") if p.rows > 1]
    return 8 if 8 in ns else min(ns, key=lambda n: abs(math.log2(n / 8)), default=1)


# ---------------------------------------------------------------- shares: of the roof measured, and a datasheet's


def datasheet_for(device: str) -> DeviceRoof | None:
    """The datasheet roof (assets/accelerators.csv) of the card a ladder names ('NVIDIA H200 (cuda)'), in bf16; None
    for a device the table does not have (a CPU)."""
    from physics.kvcalc import accelerators
    from physics.roofline import from_datasheet

    named = [a for a in accelerators() if a.name in device and a.has_roof]
    if not named:
        return None
    return from_datasheet(max(named, key=lambda a: len(a.name)))  # 'NVIDIA H100 SXM' over 'NVIDIA H100'


def share_words(p, roof: DeviceRoof, sheet: DeviceRoof | None = None) -> str:
    """'74% of the measured bandwidth (MBU); 63% of the NVIDIA H200 datasheet's 4.8 TB/s': the pass's share of
    the roof probed on its machine, and, where the device has a datasheet, its share of that too."""
    v = verdict(p.median_ms, p.flops, p.bytes_moved, roof)
    if v.bound == "memory":
        said = f"{percent(v.share)} of {v.roof_words}"  # the measured bandwidth (MBU), or the cache's
        if sheet is not None:
            said += (f"; {percent(p.bytes_moved / sheet.bandwidth * 1e3 / p.median_ms)} of the "
                     f"{short_name(sheet)} datasheet's {sheet.bandwidth / 1e12:.1f} TB/s")
        return said
    said = f"{percent(v.share)} of {v.roof_words}"  # the measured matmul peak (MFU)
    if sheet is not None:
        said += (f"; {percent(p.flops / sheet.peak_flops * 1e3 / p.median_ms)} of the {short_name(sheet)} "
                 f"datasheet's {sheet.peak_flops / 1e12:,.0f} TFLOP/s")
    return said


def verdict_words(p, roof: DeviceRoof, sheet: DeviceRoof | None = None) -> str:
    """The verdict's kind in its own words (roofline.verdict: 'memory-bound' only within ×2 of the bound, 'on the
    memory side, not memory-bound' from ×2 to ×3) and the shares (`share_words`)."""
    v = verdict(p.median_ms, p.flops, p.bytes_moved, roof)
    if v.kind == "overhead-bound":
        return v.label
    kind = v.kind if v.kind.endswith("-bound") else f"on the {v.bound} side, not {v.bound}-bound"
    return f"{kind}: {share_words(p, roof, sheet)}"


def held_words(curve: Curve, p) -> str:
    """How many times its bound a pass took: on the roof (the ratio the ladder quotes for the same pass), then as
    the median of per-round ratios (bounds probed each round); for a recording without them, the ratio to the one
    probe, said as such."""
    h = curve.held(p)
    if h is not None:  # the roof's ratio first: the ladder's tables and sentences quote the same pass by it
        return (f"×{p.median_ms / p.bound_ms:.2f} its {p.bound} bound, {h.words()} against the bound probed in "
                "each round")
    if curve.probes_short(p):
        return (f"×{p.median_ms / p.bound_ms:.2f} its {p.bound} bound on the run's best probe (each round's quick probe "
                "measured less than the passes ran at)")
    return (f"×{p.median_ms / p.bound_ms:.2f} its {p.bound} bound (this recording probed the bounds once, before the "
            "passes)")


# ---------------------------------------------------------------- the words


def _n(x: float) -> str:
    """A knee in rows: one decimal below 20 (7.3), whole above (209)."""
    return f"{x:.1f}" if x < 20 else f"{x:.0f}"


def _rows(ns) -> str:
    ns = sorted(ns)
    return f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"


def ratio_sentence(curve: Curve, kind: str, n: int) -> str | None:
    """'a prefill of 8 tokens took ×1.16 the 1-token prefill (32.0 ms) on the many-row kernel, for ×8 the
    arithmetic': one kind, one kernel, and what it is compared with. None where not timed."""
    p, b = curve.at(kind, n), curve.base(kind, n)
    r = curve.ratio(kind, n)
    if r is None or b is None:
        return None
    unit = "tokens" if kind == "prefill" else "sequences"
    one = "token" if kind == "prefill" else "sequence"
    what = f"a prefill of {n} {unit}" if kind == "prefill" else f"the decode step for {n} {unit}"
    than = (f"the {b.rows}-{one} prefill" if kind == "prefill" else
            f"the same step for {b.rows} {one if b.rows == 1 else unit}")
    return (f"{what} took ×{r:.2f} {than} ({_ms(b.median_ms)} ms) on {curve.kernel(p)}, for ×{n // b.rows} the "
            f"arithmetic")


def knee_sentence(curve: Curve, roof: DeviceRoof, kind: str, flag: str | None = None) -> str | None:
    """The kind's knee: the flat level and the slope measured, where they meet, beside the prediction (which
    counts, for a batch, every sequence's K/V at the context); a run flagged noisy gets the prediction and the flag,
    never a measured knee."""
    k = curve.knee(kind, roof)
    if kind == "batch":
        return batch_knee_sentence(curve, roof, k, flag)
    if k is None or k.predicted is None:
        return None
    said = (f"The prefill's knee is predicted at ~{_n(k.predicted)} rows (where its intensity meets the ridge of "
            f"the machine it ran on, {roof.ridge:.1f} FLOP/byte in {roof.dtype})")
    if flag:
        return said + f"; {FLAGGED}."
    if k.measured is None:
        return said + ": the passes timed do not place a measured one."
    return (said + f"; measured, the flat level ({_ms(k.level_ms)} ms, the median of {_rows(k.level_rows)}) and the "
            f"slope ({k.slope_ms:.3g} ms a row, fitted on {_rows(k.slope_rows)}) meet at n ≈ {_n(k.measured)} "
            f"(×{k.off:.2f} the prediction).")


def batch_knee_sentence(curve: Curve, roof: DeviceRoof, k=None, flag: str | None = None) -> str | None:
    """A decode step for n sequences: each reads its own K/V in attention kernels whose time adds to the products'
    (`Curve.batch_knee`), so its knee is its own and comes sooner than the prefill's; it is given the prefill's only
    where the K/V bytes are negligible, and then the sentence says so."""
    b = curve.batch_bytes()
    predicted = curve.batch_knee(roof)
    if b is None or predicted is None:
        return None
    pre = curve.predicted_knee("prefill", roof)
    kv = f" ({(b.kv or b.more) / 1e6:,.3g} MB a sequence)" if (b.kv or b.more) else ""
    if curve.kv_negligible(roof):
        said = (f"A decode step for n sequences also reads every sequence's own K/V at context {curve.context}{kv}, "
                f"negligible here beside the weights: its knee is predicted at ~{_n(predicted)} sequences, with the "
                f"prefill's ~{_n(pre)}")
    elif predicted < 1:
        said = (f"A decode step for n sequences also reads every sequence's own K/V at context {curve.context}{kv}: "
                "one sequence's K/V and arithmetic already take longer than the weights' read, so the step grows "
                "with every sequence, with no flat stretch")
    else:
        prefill = ", sooner than the prefill's knee" if pre and predicted < pre else ""
        said = (f"A decode step for n sequences runs the prefill's products over n rows, and each sequence's "
                f"attention reads its own K/V at context {curve.context}{kv} in kernels of their own, which stay on "
                "the memory side at any n: the two add, so the weights' read sets the step until the sequences' "
                f"arithmetic and K/V take as long, predicted at ~{_n(predicted)} sequences{prefill}")
    if flag:
        return said + f"; {FLAGGED}."
    if k is None:
        return said + "; no batch was timed here."
    if k.measured is None:
        return said + "; the batches timed do not place a measured knee."
    return (said + f"; measured, its flat level ({_ms(k.level_ms)} ms) and slope ({k.slope_ms:.3g} ms a sequence) "
            f"meet at n ≈ {_n(k.measured)}" + (f" (×{k.off:.2f} the prediction)." if k.off else "."))


def outlier_sentence(curve: Curve, kind: str) -> str | None:
    out = curve.outlier(kind)
    if out is None:
        return None
    p, f = out.pass_, out.faster
    what = "one-token prefill" if kind == "prefill" else "step for one sequence"
    return (f"The {what} (a graph of its own) took {_ms(p.median_ms)} ms, ×{out.times:.2f} the pass over {f.rows} "
            f"rows ({_ms(f.median_ms)} ms): more rows cannot be cheaper, so it is drawn and named as an outlier, "
            "never the flat level.")


def _kinds_words(curve: Curve, roof: DeviceRoof, passes, bound: str) -> str | None:
    """What the verdict says of a stretch of passes, in its own words, with their ratios to the bound."""
    if not passes:
        return None
    kinds = sorted({verdict(p.median_ms, p.flops, p.bytes_moved, roof).kind for p in passes})
    words = [k if k.endswith("-bound") else f"on the {k.split()[0]} side (not {k.split()[0]}-bound)" for k in kinds]
    ratios = [p.median_ms / (p.memory_ms if bound == "memory" else p.compute_ms) for p in passes]
    span = f"×{min(ratios):.2f}" if f"{min(ratios):.2f}" == f"{max(ratios):.2f}" else \
        f"×{min(ratios):.2f}–{max(ratios):.2f}"
    return f"{' or '.join(words)}, {span} their {bound} bound"


def curve_caption(curve: Curve, roof: DeviceRoof, device: str = "", flag: str | None = None) -> str:
    """The chart in sentences, every figure read off the same record: a ratio within one kernel and what it is
    compared with, the decode step as its own point, each kind's knee (measured where the flat level and the slope
    meet, beside its prediction), an outlier named, the far prefill, and what the verdict says of each stretch; a run
    flagged noisy (`flag`) draws no knee verdict, and says so."""
    n = eight(curve)
    said = [r for r in (ratio_sentence(curve, "prefill", n), ratio_sentence(curve, "batch", n)) if r]
    if not said:
        return "Fewer than two row counts were timed: there is no curve to read."
    out = [said[0][0].upper() + said[0][1:] + (f"; {said[1]}." if len(said) > 1 else ".")]
    sheet = datasheet_for(device) if device else None
    star = next(iter(curve.of(DECODE_KIND)), None)
    if star is not None:
        out.append(f"The rung's decode step (one sequence at context {curve.context}, the star) runs on "
                   f"{curve.kernel(star)}: {_ms(star.median_ms)} ms, {held_words(curve, star)}; "
                   f"{verdict_words(star, roof, sheet)}."
                   + ("" if any(curve.kernel(p) == curve.kernel(star) for p in curve.points if p is not star) else
                      " No other pass here runs that kernel, so no ratio is taken against it."))
    out += [s for s in (knee_sentence(curve, roof, "prefill", flag), knee_sentence(curve, roof, "batch", flag),
                        outlier_sentence(curve, "prefill"), outlier_sentence(curve, "batch")) if s]
    last = curve.of("prefill")[-1]
    out.append(f"At {last.rows} rows the prefill took {_ms(last.median_ms)} ms, ×{last.median_ms / last.compute_ms:.2f} "
               f"its compute bound ({share_words(last, roof, sheet)}).")
    k = curve.knee("prefill", roof)
    if k is not None and k.predicted and not flag:
        below = _kinds_words(curve, roof, [p for p in curve.of("prefill") if p.rows in k.level_rows], "memory")
        past = _kinds_words(curve, roof, [p for p in curve.of("prefill") if p.rows in k.slope_rows], "compute")
        if k.within(KNEE_WITHIN):
            out.append(f"The knee lies within ×{KNEE_WITHIN:g} of where the ridge puts it: below it the prefills are "
                       + (below or "not timed")
                       + "; past it " + (past or "not timed") + ".")
        elif k.measured is not None:
            out.append(f"The measured knee is ×{k.off:.2f} the predicted one, outside ×{KNEE_WITHIN:g}: this run does "
                       "not show the roofline cleanly (a busy machine, or kernels far from their roofs); measure again.")
    return " ".join(out)


def curve_claim(curve: Curve, roof: DeviceRoof, phase: str, where: str, device: str = "",
                flag: str | None = None) -> str:
    """What lessons 2 (prefill) and 3 (decode) quote: the pass over n rows at the big rung, in its own numbers, with
    the verdict's own words, each ratio within one kernel and saying what it compares with."""
    n = eight(curve)
    sheet = datasheet_for(device) if device else None
    weights = f"Measured on {where} at {curve.rung} ({curve.weights}), on the lean pass (compiled)"
    if phase == "decode":
        one = next(iter(curve.of(DECODE_KIND)), None) or curve.at("batch", 1) or curve.at("prefill", 1)
        batch = ratio_sentence(curve, "batch", n)
        pre = ratio_sentence(curve, "prefill", n)
        many = (batch if batch else f"the step for {n} sequences was not timed here; {pre}" if pre else
                "no pass over more rows was timed")
        knee = batch_knee_sentence(curve, roof, curve.knee("batch", roof), flag)
        return (f"{weights}: one decode step ({curve.kernel(one)}) took {_ms(one.median_ms)} ms against "
                f"{_ms(one.memory_ms)} ms to read its weights once at its machine's measured bandwidth, "
                f"{held_words(curve, one)}: **{verdict_words(one, roof, sheet)}**. Beside it, {many}."
                + (f" {knee}" if knee else ""))
    last = curve.of("prefill")[-1]
    ratio = ratio_sentence(curve, "prefill", n)
    knee = knee_sentence(curve, roof, "prefill", flag)
    return (f"{weights}: {ratio or 'no pass over more rows was timed'}."
            + (f" {knee}" if knee else "")
            + f" A prefill of {last.rows} tokens took {_ms(last.median_ms)} ms against a compute bound of "
            f"{_ms(last.compute_ms)} ms, {held_words(curve, last)}: **{verdict_words(last, roof, sheet)}**.")


def docs_table(curve: Curve, roof: DeviceRoof, device: str = "") -> str:
    """The curve's figures as docs/measurements.md prints them (`python -m topics.ladder.docs FILE`): one row a
    figure, each said as the captions say it (one kernel per ratio, each kind's knee beside its own prediction)."""
    sheet = datasheet_for(device) if device else None
    rows = ["| what | measured |", "|---|---|"]
    star = next(iter(curve.of(DECODE_KIND)), None)
    if star is not None:
        rows.append(f"| lean decode, one sequence at context {curve.context} ({curve.kernel(star)}) | "
                    f"{_ms(star.median_ms)} ms ({_ms(star.low_ms)}–{_ms(star.high_ms)}), {held_words(curve, star)}: "
                    f"{verdict_words(star, roof, sheet)} |")
    n = eight(curve)
    for kind in ("prefill", "batch"):
        said = ratio_sentence(curve, kind, n)
        if said:
            rows.append(f"| {n} rows in one pass, against the pass it is compared with | {said} |")
    for kind in ("prefill", "batch"):
        said = knee_sentence(curve, roof, kind)
        if said:
            rows.append(f"| the knee ({'prefill' if kind == 'prefill' else 'decode for n sequences'}) | {said} |")
        out = outlier_sentence(curve, kind)
        if out:
            rows.append(f"| an outlier ({kind}) | {out} |")
    knee = curve.predicted_knee("prefill", roof)
    far = [p for p in curve.of("prefill") if knee and p.rows >= 4 * knee]
    if far:
        rows.append("| prefills past four predicted knees | " + "; ".join(
            f"n = {p.rows}: {held_words(curve, p)} ({share_words(p, roof, sheet)})" for p in far) + " |")
    return "\n".join(rows)
