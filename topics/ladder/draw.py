"""The size ladder's pictures, drawn from its record (topics.ladder.record.Ladder): ladder in, figure out.

    per_token_figure   ms per token against parameters: a prefill's prompt token against a decoded token
    roofline_figure    this device's roofline with every rung's prefill and decode placed: the dots move as
                       the model grows (topics/ladder/scale_draw.py draws the roof)
    split_figure       where a cached decode step's time goes at each rung: its matmuls, and the rest

Each caption is computed from the same numbers, so it never says what its chart does not show. Log axes carry
plain tick labels only (no minor labels), and every figure says which rungs have random weights and which path ran
each number: the readable path (transformers' eager code, what the class steps through) or the lean pass (compiled,
near the roofs). Where a ladder has lean figures, the captions lead with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from drawing.latency import PHONE_NOTE_CHARS, note_box
from drawing.palette import DECODE, GREY, PREFILL, layout, log_ticks, rate_ticks
from drawing.svg import PROP_EM
from physics import roofline
from physics.units import times
from topics.ladder import scale_draw as scale_draw
from topics.ladder.notes import ladder_note
from topics.ladder.record import Ladder, RungResult

READABLE = "readable path (transformers' eager code)"
LEAN = "lean pass (compiled)"


@dataclass(frozen=True)
class RungPoint:
    """One rung's pass on the roofline picture."""

    kind: str  # 'prefill', 'decode (cache)', 'decode (no cache)'
    intensity: float
    achieved: float
    label: str


# ---------------------------------------------------------------- axes and notes

def _log_range(lo: float, hi: float, pad: float = 1.6) -> list[float]:
    return [math.log10(lo / pad), math.log10(hi * pad)]


def weights_note(ladder: Ladder, path: str = READABLE) -> str:
    """Which rung is the model itself and which are random, and the path its numbers ran on: said on every figure
    (four short lines: a phone shows each whole)."""
    trained = [r.label for r in ladder.rungs if r.trained]
    own = f"{trained[0]}: the model itself, trained · " if trained else ""
    where = f"a recording: {short_device(ladder.device)}, {ladder.measured_at[:10]}" if ladder.recorded \
        else short_device(ladder.device)
    return f"{where}<br>{own}other rungs:<br>{ladder.weights_note}<br>{path}"


def paths(ladder: Ladder) -> str:
    """The paths a ladder's numbers ran on, short: 'readable path + lean pass', or 'readable path'."""
    return "readable path + lean pass" if lean_rung(ladder) or any(r.lean for r in ladder.rungs) else "readable path"


def short_device(device: str) -> str:
    """'cpu: Intel(R) Xeon(R) Processor (x86_64, 2 threads, 260 MiB ...)' -> 'cpu: Intel Xeon Processor, 2 threads':
    a subtitle a phone shows whole (the caption under the chart says the device in full)."""
    name, _, rest = device.partition(" (")
    threads = next((part.strip() for part in rest.rstrip(")").split(",") if "thread" in part), "")
    name = name.replace("(R)", "").replace("(TM)", "").replace("  ", " ")
    return f"{name}, {threads}" if threads else name


def _ms(x: float) -> str:
    """Milliseconds to three figures at most: '792', '23.3', '3.66', '0.089'."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def _finish(fig: go.Figure, ladder: Ladder, title: str, scale: float, height: int = 360,
            path: str = READABLE) -> go.Figure:
    """The common look, the weights note under the title, the legend one entry a row at the figure's foot (as the
    pass-of-n curve's, topics/ladder/curve_draw.py) in a margin of its own, and a busy server's note
    (topics.ladder.notes.ladder_note) over the plot. A legend on the plot's top edge, under the note, wrapped into
    more rows on a phone and rose over the note; one entry a row takes the same room at any width. `height` is
    the figure's without its legend, which adds its own rows (the plot keeps its height)."""
    layout(fig, title, height=height, scale=scale)
    note = weights_note(ladder, path)
    entries = sum(1 for t in fig.data if t.name and t.showlegend is not False)
    legend_px = entries * 20 * scale + 8
    fig.update_layout(title=dict(subtitle=dict(text=note, font=dict(size=12 * scale))),
                      height=int(height * scale + legend_px),
                      margin=dict(t=int((44 + 17 * (note.count("<br>") + 1)) * scale), b=int(56 * scale + legend_px)),
                      legend=dict(orientation="v", yref="container", yanchor="bottom", y=0, x=0, traceorder="normal",
                                  font=dict(size=12 * scale)))
    busy = ladder_note(ladder)
    if busy:  # a busy server said on the chart, with the spread that shows it: over the plot, the legend under it
        note_box(fig, busy, scale, chars=PHONE_NOTE_CHARS, above_px=22 * scale)
    return fig


def _param_axis(fig: go.Figure, ladder: Ladder) -> None:
    """Parameters, log scale, a tick at every rung labelled with its count ('4.1M', '112M')."""
    ps = [r.parameters for r in ladder.rungs]
    fig.update_xaxes(type="log", title="parameters (log scale)", tickmode="array", tickvals=ps,
                     ticktext=[r.label for r in ladder.rungs], range=_log_range(min(ps), max(ps), 1.4))


# ---------------------------------------------------------------- ms per token


def per_token_figure(ladder: Ladder, scale: float = 1.0) -> go.Figure:
    """ms per token, prefill (per prompt token) against decode (per new token), against parameters; the gap named."""
    rungs = ladder.rungs
    xs = [r.parameters for r in rungs]
    fig = go.Figure()
    series = [("decode, readable: per new token", DECODE, "solid", [r.decode for r in rungs]),  # short: a phone's row
              (f"prefill ({ladder.tokens} tokens), readable: per prompt token", PREFILL, "solid",
               [r.prefill for r in rungs])]
    if all(r.lean for r in rungs):
        series.append((f"decode, {LEAN}", DECODE, "dash", [r.lean for r in rungs]))
    for name, colour, dash, passes in series:
        ys = [p.per_token_ms for p in passes]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, name=name, mode="lines+markers", line=dict(color=colour, width=4, dash=dash),
            marker=dict(size=11), text=[r.label for r in rungs],
            error_y=dict(type="data", symmetric=False, thickness=2,
                         array=[(p.high_ms - p.median_ms) / p.tokens for p in passes],
                         arrayminus=[(p.median_ms - p.low_ms) / p.tokens for p in passes]),
            hovertemplate="%{text}: %{y:.3g} ms per token (median; bar: min–max)<extra>" + name + "</extra>"))
    top = rungs[-1]
    d, p = top.decode.per_token_ms, top.prefill.per_token_ms
    fig.add_trace(go.Scatter(x=[top.parameters] * 2, y=[p, d], mode="lines", showlegend=False, hoverinfo="skip",
                             line=dict(color=GREY, width=2, dash="dot")))
    # right of the top rung, a third of the way up the gap (log scale), in room the x axis leaves for it: clear of
    # the lean diamonds and their words, to its left
    fig.add_annotation(x=math.log10(top.parameters), y=(2 * math.log10(p) + math.log10(d)) / 3, xanchor="left",
                       text=gap_words(top), showarrow=False, font=dict(size=14 * scale), xshift=6)
    ys = [v for r in rungs for v in (r.decode.per_token_ms, r.prefill.per_token_ms)]
    lean = lean_rung(ladder)
    if lean is not None and not all(r.lean for r in rungs):  # the lean path's two passes at the rung that has them
        ld, lp = lean.lean.per_token_ms, lean.lean_prefill.per_token_ms
        fig.add_trace(go.Scatter(
            x=[lean.parameters] * 2, y=[ld, lp], name=f"{LEAN} at {lean.label}: decode, prefill per token",
            mode="lines+markers", line=dict(color=GREY, width=2, dash="dash"),
            marker=dict(color=[DECODE, PREFILL], size=13, symbol="diamond", line=dict(color="#222", width=1)),
            hovertemplate="%{y:.3g} ms per token<extra>the lean pass (compiled)</extra>"))
        # right of its prefill diamond, under the readable gap's words
        fig.add_annotation(x=math.log10(lean.parameters), y=math.log10(lp), yanchor="top", xanchor="left",
                           xshift=8, showarrow=False, font=dict(size=13 * scale, color="#444"),
                           text=f"lean pass ×{lean.lean_gap:.0f}")
        ys += [ld, lp]
    lo, hi = min(min(ys), min(r.prefill.low_ms / r.prefill.tokens for r in rungs)), max(ys)
    vals, texts = log_ticks(lo / 1.6, hi * 1.6)
    fig.update_yaxes(type="log", title="ms per token (median, measured)", tickmode="array", tickvals=vals,
                     ticktext=texts, range=_log_range(lo, hi))
    _param_axis(fig, ladder)
    ps = [r.parameters for r in rungs]
    lo, hi = math.log10(min(ps) / 1.4), math.log10(max(ps))
    fig.update_xaxes(range=[lo, hi + 0.45 * (hi - lo)])  # a quarter of the plot right of the top rung: its words
    return _finish(fig, ladder, "ms per token: prefill vs decode", scale)  # the lean pass: its legend entry


def gap_words(r: RungResult) -> str:
    """'decode<br>×12 dearer<br>per token' (or cheaper, if that is what was measured): narrow, for a phone."""
    ratio = r.decode_vs_prefill_per_token
    if ratio >= 1:
        said = f"decode<br>×{ratio:.0f} dearer<br>per token" if ratio >= 10 else \
            f"decode<br>×{ratio:.1f} dearer<br>per token"
    else:
        said = f"decode<br>×{1 / ratio:.1f} cheaper<br>per token"
    return said + "<br>(readable path)"  # the Stepper's eager passes: the lean path's gap is said apart


def per_token_caption(ladder: Ladder) -> str:
    """The chart in one sentence, from its numbers, and the rule that explains the gap (`gap_rule`)."""
    first, top = ladder.rungs[0], ladder.rungs[-1]
    words = gap_words(top).replace("<br>", " ")
    text = (f"On the {READABLE}, at {top.label} parameters one decoded token costs {_ms(top.decode.per_token_ms)} ms, "
            f"one prompt token of the {ladder.tokens}-token prefill {_ms(top.prefill.per_token_ms)} ms: {words}. "
            f"{gap_rule(ladder)}")
    if first is not top:
        text += f" At {first.label} the readable path's gap is ×{first.decode_vs_prefill_per_token:.1f}."
    lean = lean_sentence(ladder)
    return (f"{lean} " if lean else "") + text  # the lean pass first: there the hardware sets the time


def lean_rung(ladder: Ladder) -> RungResult | None:
    """The largest rung whose lean decode and lean prefill were both timed (None: no such rung)."""
    return next((r for r in reversed(ladder.rungs) if r.lean_gap is not None), None)


def lean_sentence(ladder: Ladder) -> str | None:
    """The per-token gap and what the cache saves, on the lean path where a rung has it: there the hardware sets
    both passes' times; the readable path's figures at the same rung are overhead over overhead, said beside with
    how far above their bounds they ran. Each figure with the rule's."""
    r = lean_rung(ladder)
    if r is None:
        return None
    here = ladder.roof.ridge_tokens
    s = r.lean_prefill.tokens
    rule = roofline.decode_prefill_gap(s, here)
    return (f"On the lean pass at {r.label} (compiled whole: the hardware sets both times), a decoded token costs "
            f"{_ms(r.lean.per_token_ms)} ms and a prompt token {_ms(r.lean_prefill.per_token_ms)} ms: "
            f"×{r.lean_gap:.0f} ({_against_rule(r.lean_gap, rule, r.lean, r.lean_prefill, name=True)}); the cache "
            f"saves {times(r.lean_cache_saves)} there (its {s}-token prefill stands for the cache-off step; the rule: "
            f"{times(roofline.cache_off_steps(s + 1, here))}). The {READABLE} measured a gap of "
            f"×{r.decode_vs_prefill_per_token:.0f} and a cache saving of {times(r.cache_saves)} at {r.label}, "
            + ("overhead over overhead" if "overhead-bound" in (r.decode.kind, r.nocache.kind) else
               "its own figures, further from the roofs")
            + f": its decode took ×{r.decode.ratio:.1f} and its cache-off step ×{r.nocache.ratio:.1f} their bounds.")


def gap_rule(ladder: Ladder) -> str:
    """Why decode costs more per token than prefill, as a rule that holds beyond this device: the per-token gap is
    about min(s, the ridge in tokens) (roofline.decode_prefill_gap), with this device's ridge and an H100's."""
    top, s, h100 = ladder.rungs[-1], ladder.tokens, roofline.h100()
    here = ladder.roof.ridge_tokens
    rule = roofline.decode_prefill_gap(s, here)
    said = (f"The rule: the per-token gap ≈ min(s, the ridge in tokens). A prefill reads each weight once for all "
            f"s = {s} positions, but once s passes the ridge it is compute-bound and stops getting cheaper per token. "
            f"The ridge of {machine(ladder)} is ~{here:.0f} tokens ({_dtype(ladder)}), so "
            f"the rule gives ×{rule:.0f} there (measured "
            + (f"×{top.lean_gap:.0f} on the lean pass, {_against_rule(top.lean_gap, rule, top.lean, top.lean_prefill)}"
               f"; ×{top.decode_vs_prefill_per_token:.0f} on the readable path, "
               if top.lean_gap else f"×{top.decode_vs_prefill_per_token:.1f}, ")
            + f"{_against_rule(top.decode_vs_prefill_per_token, rule, top.decode, top.prefill)}); "
            + f"on an {roofline.short_name(h100)} (datasheet) in {h100.dtype} (ridge ~{h100.ridge_tokens:.0f} tokens) "
            f"it predicts ×{roofline.decode_prefill_gap(s, h100.ridge_tokens):.0f} at s = {s}"
            + (": both phases predicted on the memory side." if s < h100.ridge_tokens else "."))
    return said


def _against_rule(gap: float, rule: float, decode, prefill, name: bool = False) -> str:
    """How far a measured gap is off the rule, and why: the rule is the two bounds' quotient, so the measured gap is
    about the rule times how far the decode step ran above its bound over how far the prefill ran above its own.
    `name`: give the rule's own figure too."""
    return (f"×{gap / rule:.2f} the rule" + (f"'s ×{rule:.0f}" if name else "") + f": its decode step ran "
            f"×{decode.ratio:.2f} its bound, its prefill ×{prefill.ratio:.2f} its own")


def machine(ladder: Ladder) -> str:
    """The machine a ladder ran on, named where its ridge is quoted ('AMD EPYC, 1 thread (recorded 2026-11-28)'):
    a recording's ridge and this server's stand on one page, each with its own."""
    when = f", recorded {ladder.measured_at[:10]}" if ladder.recorded else ", measured on this server"
    return f"{short_device(ladder.device)}{when}"


def _dtype(ladder: Ladder) -> str:
    return ladder.roof.dtype


# ---------------------------------------------------------------- the roofline


NAME_SIZE = 13  # a rung's name beside its point on the roofline


def roofline_figure(ladder: Ladder, scale: float = 1.0, nocache: bool = True) -> go.Figure:
    """The device's roofline with every rung's passes placed; lines join the rungs, smallest to largest."""
    kinds = [("prefill", "prefill"), ("decode", "decode (cache)")] + ([("nocache", "decode (no cache)")] if nocache
                                                                       else [])
    points = []
    for attr, kind in kinds:
        for r in ladder.rungs:
            m = getattr(r, attr)
            points.append(RungPoint(kind=kind, intensity=m.intensity, achieved=m.achieved,
                                    label=f"{r.label}: {m.label}, {m.spread()} ms"))
    fig = scale_draw.roofline_figure(ladder.roof, points, scale=scale)
    ends = {ladder.rungs[0].label, ladder.rungs[-1].label}
    for tr in (t for t in fig.data if t.mode == "markers"):  # each kind's points, in rung order (not the roofs)
        tr.mode = "lines+markers+text"
        tr.line = dict(color=tr.marker.color, width=2)
        # the smallest rung named under its point, the largest to its right: the line rising between them, and the
        # lean pass's diamond a rung below, leave both words clear; past the plot's edge if it must: never cut
        tr.textposition = ["bottom center" if i == 0 else "middle right" for i in range(len(tr.x))]
        tr.cliponaxis = False
        tr.textfont = dict(size=NAME_SIZE * scale, color=tr.marker.color)
        tr.hovertext = tr.text
        tr.hovertemplate = "%{hovertext}<br>%{x:.1f} FLOP/byte<br>%{y:.3g} FLOP/s<extra></extra>"
        named = tr.name != "decode (no cache)"  # its points sit near the prefill's: their hover names them
        if not named:  # a step without the cache is a prefill of the whole text again: its point lies on the
            # prefill's, so it is a ring of that dot's size, the dot seen inside
            tr.marker = dict(color=tr.marker.color, size=11, symbol="circle-open", line=dict(width=3))
            tr.line.dash = "dot"
        tr.text = [t.split(":")[0] if named and t.split(":")[0] in ends else "" for t in tr.hovertext]
        tr.name = f"{tr.name}, readable"
    for attr, kind, colour in (("lean_prefill", "prefill", PREFILL), ("lean", "decode", DECODE)):
        lean = [r for r in ladder.rungs if getattr(r, attr)]  # the lean pass where it was timed, a diamond
        if lean:
            fig.add_trace(go.Scatter(
                x=[getattr(r, attr).intensity for r in lean], y=[getattr(r, attr).achieved for r in lean],
                mode="lines+markers", name=f"{kind}, {LEAN}", line=dict(color=colour, width=2, dash="dash"),
                marker=dict(color=colour, size=13, symbol="diamond", line=dict(color="#222", width=1)),
                text=[f"{r.label}: {getattr(r, attr).label}, {getattr(r, attr).spread()} ms" for r in lean],
                hovertemplate="%{text}<br>%{x:.1f} FLOP/byte<br>%{y:.3g} FLOP/s<extra>" + LEAN + "</extra>"))
            points += [RungPoint(kind, getattr(r, attr).intensity, getattr(r, attr).achieved, r.label) for r in lean]
    roof = ladder.roof
    xs = [p.intensity for p in points] + [roof.ridge]
    ys = [p.achieved for p in points] + [roof.peak_flops]
    x_range = _log_range(min(xs), max(xs), 2.5)
    fig.update_xaxes(tickmode="array", range=x_range,
                     tickvals=(t := log_ticks(min(xs) / 2.5, max(xs) * 2.5, steps=(1,)))[0], ticktext=t[1])
    fig.update_yaxes(tickmode="array", range=_log_range(min(ys), max(ys), 2.5),
                     tickvals=(t := rate_ticks(min(ys) / 2.5, max(ys) * 2.5))[0], ticktext=t[1])
    fig = _finish(fig, ladder, "Every rung on its machine's roofline", scale, height=380)
    top = ladder.rungs[-1].label
    named_at = [x for tr in fig.data if tr.mode == "lines+markers+text" for x, t in zip(tr.x, tr.text) if t == top]
    if named_at and (math.log10(max(named_at)) - x_range[0]) / (x_range[1] - x_range[0]) > 0.6:
        # the largest rung's name runs past the plot's right edge: a margin of its width holds it whole
        fig.update_layout(margin_r=int(len(top) * PROP_EM * NAME_SIZE * scale + 12))
    return fig


def bound_words(m, matmul_share: float | None = None) -> str:
    """The verdict's own words ('memory-bound: 74% of the bandwidth (MBU)') and how many times its bound it took; on
    the side of a ridge, not bound by it, how much of the pass its matmuls were where they were timed alone."""
    said = f"{m.label}, ×{m.ratio:.2f} its bound" if m.kind != "overhead-bound" else m.label
    if m.kind.endswith("side") and matmul_share is not None:
        said += f"; its matmuls alone {matmul_share:.0%} of the pass"
    return said


def roofline_caption(ladder: Ladder) -> str:
    """Where decode and prefill start and end on the roofline, in the verdict's own words, and the condition the
    prefill's verdict holds under (`prefill_condition`); the lean pass's first where it was timed."""
    lean = lean_roof_words(ladder)
    return (f"{lean} " if lean else "") + f"On the {READABLE}: " + _readable_roof_words(ladder)


def lean_roof_words(ladder: Ladder) -> str | None:
    """Where the lean pass sits on the roofline, in the verdict's words, at the rung that has it (None: none)."""
    r = next((r for r in reversed(ladder.rungs) if r.lean), None)
    if r is None:
        return None
    pre = f"; its prefill of {r.lean_prefill.q_len} tokens {bound_words(r.lean_prefill)}" if r.lean_prefill else ""
    return f"On the {LEAN} at {r.label}, a decode step is {bound_words(r.lean)}{pre}."


def _readable_roof_words(ladder: Ladder) -> str:
    first, top = ladder.rungs[0], ladder.rungs[-1]
    if first is top:
        return (f"One rung ({top.label}): its decode step is {bound_words(top.decode, top.matmul_share)}, its prefill "
                f"{bound_words(top.prefill, top.prefill_matmul_share)}. {prefill_condition(ladder)} "
                "Grow the model to see them move.")
    return (f"Cached decode: {bound_words(first.decode, first.matmul_share)} at {first.label}; "
            f"{bound_words(top.decode, top.matmul_share)} at {top.label}. "
            f"Prefill of {ladder.tokens} tokens: {bound_words(first.prefill, first.prefill_matmul_share)} at "
            f"{first.label}; {bound_words(top.prefill, top.prefill_matmul_share)} at {top.label}. "
            f"{prefill_condition(ladder)} With the cache off, decode recomputes {top.nocache.q_len} "
            f"positions: {bound_words(top.nocache)} at {top.label}.{prefill_matmul_words(top)}")


def prefill_condition(ladder: Ladder) -> str:
    """'A 128-token prefill is compute-bound' holds on a device whose ridge is below 128 tokens: said with this
    device's ridge and the H100's prediction (in bf16, at batch 1) for the same prefill."""
    top, s, h100 = ladder.rungs[-1], ladder.tokens, roofline.h100()
    here = ladder.roof.ridge_tokens
    p = roofline.predict_counts(top.prefill.flops, top.prefill.bytes_moved, ladder.roof.elem_bytes, h100)
    past = "past" if s >= here else "short of"
    return (f"A {s}-token prefill is {past} the ridge of {machine(ladder)} (~{here:.0f} tokens, "
            f"{_dtype(ladder)}); on an {roofline.short_name(h100)} at batch 1 (its datasheet's ridge "
            f"~{h100.ridge_tokens:.0f} tokens "
            f"in {h100.dtype}) the same prefill is {p.words()}.")


def prefill_matmul_words(r: RungResult) -> str:
    """Why a compute-bound prefill still sits above its bound, from the rung's own timing of its matmuls alone."""
    m, mm = r.prefill, r.prefill_matmul_ms
    if mm is None or m.kind != "compute-bound" or m.compute_ms <= 0:
        return ""
    if mm >= m.median_ms:
        return (f" At {r.label} the prefill's matmuls timed alone ({_ms(mm)} ms) took the whole prefill "
                f"({_ms(m.median_ms)} ms): the gap to the bound is the matmuls' own.")
    return (f" At {r.label} the prefill's matmuls alone took {_ms(mm)} ms, ×{mm / m.compute_ms:.1f} the compute bound "
            f"(the bound is a large square matmul's peak; these shapes run slower); the other "
            f"{1 - mm / m.median_ms:.0%} of the prefill is attention, norms and the small ops between.")


# ---------------------------------------------------------------- where a decode step's time goes


def split_figure(ladder: Ladder, scale: float = 1.0) -> go.Figure:
    """Per rung, a cached decode step as 100 %: its matmuls timed alone, and the rest (small ops, Python)."""
    labels = [r.label for r in ladder.rungs]
    share = [r.matmul_share for r in ladder.rungs]
    fig = go.Figure([
        go.Bar(x=labels, y=[100 * s for s in share], name="matmuls alone",
               marker_color=DECODE, text=[f"{s:.0%}" for s in share], textposition="inside",
               textfont=dict(size=15 * scale)),
        go.Bar(x=labels, y=[100 * (1 - s) for s in share], name="the rest: small ops, Python",
               marker_color=GREY, text=[f"{1 - s:.0%}" for s in share], textposition="inside",
               textfont=dict(size=15 * scale)),
    ])
    for r in ladder.rungs:
        fig.add_annotation(x=r.label, y=100, yanchor="bottom", showarrow=False, text=f"{r.decode.median_ms:.1f} ms",
                           font=dict(size=13 * scale))
    fig.update_traces(textangle=0, constraintext="none", insidetextanchor="middle", cliponaxis=False)  # a thin
    #                 share's words level, whole and in its bar, not shrunk on end
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="parameters (each rung's step = 100 %)", type="category")
    fig.update_yaxes(title="% of one cached decode step", range=[0, 112], tickvals=[0, 25, 50, 75, 100])
    return _finish(fig, ladder, "Where a decode step's time goes", scale)  # the readable step: said under the title


def split_caption(ladder: Ladder) -> str:
    """Does the rest's share shrink as the model grows? Said as measured."""
    first, top = ladder.rungs[0], ladder.rungs[-1]
    a, b = 1 - first.matmul_share, 1 - top.matmul_share
    r = next((r for r in reversed(ladder.rungs) if r.lean), None)
    lead = (f"The {LEAN} runs {r.label}'s decode step in {_ms(r.lean.median_ms)} ms ({bound_words(r.lean)}); the "
            f"bars are the {READABLE}'s step, {_ms(r.decode.median_ms)} ms, taken apart. " if r else
            f"The bars are the {READABLE}'s decode step, taken apart. ")
    if first is top:
        return lead + f"At {top.label} the matmuls are {top.matmul_share:.0%} of it; the rest is {a:.0%}."
    trend = "shrinks" if b < a - 0.05 else "grows" if b > a + 0.05 else "stays about the same"
    text = lead + (f"The matmuls are {first.matmul_share:.0%} of a cached decode step at {first.label} and "
            f"{top.matmul_share:.0%} at {top.label}: the rest (attention's small ops, norms, the cache writes and "
            f"the Python around them) {trend}, from {a:.0%} to {b:.0%}.")
    if top.matmul_ms >= top.decode.median_ms:  # two timings taken apart disagree: say so rather than claim "0 %"
        text += (f" At {top.label} the matmuls timed alone took as long as the whole step or longer: the step is "
                 "its matmuls and little else, and timings taken apart on a shared machine move about.")
    elif trend != "shrinks":
        text += " " + _rest_words(ladder)
    return text


def _rest_words(ladder: Ladder) -> str:
    """Why the rest's share did not shrink, as measured: said to be noise only where the top rung's runs spread wide;
    otherwise its milliseconds, which grow with the layers, and what the lean pass shows instead."""
    first, top = ladder.rungs[0], ladder.rungs[-1]
    if top.decode.high_ms > 1.15 * top.decode.low_ms:
        return (f"{top.label}'s runs spread from {_ms(top.decode.low_ms)} to {_ms(top.decode.high_ms)} ms: measure "
                "again to check.")
    said = (f"The rest is not a fixed cost: {_ms(_rest_ms(first))} ms at {first.label}, {_ms(_rest_ms(top))} ms at "
            f"{top.label}: every small operation of every layer is dispatched on its own, one after another, on "
            "this path.")
    if top.lean and top.lean.kind != "overhead-bound":
        said += f" The {LEAN} takes it away: {_ms(top.lean.median_ms)} ms, {_kind_words(top.lean.kind)}."
    return said


def _kind_words(kind: str) -> str:
    """A verdict's kind in a sentence: "memory-bound", or "on the memory side"."""
    return f"on the {kind}" if kind.endswith("side") else kind


def _rest_ms(r) -> float:
    """The part of a rung's readable decode step outside its matmuls (the matmuls timed alone: an estimate of a
    share, two timings taken apart)."""
    return r.decode.median_ms * (1 - r.matmul_share)


def bundled_sentence(ladder: Ladder) -> str | None:
    """What the lessons say of the trained model: what bounds it, and why (None if the ladder has no such rung)."""
    own = next((r for r in ladder.rungs if r.trained), None)
    if own is None:
        return None
    said = (f"On {ladder.device}, the decode step of the bundled {own.label} model ({ladder.model}) is "
            f"{own.decode.label}")
    if "matrix products" not in own.decode.label:  # an overhead-bound label says their share already
        said += f": its matmuls are {own.matmul_share:.0%} of the step"
    if own.decode.kind == "overhead-bound":
        return said + f": the rest, {_ms(_rest_ms(own))} ms, is small operations and the Python around them. " + \
            _bigger_words(ladder, own)
    if own.decode.kind.endswith("side"):
        return said + f", the other {1 - own.matmul_share:.0%} overhead: small operations and Python."
    return said + f", {own.decode.ratio:.1f}× its {own.decode.kind.removesuffix('-bound')} bound."


def _bigger_words(ladder: Ladder, own) -> str:
    """What the largest rung of this recording shows, in its own verdicts: the readable step's, then the lean
    pass's where the readable one is still overhead-bound. Never "bigger rungs show the physics" unless they do."""
    top = ladder.rungs[-1]
    if top is own:
        return ""
    if top.decode.kind != "overhead-bound":
        return (f"At {top.label} that rest is {_ms(_rest_ms(top))} ms, {1 - top.matmul_share:.0%} of the step, and "
                f"the step is {_kind_words(top.decode.kind)}: the bigger model shows the physics.")
    said = (f"At {top.label} the readable step is still overhead-bound: {_ms(_rest_ms(top))} ms of its "
            f"{_ms(top.decode.median_ms)} ms outside the matmuls")
    if top.lean and top.lean.kind != "overhead-bound":
        return (said + f"; the {LEAN} runs it in {_ms(top.lean.median_ms)} ms, {_kind_words(top.lean.kind)}: that "
                "shows the physics.")
    return said + "."


# ---------------------------------------------------------------- the lessons' claims, in the ladder's own numbers


def phase_claim(ladder: Ladder, phase: str) -> str:
    """Prefill (compute-bound?) or decode (memory-bound?) at the ladder's largest rung, as measured: the verdict is
    roofline.verdict's, so the sentence says what the measurement shows, whatever the lesson expects; then the
    condition it holds under (this device's ridge in tokens) and an H100's prediction for the same pass."""
    top = ladder.rungs[-1]
    m = top.prefill if phase == "prefill" else top.decode
    bound, bound_ms = ("compute", m.compute_ms) if phase == "prefill" else ("memory", m.memory_ms)
    what = (f"a {ladder.tokens}-token prefill" if phase == "prefill"
            else f"one cached decode step at context {ladder.tokens}")
    weights = "the model itself" if top.trained else "random weights: for timing only"
    said = (f"Grown to **{top.label} parameters** ({weights}), {what} on the {READABLE} took {m.spread()} ms "
            f"against a {bound} bound of "
            f"{bound_ms:.3g} ms (×{m.median_ms / bound_ms:.1f}): **{m.label}**.")
    if phase == "prefill":
        return f"{said} {prefill_condition(ladder)}"
    h100 = roofline.h100()
    p = roofline.predict_counts(m.flops, m.bytes_moved, ladder.roof.elem_bytes, h100)
    return f"{said} On an {roofline.short_name(h100)} at batch 1 the same step is {p.words()}."


def per_token_claim(ladder: Ladder) -> str:
    """Time to first token against time per output token, at the largest rung: what a prompt token and a decoded
    token each cost once the hardware, not Python, sets the time, and the rule that sets the gap (`gap_rule`)."""
    top = ladder.rungs[-1]
    lean = lean_sentence(ladder)
    return ((f"{lean} " if lean else "")
            + f"At {top.label} parameters (random weights: for timing only) on the {READABLE}, a prompt token of the "
            f"{ladder.tokens}-token prefill cost {_ms(top.prefill.per_token_ms)} ms and a decoded token "
            f"{_ms(top.decode.per_token_ms)} ms: {gap_words(top).replace('<br>', ' ')}. {gap_rule(ladder)}")
