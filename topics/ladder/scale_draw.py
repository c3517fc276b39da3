"""The Scale page's charts: KV-cache bytes against context for several models, and the roofline of a device; and the
prefill's sentence under it (measured here, predicted on a datasheet roof)."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from drawing.palette import DECODE, ESTIMATE, PREFILL, RECOMPUTED, layout, legend_under_title
from engine.forward.spec import ModelSpec
from physics import roofline
from physics.roofline import DeviceRoof
from physics.units import human_ms


def kv_growth_figure(archs: list[ModelSpec], max_tokens: int, batch: int, elem_bytes: float, scale: float = 1.0) -> go.Figure:
    """KV bytes against context length, several models at once (sliding layers flatten the curve). A model whose
    config caps its context below the axis's end stops there, its limit named at the end (Llama-2-7b reads 4,096)."""
    xs = [int(max_tokens * i / 50) for i in range(1, 51)]
    fig = go.Figure()
    for a in archs:
        label = a.attention + (f", {a.sliding_layers} sliding layers" if a.sliding_layers else "")
        limit = a.max_positions if a.max_positions_set and a.max_positions and a.max_positions < max_tokens else None
        at = [x for x in xs if x < limit] + [limit] if limit else xs
        fig.add_trace(go.Scatter(x=at, y=[a.kv_bytes(x, batch, elem_bytes) / 2**30 for x in at],
                                 name=f"{a.name} ({label})", mode="lines+text", line=dict(width=3),
                                 text=[""] * (len(at) - 1) + [f"\u2002its limit: {limit:,}" if limit else ""],
                                 textposition="top left" if limit and limit > 0.7 * max_tokens else "middle right",
                                 textfont=dict(size=13 * scale), cliponaxis=False,
                                 hovertemplate="%{x:,} tokens: %{y:.3g} GiB<extra>%{fullData.name}</extra>"))
    fig.update_xaxes(title="context length (tokens)")
    fig.update_yaxes(title=f"KV cache GiB (batch {batch}, estimate)", rangemode="tozero")
    return legend_under_title(layout(fig, "KV-cache size against context length", height=420, scale=scale), scale)


def roofline_figure(roof: DeviceRoof, points: list, scale: float = 1.0, predicted: bool = False) -> go.Figure:
    """The device's roof and each point placed on it (roofline.RoofPoint, or a ladder's: kind, intensity,
    achieved, label).

    The roof is DRAM's, and its ridge THE ridge (one per device and dtype). Where the probe found a cache much
    faster than DRAM, the cache's own roof is drawn too, dashed and named: a step whose bytes fit the cache is
    bounded by it (DeviceRoof.bandwidth_for), but it is never the ridge. predicted=True: a roof nothing ran on (a
    datasheet's), drawn as an estimate (purple, dashed), its points open, named 'predicted'."""
    xs = [10 ** (i / 20) for i in range(-60, 101)]  # 0.001 .. 1e5 FLOP/byte
    two = roof.cache_roof

    def gb_s(bandwidth: float) -> str:
        return f"{bandwidth / 1e9:,.0f} GB/s"

    line = dict(color=ESTIMATE, width=3, dash="dash") if predicted else dict(color="#333", width=3)
    fig = go.Figure(go.Scatter(x=xs, y=[min(roof.peak_flops, x * roof.dram_bandwidth) for x in xs],
                               name=f"{'from DRAM' if two else 'the roof, memory'}: {gb_s(roof.dram_bandwidth)}",
                               line=line))
    if two:  # each roof named in the legend, under the title: on a narrow plot (a phone's, half a projector's) a
        # name on its line runs off the left edge or is crossed by the ridge's
        fig.add_trace(go.Scatter(x=xs, y=[min(roof.peak_flops, x * roof.cache_bandwidth) for x in xs],
                                 name=f"the cache's roof: {gb_s(roof.cache_bandwidth)}",
                                 line=dict(color="#333", width=2, dash="dash")))
    colours = {"prefill": PREFILL, "decode (cache)": DECODE, "decode (no cache)": RECOMPUTED}
    for kind, colour in colours.items():
        pts = [p for p in points if p.kind == kind]
        if pts:
            marker = dict(color=colour, size=11) if not predicted else \
                dict(color=colour, size=12, symbol="circle-open", line=dict(width=3))
            fig.add_trace(go.Scatter(x=[p.intensity for p in pts], y=[p.achieved for p in pts], mode="markers",
                                     name=f"{kind} (predicted)" if predicted else kind, marker=marker,
                                     text=[p.label for p in pts],
                                     hovertemplate="%{text}<br>%{x:.1f} FLOP/byte<br>%{y:.3g} FLOP/s<extra></extra>"))
    # the ridge's words placed by hand: add_vline's own annotation takes x as log10 on a log axis (plotly), so
    # "ridge 19.4" was drawn at 10^19.4 FLOP/byte and stretched the axis until the roof filled a third of it
    fig.add_vline(x=roof.ridge, line_dash="dot")
    fig.add_annotation(x=math.log10(roof.ridge), y=math.log10(roof.peak_flops), yanchor="bottom", showarrow=False,
                       xanchor="right", xshift=-4,  # left of its line, not crossed by it
                       text=f"ridge {roof.ridge:.1f} FLOP/byte", font=dict(size=13 * scale))
    # powers of ten only: a log axis's minor labels ("2 5 2 5") read as numbers on a projector; the x axis spans the
    # points and the ridge, a decade either side, not the roof's whole line (eight decades turn a phone's ticks on
    # end), and a third of a decade more at the left: the first tick's number clear of the y axis's lowest one
    xs = [p.intensity for p in points] + [roof.ridge]
    fig.update_xaxes(range=[math.floor(math.log10(min(xs))) - 1.3, math.ceil(math.log10(max(xs))) + 1])
    if predicted:
        fig.update_xaxes(type="log", dtick=1, title=f"FLOP per byte moved in {roof.dtype} (estimate)")
        fig.update_yaxes(type="log", dtick=1, exponentformat="SI", title="predicted FLOP/s (nothing ran there)")
        return legend_under_title(layout(fig, f"Predicted: {roof.name.split(' (')[0]}, {roof.dtype}", height=460,
                                         scale=scale), scale)
    fig.update_xaxes(type="log", dtick=1, title="FLOP per byte moved (estimate)")
    fig.update_yaxes(type="log", dtick=1, exponentformat="SI",  # two lines: whole beside a short plot
                     title="achieved FLOP/s<br>(estimate ÷ measured)")
    return legend_under_title(layout(fig, f"Roofline: {roof.name}", height=460, scale=scale), scale)


def roof_sentence(here: DeviceRoof) -> str:
    """This device's roof in one sentence: its peak, its DRAM bandwidth, THE ridge (FLOP/byte and rows), and the
    cache's own roof where the probe found one (never called the ridge)."""
    cache = (f" Data that fits its cache reads at {here.cache_bandwidth / 1e9:,.1f} GB/s: the cache's own roof, "
             "which bounds a step whose bytes fit it (the bundled model's); it is not the ridge."
             if here.cache_roof else "")
    return (f"This server's roof ({here.name.replace('measured here, ', '')}): peak "
            f"{here.peak_flops / 1e9:,.1f} GFLOP/s, DRAM bandwidth {here.dram_bandwidth / 1e9:,.1f} GB/s: the ridge "
            f"at {here.ridge:.1f} FLOP/byte (~{here.ridge_tokens:.0f} rows in {here.dtype}).{cache} {_probes(here)}")


def ridges_apart(here: DeviceRoof, ladder) -> str:
    """Why the ladder shown above quotes another ridge for this kind of device, where the two print apart:
    each ridge is the peak over the bandwidth of the run that measured it, and the ladder's run had its own threads,
    day and machine (the probe's threads are those its kept probes ran with, not this moment's). Each curve is read
    against its own run's ridge. '' where they agree or the devices differ."""
    theirs = getattr(ladder, "roof", None)
    if (theirs is None or theirs.elem_bytes != here.elem_bytes
            or ("cuda" in ladder.device) != here.name.startswith("cuda") or f"{theirs.ridge:.1f}" == f"{here.ridge:.1f}"):
        return ""
    cpu = not here.name.startswith("cuda")
    probed = " and ".join(map(str, here.threads))  # more than one where probes on other thread counts were kept
    apart = (f" on {ladder.threads} thread{'' if ladder.threads == 1 else 's'}, this probe on {probed}"
             if cpu and here.threads and here.threads != (ladder.threads,) else "")
    return (f"The ladder above quotes its own run's ridge, {theirs.ridge:.1f} FLOP/byte (peak "
            f"{theirs.peak_flops / 1e9:,.1f} GFLOP/s, DRAM {theirs.dram_bandwidth / 1e9:,.1f} GB/s; {ladder.device}, "
            f"{ladder.measured_at[:10]}): each ridge is the peak over the bandwidth of the run that measured it{apart}. "
            f"This probe's peak is ×{here.peak_flops / theirs.peak_flops:.2f} that run's and its bandwidth "
            f"×{here.dram_bandwidth / theirs.dram_bandwidth:.2f}, so its ridge is ×{here.ridge / theirs.ridge:.2f}. "
            "Each curve is read against the ridge of the run that made it.")


def _probes(here: DeviceRoof) -> str:
    """How the roof was measured: one short probe reads low on a busy server, and the roof keeps the best rates of
    every probe since the server started, so it can only rise (the verdicts under it with it)."""
    if here.probes <= 1:
        return ("Measured by one short probe since the server started (the fastest of its runs): a busy moment reads "
                "low, and re-running the probe keeps the better rates.")
    return (f"The best rates of its {here.probes} probes since the server started: a busy moment reads low, and each "
            "probe can only raise them.")


def prefill_sentence(pre, spec, here, gpu) -> str:
    """The prefill measured here, judged against this device's bounds only; beside it, what `gpu` (a datasheet roof:
    nothing ran there) PREDICTS for the same pass in its own dtype (roofline.predict_step)."""
    v, p = roofline.step_verdict(pre, here), roofline.predict_step(pre, spec, gpu)
    return (f"The prefill of {pre.q_len} tokens, measured here: {pre.intensity_estimate:.1f} FLOP/byte (estimate, "
            f"{here.dtype}), {roofline.side(pre.intensity_estimate, here)} of this device's ridge ({here.ridge:.1f})"
            f"{roofline.cache_side(pre.intensity_estimate, pre.bytes_estimate, here)}; "
            f"{human_ms(pre.forward_ms)} against bounds of {human_ms(v.memory_ms)} (memory) and "
            f"{human_ms(v.compute_ms)} (compute): {v.label}. On an {roofline.short_name(gpu)} nothing ran: the same "
            f"pass is {p.words()}, {human_ms(p.predicted_ms)} (the larger of {human_ms(p.memory_ms)} memory and "
            f"{human_ms(p.compute_ms)} compute).")
