"""Grow the model: the size ladder on the Scale page, one pass over n rows beside it (the roofline by experiment),
and the ladders the lessons quote.

The ladder measures (topics/ladder/measure.py, curve.py), keeps (topics/ladder/store.py: once per server, in a
thread of its own so a click elsewhere does not end it) and draws (topics/ladder/draw.py, curve_draw.py); this
module places the pictures, the button and the measurement's progress. Until this server has measured its own,
the ones recorded in assets/ are shown, each naming its device and date; a recording made on the other kind of
device (a GPU's on a laptop, a CPU's on a GPU server) can be shown beside, so a student on a laptop sees what a
datacenter GPU does.
"""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from topics.ladder import curve_draw
from topics.ladder import draw as draw
from topics.ladder.notes import ladder_note
from topics.ladder.record import Ladder
from topics.ladder.store import kept_ladder, ladder_failed, ladder_job, recorded_ladders, recorded_on, start_ladder
from ui.link_codec import LADDER_VIEWS
from ui.links import write_link
from ui.style import scale
from ui.text import error, plain, warning

PICTURES = dict(zip(LADDER_VIEWS, ("ms per token", "roofline", "time split", "table")))  # short: four fit a phone


THIS_SERVER = "this server"
GROW_HELP = ("The bundled model is too small to show the physics: its decode step is overhead-bound (Python and "
             "hundreds of small operations set its time). Grown in its own family, the hardware sets the time. The "
             "proof is an experiment: one pass over n rows (a prefill of n tokens, or one decode step for n "
             "sequences) reads every weight once and does n times the arithmetic, so its time stays flat while the "
             "weights' bytes set it (on the memory side) and grows with n once the arithmetic does (on the compute "
             "side); the verdict under the chart says how near each roof the passes ran. The knee is measured where "
             "the flat level and the slope meet, beside the predicted one: a prefill's where its intensity meets "
             "the device's ridge; a batch of decodes also reads every sequence's K/V cache, so its knee comes "
             "later, or never at a long context. **Measure** builds each rung from the model's config with random "
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


def shown_ladder(lm) -> tuple[Ladder | None, str]:
    """The ladder to quote: this server's own when measured, else the one recorded on this kind of device; and
    where it comes from."""
    live = kept_ladder(lm) if lm is not None else None
    if live is not None:
        from ui.model import device_roof

        here = device_roof()  # this server's roof as it stands: the one every page quotes
        if here.dtype == live.roof.dtype and here.name == live.roof.name:
            live = live.on(here)
        return live, f"measured on this server ({live.device})"
    for rec in recorded_on(_kind(lm), recorded_ladders()):
        return rec, recorded_words(rec)
    return None, ""


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
    said = (curve_draw.curve_claim(curve, shown.roof, phase, where_words(shown), shown.device) if curve
            else draw.phase_claim(shown, phase))
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


def grow_the_model(lm, settings) -> None:
    """The Scale page's section: the bundled model grown rung by rung, each rung timed here, as pictures."""
    st.header("Grow the model", help=GROW_HELP)
    live = kept_ladder(lm)
    other = other_ladder(lm)
    row = st.container(horizontal=True, vertical_alignment="center", gap="small", key="scale_ladder_row")
    st.session_state.setdefault("scale_ladder_view", "per_token")
    row.segmented_control("picture", list(PICTURES), key="scale_ladder_view", persist_state="session",
                          format_func=PICTURES.get, label_visibility="collapsed")
    if other is not None:
        row.segmented_control("whose", [THIS_SERVER, other.device], key="scale_ladder_whose", persist_state="session",
                              default=THIS_SERVER, label_visibility="collapsed",
                              help="This server's ladder (measured here, or recorded on a device like it), or the "
                                   f"one recorded on {other.device}: the same code, another machine.")
    row.button("Measure again on this server" if live else "Measure on this server (a few minutes)",
               key="scale_ladder_measure", icon=":material/straighten:", disabled=ladder_job(lm) is not None,
               on_click=start_ladder, args=(lm, live is not None))  # in the background: a click elsewhere keeps it
    if ladder_job(lm) is not None:
        _progress(lm)
    failed = ladder_failed(lm)
    if isinstance(failed, DecodeLabError):
        error(str(failed))
    elif failed is not None:
        error(f"The measurement stopped: {failed}")
    if other is not None and st.session_state.get("scale_ladder_whose") == other.device:
        shown, source = other, recorded_words(other)
    else:
        shown, source = shown_ladder(lm)
    if shown is None:
        st.info("No ladder has been measured here yet: press the button to time one.")
        return
    left, right = st.columns([1, 1], gap="medium")
    with left:
        one_pass_n_rows(shown, source)
    with right:
        ladder_picture(shown, source, settings)


def ladder_picture(shown: Ladder, source: str, settings) -> None:
    """The chosen picture of one ladder, its caption, and where it comes from."""
    view = st.session_state.get("scale_ladder_view") or "per_token"
    write_link(settings, ladder=view)  # a lecturer's link opens this picture
    if view == "per_token":
        st.plotly_chart(draw.per_token_figure(shown, scale=scale()), key="scale_ladder_per_token")
        st.markdown(draw.per_token_caption(shown))
    elif view == "roofline":
        st.plotly_chart(draw.roofline_figure(shown, scale=scale()), key="scale_ladder_roofline")
        st.markdown(draw.roofline_caption(shown))
    elif view == "split":
        st.plotly_chart(draw.split_figure(shown, scale=scale()), key="scale_ladder_split")
        st.markdown(draw.split_caption(shown))
    else:
        note = ladder_note(shown)
        if note:  # the pictures carry it on the chart; the table says it above itself
            warning(note)
        st.dataframe(shown.frame(), hide_index=True, width="stretch")
        st.caption("Milliseconds are medians with their min–max; bounds and FLOPs are estimates (bytes moved over "
                   "the measured bandwidth, FLOPs over the measured peak).")
    st.caption(plain(f"{shown.model}'s ladder ({shown.family}), {source}: each rung's prefill of {shown.tokens} "
                     f"tokens and one decode step at that context, medians of {shown.repeats} runs after a warm-up, "
                     f"on {shown.threads} thread{'' if shown.threads == 1 else 's'}, {shown.dtype}."))
    said = draw.bundled_sentence(shown)
    if said:
        st.caption(said)
    note = (getattr(shown, "versions", None) or {}).get("note")
    if note:  # what a recording made by another version of the code measured, in its own words
        st.caption(plain(note))
    if shown.left_out:
        st.caption(plain(f"Left out: {', '.join(shown.left_out)} (would not fit this device's memory)."))


def one_pass_n_rows(shown: Ladder, source: str) -> None:
    """The big rung's lean pass over n rows: time per pass against n, the bounds and the knees, and its words."""
    curve = curve_of(shown)
    if curve is None:
        st.info(plain(f"This ladder ({source}) has no pass over n rows: it was measured without the lean pass. "
                      "Measure on this server to time one."))
        return
    short = (f"a recording: {where_words(shown)}, {shown.measured_at[:10]}" if source.startswith("a recording")
             else f"measured on this server: {where_words(shown)}")
    st.plotly_chart(curve_draw.curve_figure(curve, shown.roof, short, scale=scale()), key="scale_curve")
    st.markdown(plain(curve_draw.curve_caption(curve, shown.roof, shown.device)))
    st.caption(plain(f"{source}. {curve.path}; compile {curve.compile_s:.0f} s, apart from every timing; medians "
                     f"of {len(curve.points[0].samples_ms)} runs after a warm-up, min–max as bars."))
