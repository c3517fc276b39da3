"""Grow the model: the size ladder on the Scale page, the prefill across the ridge beside it, and the ladders the
lessons quote.

The ladder measures (topics/ladder/measure.py, sweep.py), keeps (topics/ladder/store.py: once per server, in a
thread of its own so a click elsewhere does not end it) and draws (topics/ladder/draw.py, sweep_draw.py); this
module places the pictures, the buttons and each measurement's progress. Until this server has measured its own,
the ones recorded in assets/ are shown, each naming its device and date; a recording made on the other kind of
device (a GPU's on a laptop, a CPU's on a GPU server) can be shown beside, so a student on a laptop sees what a
datacenter GPU does.
"""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from engine.links import LADDER_VIEWS
from engine.measure.caveats import ladder_note
from topics.ladder import draw as draw
from topics.ladder import sweep_draw
from topics.ladder.store import (kept_ladder, kept_sweep, ladder_failed, ladder_job, recorded_ladders, recorded_on,
                                  recorded_sweeps, start_ladder, start_sweep, sweep_failed, sweep_job)
from topics.ladder.record import Ladder
from ui.links import write_link
from ui.style import scale
from ui.text import error, plain, warning

PICTURES = dict(zip(LADDER_VIEWS, ("ms per token", "roofline", "time split", "table")))  # short: four fit a phone


THIS_SERVER = "this server"


def _kind(lm) -> str:
    return lm.device.type if lm is not None else "cpu"


def recorded_words(rec) -> str:
    code = (getattr(rec, "versions", None) or {}).get("code")
    return f"recorded on {rec.device}, {rec.measured_at[:10]}" + (f", by this project's code at {code}" if code else "")


def shown_ladder(lm) -> tuple[Ladder | None, str]:
    """The ladder to quote: this server's own when measured, else the one recorded on this kind of device; and
    where it comes from."""
    live = kept_ladder(lm) if lm is not None else None
    if live is not None:
        return live, f"measured on this server ({live.device})"
    for rec in recorded_on(_kind(lm), recorded_ladders()):
        return rec, recorded_words(rec)
    return None, ""


def other_ladder(lm) -> Ladder | None:
    """The recording made on the other kind of device (a datacenter GPU's, on a laptop), to show beside."""
    here = _kind(lm)
    return next((r for r in recorded_ladders() if ("cuda" in r.device) != (here == "cuda")), None)


def gpu_claim(lm, phase: str) -> str | None:
    """A lesson's claim in the recorded GPU ladder's numbers, beside this device's (None on a GPU server, or when
    none is shipped)."""
    other = other_ladder(lm)
    if other is None or "cuda" not in other.device:
        return None
    return f"On a datacenter GPU ({recorded_words(other)}): {draw.phase_claim(other, phase)}"


def lesson_claim(lm, phase: str) -> str | None:
    """A lesson's claim (prefill compute-bound, decode memory-bound) in the ladder's numbers, with where they come
    from, and what the bundled model is bound by; None when no ladder exists at all."""
    shown, source = shown_ladder(lm)
    if shown is None:
        return None
    own = draw.bundled_sentence(shown)
    gpu = gpu_claim(lm, phase)
    return (f"{draw.phase_claim(shown, phase)} ({source}; the Scale page's *Grow the model* shows every rung.)"
            + (f" {own}" if own else "") + (f"\n\n{gpu}" if gpu else ""))


def latency_claim(lm) -> str | None:
    """The Latency view's TTFT-vs-TPOT claim at a size where the hardware sets the time, and why the bundled model
    does not show it."""
    shown, source = shown_ladder(lm)
    if shown is None:
        return None
    own = draw.bundled_sentence(shown)
    return f"{draw.per_token_claim(shown)} ({source}.)" + (f" {own}" if own else "")


@st.fragment(run_every=1.0)
def _progress(lm, which: str = "ladder") -> None:
    """While this server measures (in a thread of its own: LadderStore.start), every page run of every session
    shows how far it got, each second; when it is done the whole page is drawn again, with the result."""
    job = ladder_job(lm) if which == "ladder" else sweep_job(lm)
    if job is None:
        st.rerun()  # finished since the last tick: the page draws the new ladder (or says why it failed)
    fraction, text = job.progress
    fraction = min(1.0, max(0.0, fraction))
    st.progress(fraction, text=f"measuring… {fraction * 100:.0f} % · {text}")


def grow_the_model(lm, settings) -> None:
    """The Scale page's section: the bundled model grown rung by rung, each rung timed here, as pictures."""
    st.header("Grow the model", help="The bundled model is tiny: its decode step is overhead-bound (Python and hundreds "
                                      "of small operations set its time). Grown in its own family, the hardware "
                                      "starts to set the time: decode memory-bound, and a prefill compute-bound where "
                                      "its tokens outnumber the device's ridge in tokens (a few dozen on a CPU in "
                                      "fp32; ~295 on an H100 in bf16, so there a 128-token prefill is memory-bound). "
                                      "**Measure** builds each rung from the model's config with random weights (no "
                                      "download), times its prefill and decode steps on the threads the app serves a "
                                      "model that size with (the browser keeps a core), times again a rung whose "
                                      "repeats spread wide, then gives the memory back. Once per server: every "
                                      "session sees the result. Students' steps wait while it runs.")
    live = kept_ladder(lm)
    other = other_ladder(lm)
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    st.session_state.setdefault("scale_ladder_view", "per_token")
    row.segmented_control("picture", list(PICTURES), key="scale_ladder_view", persist_state="session",
                          format_func=PICTURES.get, label_visibility="collapsed")
    if other is not None:
        row.segmented_control("whose", [THIS_SERVER, other.device], key="scale_ladder_whose", persist_state="session",
                              default=THIS_SERVER, label_visibility="collapsed",
                              help="This server's ladder (measured here, or recorded on a device like it), or the "
                                   f"one recorded on {other.device}: the same code, another machine.")
    row.button("Measure again on this server" if live else "Measure on this server (about a minute)",
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
    left, right = st.columns([1, 1], gap="medium")
    with right:
        across_the_ridge(lm)
    with left:
        if shown is None:
            st.info("No ladder has been measured here yet: press the button to time one.")
            return
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
                     f"on {shown.threads} threads, {shown.dtype}."))
    said = draw.bundled_sentence(shown)
    if said:
        st.caption(said)
    note = (getattr(shown, "versions", None) or {}).get("note")
    if note:  # what a recording made by another version of the code measured, in its own words
        st.caption(plain(note))
    if shown.left_out:
        st.caption(plain(f"Left out: {', '.join(shown.left_out)} (would not fit this device's memory)."))


def shown_sweep(lm):
    """The prefill sweep to draw: this server's when measured, else one recorded on this kind of device, else any."""
    live = kept_sweep(lm) if lm is not None else None
    if live is not None:
        return live, f"measured on this server ({live.device})"
    for rec in recorded_on(_kind(lm), recorded_sweeps()):
        return rec, f"recorded on {rec.device}, {rec.measured_at[:10]}"
    return None, ""


def across_the_ridge(lm) -> None:
    """One rung's prefill over a sweep of prompt lengths s: time per prompt token against s, the ridge marked."""
    shown, source = shown_sweep(lm)
    busy = sweep_job(lm) is not None
    st.button("Sweep s on this server" if shown is None or not source.startswith("measured") else "Sweep again",
              key="scale_sweep_measure", icon=":material/swap_horiz:", disabled=busy, on_click=start_sweep,
              args=(lm, kept_sweep(lm) is not None),
              help="Builds one rung of a published shape with random weights (SmolLM2-135M on a CPU, Llama-3-8B on "
                   "a GPU) and times its prefill at s = 8, 16, 32, … until a minute is spent, then gives the "
                   "memory back. Once per server.")
    if busy:
        _progress(lm, "sweep")
    failed = sweep_failed(lm)
    if failed is not None:
        error(str(failed) if isinstance(failed, DecodeLabError) else f"The sweep stopped: {failed}")
    if shown is None:
        st.info("No prefill sweep is recorded for this kind of device: press the button to time one.")
        return
    st.plotly_chart(sweep_draw.sweep_figure(shown, scale=scale()), key="scale_sweep")
    st.markdown(plain(sweep_draw.sweep_caption(shown)) + f" ({plain(source)}.)")
