"""Grow the model: the size ladder on the Scale page, one pass over n rows beside it (the roofline by experiment),
and the ladders the lessons quote.

The ladder measures (topics/ladder/measure.py, curve.py), keeps (topics/ladder/store.py: once per server, in a
thread of its own so a click elsewhere does not end it) and draws (topics/ladder/draw.py, curve_draw.py); this
module places the pictures, the button and the measurement's progress. Every ladder stays on offer, each named
with its device, the paths it ran and its date (a picker): the recordings in assets/ and every measurement made
here. The one every session opens on, and the lessons quote, is this server's newest clean measurement, else the
recording made on this kind of device; a measurement flagged noisy (topics.ladder.notes.noisy) is kept beside,
named "busy", shown when picked, and draws no knee verdict. The CPU's and the GPU's curves can stand side by side.
"""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from physics.units import human_ms
from topics.ladder import curve_draw
from topics.ladder import draw as draw
from topics.ladder.notes import ladder_note, noisy
from topics.ladder.record import Ladder
from topics.ladder.store import (
    kept_ladder,
    ladder_failed,
    ladder_job,
    measured_ladders,
    recorded_ladders,
    recorded_on,
    start_ladder,
)
from ui.charts import chart
from ui.link_codec import LADDER_VIEWS
from ui.links import write_link
from ui.style import scale
from ui.text import error, plain, warning

PICTURES = dict(zip(LADDER_VIEWS, ("ms per token", "roofline", "time split", "table")))  # short: four fit a phone


THIS_SERVER = "this server"
BOTH = "CPU and GPU side by side"
GROW_HELP = ("The bundled model is too small to show the physics: its decode step is overhead-bound (Python and "
             "its many small operations set its time). Grown in its own family, the hardware sets the time. The "
             "proof is an experiment: one pass over n rows (a prefill of n tokens, or one decode step for n "
             "sequences) reads every weight once and does n times the arithmetic, so its time stays flat while the "
             "weights' bytes set it (on the memory side) and grows with n once the arithmetic does (on the compute "
             "side); the verdict under the chart says how near each roof the passes ran. The knee is measured where "
             "the flat level and the slope meet, beside the predicted one: a prefill's where its intensity meets "
             "the device's ridge; a batch of decodes also reads every sequence's K/V cache, in attention kernels "
             "whose time adds to the products', so its knee comes sooner, and at a long context after a few "
             "sequences. **Measure** builds each rung from the model's config with random "
             "weights (no download), times its passes on the threads the app serves a model that size with, times "
             "the big rung's lean pass over n rows, then gives the memory back. Once per server: every session "
             "sees the result. Students' steps wait while it runs.")


def _kind(lm) -> str:
    return lm.device.type if lm is not None else "cpu"


def recorded_words(rec) -> str:
    """'a recording: AMD EPYC …, 2026-11-27': a recording is named as one wherever it stands in for this server."""
    code = (getattr(rec, "versions", None) or {}).get("code")
    return (f"a recording made on {rec.device}, {rec.measured_at[:10]}"
            + (f", by this project's code at {code}" if code else ""))


def live_words(live: Ladder, flag: str | None = None) -> str:
    """'measured on this server (cpu: …)', and ', flagged busy' where its own notes flag it."""
    return f"measured on this server ({live.device})" + (", flagged busy" if flag else "")


def live_ladders(lm) -> list[Ladder]:
    """Every ladder measured on this server for lm, newest first, each on this server's roof as it stands (a later
    probe may have tightened it)."""
    if lm is None:
        return []
    from ui.model import device_roof

    here = device_roof()  # this server's roof as it stands: the one every page quotes
    return [live.on(here) if here.dtype == live.roof.dtype and here.name == live.roof.name else live
            for live in reversed(measured_ladders(lm))]


def shown_ladder(lm) -> tuple[Ladder | None, str]:
    """The ladder every session opens on and the lessons quote, and where it comes from: this server's newest clean
    measurement, else the recording made on this kind of device, else (none shipped) this server's newest, flagged.
    A measurement flagged noisy never takes a clean one's place."""
    lives = live_ladders(lm)
    clean = next((live for live in lives if not noisy(live)), None)
    if clean is not None:
        return clean, live_words(clean)
    for rec in recorded_on(_kind(lm), recorded_ladders()):
        return rec, recorded_words(rec)
    if lives:
        return lives[0], live_words(lives[0], noisy(lives[0]))
    return None, ""


def choice_label(ladder: Ladder) -> str:
    """A ladder as the picker names it, short enough to read whole: device, paths, date ('AMD EPYC CPU · readable +
    lean · 2026-11-28'); this server's first, with its time, and 'busy' where flagged."""
    name = draw.short_device(ladder.device).split(",")[0]
    name = f"{name.removeprefix('cpu: ')} CPU" if name.startswith("cpu: ") else name
    paths = draw.paths(ladder).replace(" path", "").replace(" pass", "")
    if ladder.recorded:
        return f"{name} · {paths} · {ladder.measured_at[:10]}"
    busy = ", busy" if noisy(ladder) else ""
    return f"{THIS_SERVER}, {ladder.measured_at[:10]} {ladder.measured_at[11:16]}{busy} · {name} · {paths}"


def choices(lm) -> dict[str, tuple[Ladder, str]]:
    """Every ladder on offer, named (`choice_label`) -> (the ladder, where it comes from): this server's
    measurements newest first, then the recordings, this kind of device's first."""
    out = {choice_label(live): (live, live_words(live, noisy(live))) for live in live_ladders(lm)}
    for rec in recorded_on(_kind(lm), recorded_ladders()):
        out.setdefault(choice_label(rec), (rec, recorded_words(rec)))
    return out


def other_ladder(lm) -> Ladder | None:
    """The recording made on the other kind of device (a datacenter GPU's, on a laptop), to show beside."""
    here = _kind(lm)
    return next((r for r in recorded_ladders() if ("cuda" in r.device) != (here == "cuda")), None)


def gpu_claim(lm, phase: str) -> str | None:
    """A lesson's claim in the recorded GPU ladder's numbers (its pass over n rows where it has one), beside this
    device's (None on a GPU server, or when none is shipped)."""
    other = other_ladder(lm)
    if other is None or "cuda" not in other.device:
        return None
    curve = curve_of(other)
    said = (curve_draw.curve_claim(curve, other.roof, phase, where_words(other), other.device) if curve
            else draw.phase_claim(other, phase))
    return f"On a datacenter GPU ({recorded_words(other)}): {said}"


def curve_of(ladder: Ladder | None):
    """The ladder's pass over n rows (at its curve rung), or None."""
    return next((r.curve for r in ladder.rungs if r.curve), None) if ladder is not None else None


def lesson_claim(lm, phase: str) -> str | None:
    """A lesson's claim (prefill compute-bound, decode memory-bound) in the numbers of the big rung's pass over n
    rows on this device (else the ladder's largest rung), with where they come from, and why the bundled model does
    not show it; None when no ladder exists at all."""
    shown, source = shown_ladder(lm)
    if shown is None:
        return None
    gpu = gpu_claim(lm, phase)
    curve = curve_of(shown)
    said = (curve_draw.curve_claim(curve, shown.roof, phase, where_words(shown), shown.device, noisy(shown))
            if curve else draw.phase_claim(shown, phase))
    return (f"{said} ({source}; the Scale page's *Grow the model* shows every rung and the pass over n rows.)"
            + (f"\n\n{gpu}" if gpu else ""))


def where_words(ladder: Ladder) -> str:
    """The device a ladder ran on, short: 'AMD EPYC 7B13 (cpu, 1 thread)' -> 'AMD EPYC 7B13'."""
    return draw.short_device(ladder.device)


def latency_claim(lm) -> str | None:
    """The Latency view's TTFT-vs-TPOT claim at a size where the hardware sets the time, and why the bundled model
    does not show it."""
    shown, source = shown_ladder(lm)
    if shown is None:
        return None
    own = draw.bundled_sentence(shown)
    if own and next(r for r in shown.rungs if r.trained).parameters != lm.spec.parameters:  # another model's ladder
        own = (f"That ladder grows {shown.model}, not the model on screen ({lm.spec.name}): what it measured of its "
               "own bundled rung is not this model's.")
    return f"{draw.per_token_claim(shown)} ({source}.)" + (f" {own}" if own else "")


@st.fragment(run_every=1.0)
def _progress(lm) -> None:
    """While this server measures (in a thread of its own: LadderStore.start), every page run of every session
    shows how far it got, each second; when it is done the whole page is drawn again, with the result."""
    job = ladder_job(lm)
    if job is None:
        st.rerun()  # finished since the last tick: the page draws the new ladder (or says why it failed)
    fraction, text = job.progress
    fraction = min(1.0, max(0.0, fraction))
    st.progress(fraction, text=f"measuring… {fraction * 100:.0f} % · {text}")


def _picked() -> None:
    st.session_state["scale_ladder_picked"] = True  # the lecturer chose: a new measurement does not move it


def grow_the_model(lm, settings) -> Ladder | None:
    """The Scale page's section: the bundled model grown rung by rung, each rung timed here, as pictures; every
    ladder on offer in a picker, and the CPU's and the GPU's passes over n rows side by side. Returns the ladder
    shown (None: none yet), whose ridge the roofline's sentence sets beside this server's."""
    st.header("Grow the model", help=GROW_HELP)
    offered = choices(lm)
    default, default_source = shown_ladder(lm)
    labels = list(offered)
    if default is not None and (st.session_state.get("scale_ladder_pick") not in labels
                                or not st.session_state.get("scale_ladder_picked")):
        st.session_state["scale_ladder_pick"] = choice_label(default)  # until the lecturer picks: the default
    row = st.container(horizontal=True, vertical_alignment="center", gap="small", key="scale_ladder_row")
    st.session_state.setdefault("scale_ladder_view", "per_token")
    row.segmented_control("picture", list(PICTURES), key="scale_ladder_view", persist_state="session",
                          format_func=PICTURES.get, label_visibility="collapsed")
    if labels:
        row.selectbox("ladder", labels, key="scale_ladder_pick", on_change=_picked, label_visibility="collapsed",
                      width=380, help="Every ladder on offer, each with its device, the paths it ran and its date: "
                                      "the recordings shipped with the app and each measurement made on this server "
                                      "(a busy one is kept beside the others, never over them).",
                      persist_state="session")
    both = pair(lm)
    if both:
        row.toggle(BOTH, key="scale_ladder_both", help="The shipped CPU recording's pass over n rows beside the "
                                                       "GPU's: the same measurement on two machines, each titled with "
                                                       "its date: recorded apart, by the code of that day.",
                   persist_state="session")
    live = kept_ladder(lm)
    took = f" (its recording took {human_ms(default.wall_s * 1e3)} on its machine)" if default else ""
    row.button("Measure again on this server" if live else f"Measure on this server{took}",
               key="scale_ladder_measure", icon=":material/straighten:", disabled=ladder_job(lm) is not None,
               on_click=start_ladder, args=(lm, live is not None))  # in the background: a click elsewhere keeps it
    if ladder_job(lm) is not None:
        _progress(lm)
    failed = ladder_failed(lm)
    if isinstance(failed, DecodeLabError):
        error(str(failed))
    elif failed is not None:
        error(f"The measurement stopped: {failed}")
    shown, source = offered.get(st.session_state.get("scale_ladder_pick"), (default, default_source))
    if shown is None:
        st.info("No ladder has been measured here yet: press the button to time one.")
        return None
    flag = noisy(shown)
    if flag and not shown.recorded:
        warning(f"This measurement ({choice_label(shown)}) was flagged: {flag} It is kept beside the others and "
                "replaces none of them; no knee is read off it.")
    if both and st.session_state.get("scale_ladder_both"):
        side_by_side(both)
        ladder_picture(shown, source, settings, wide=True)
    elif st.session_state.get("scale_ladder_view") == "table":  # the table takes the page's width: no column cut
        ladder_picture(shown, source, settings, wide=True)
        one_pass_n_rows(shown, source)
    else:
        left, right = st.columns([1, 1], gap="medium")
        with left:
            one_pass_n_rows(shown, source)
        with right:
            ladder_picture(shown, source, settings)
    return shown


def pair(lm) -> tuple[Ladder, Ladder] | None:
    """The shipped CPU recording and the GPU's, each with a pass over n rows (None unless both are there)."""
    recs = [r for r in recorded_ladders() if curve_of(r) is not None]
    cpu = next((r for r in recs if "cuda" not in r.device), None)
    gpu = next((r for r in recs if "cuda" in r.device), None)
    return (cpu, gpu) if cpu and gpu else None


def side_by_side(both: tuple[Ladder, Ladder]) -> None:
    """The CPU's and the GPU's passes over n rows next to each other (stacked on a phone), each titled with its
    device, path and date; their sentences fold under each."""
    cols = st.columns(2, gap="small")
    for col, ladder in zip(cols, both):
        with col:
            one_pass_n_rows(ladder, recorded_words(ladder), key=f"scale_curve_{'gpu' if 'cuda' in ladder.device else 'cpu'}",
                            folded=True)


def ladder_picture(shown: Ladder, source: str, settings, wide: bool = False) -> None:
    """The chosen picture of one ladder, its caption, and where it comes from."""
    view = st.session_state.get("scale_ladder_view") or "per_token"
    curves = "side_by_side" if st.session_state.get("scale_ladder_both") else None
    write_link(settings, ladder=view, curves=curves)  # a lecturer's link opens this picture, the curves as they stand
    if view == "per_token":
        chart(draw.per_token_figure(shown, scale=scale()), key="scale_ladder_per_token")
        st.markdown(draw.per_token_caption(shown))
    elif view == "roofline":
        chart(draw.roofline_figure(shown, scale=scale()), key="scale_ladder_roofline")
        st.markdown(draw.roofline_caption(shown))
    elif view == "split":
        chart(draw.split_figure(shown, scale=scale()), key="scale_ladder_split")
        st.markdown(draw.split_caption(shown))
    else:
        note = ladder_note(shown)
        if note:  # the pictures carry it on the chart; the table says it above itself
            warning(note)
        st.dataframe(shown.paths_frame(), hide_index=True, width="stretch" if wide else "content",
                     column_config=PATH_COLUMNS)
        st.caption("Each row names the path that ran it: lean (compiled: gpt-fast's pass, near the roofs) or readable "
                   "(transformers' eager code, the one the class steps through). Milliseconds are medians with their "
                   "min–max; × a bound is the time over the larger of its two bounds (estimates: bytes moved over "
                   "the measured bandwidth, FLOPs over the measured peak).")
        with st.expander("Every number, one row per rung"):
            st.dataframe(blanks_said(shown.frame()), hide_index=True)
    st.caption(plain(f"{shown.model}'s ladder ({shown.family}), {source}: each rung's prefill of {shown.tokens} "
                     f"tokens and one decode step at that context on the {draw.READABLE}"
                     + (" and, where a row says so, the lean pass (compiled)" if draw.paths(shown) != "readable path"
                        else "")
                     + f", medians of {shown.repeats} runs after a warm-up, "
                     f"on {shown.threads} thread{'' if shown.threads == 1 else 's'}, {shown.dtype}."))
    said = draw.bundled_sentence(shown)
    if said:
        st.caption(said)
    note = (getattr(shown, "versions", None) or {}).get("note")
    if note:  # what a recording made by another version of the code measured, in its own words
        st.caption(plain(note))
    if shown.left_out:
        st.caption(plain(f"Left out: {', '.join(shown.left_out)} (would not fit this device's memory)."))


PATH_COLUMNS = {  # widths a 1280 projector shows whole: no cell cut ("3.61 (3.5", "Llama-3-")
    "size": st.column_config.TextColumn(width=100), "path": st.column_config.TextColumn(width=130),
    "weights": st.column_config.TextColumn(width=80), "prefill ms": st.column_config.TextColumn(width=150),
    "prefill is": st.column_config.TextColumn(width=205), "decode ms": st.column_config.TextColumn(width=150),
    "decode is": st.column_config.TextColumn(width=205),
    "decode ÷ prefill / token": st.column_config.TextColumn("per-token gap", width=110,
                                                             help="decode ÷ prefill, per token"),
    "cache saves": st.column_config.TextColumn(width=95)}


def blanks_said(frame):
    """A table's empty cells (a pass not timed at that rung) said as '–', never 'None'. A column with a blank is
    text throughout (its numbers as they print), so the browser gets one type a column."""
    said = frame.astype(object).where(frame.notna(), "–")
    for col in said.columns[frame.isna().any()]:
        said[col] = said[col].map(lambda v: v if isinstance(v, str) else f"{v:,}" if isinstance(v, int) else f"{v:g}")
    return said


def one_pass_n_rows(shown: Ladder, source: str, key: str = "scale_curve", folded: bool = False) -> None:
    """The big rung's lean pass over n rows: time per pass against n, the bounds and the knees, and its words (a
    noisy measurement's flag in place of a knee verdict)."""
    curve = curve_of(shown)
    if curve is None:
        st.info(plain(f"This ladder ({source}) has no pass over n rows: it was measured without the lean pass. "
                      "Measure on this server to time one."))
        return
    flag = noisy(shown)
    when = f", {shown.measured_at[:10]}"
    short = (f"{'a recording: ' if shown.recorded else 'this server: '}{where_words(shown)}, {draw.LEAN}{when}"
             + (", busy" if flag else ""))
    chart(curve_draw.curve_figure(curve, shown.roof, short, scale=scale(), flag=flag), key=key)
    said = plain(curve_draw.curve_caption(curve, shown.roof, shown.device, flag))
    where = plain(f"{source}. {curve.path}; compile {curve.compile_s:.0f} s, apart from every timing; medians "
                  f"of {len(curve.points[0].samples_ms)} runs after a warm-up, min–max as bars.")
    if folded:  # side by side: the two pictures first, their sentences a click away
        with st.expander("what this curve shows"):
            st.markdown(said)
            st.caption(where)
        return
    st.markdown(said)
    st.caption(where)
