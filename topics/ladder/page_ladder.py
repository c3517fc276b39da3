"""Grow the model: the size ladder on the Scale page, and the ladder a lesson quotes.

The engine measures (topics/ladder/measure.py: once per server, model and device, in a thread of its own so a
click elsewhere does not end it; two sessions asking at once share one build) and draws (topics/ladder/draw.py);
this module places the pictures, the button and the measurement's progress.
Until this server has measured its own ladder, the one recorded in assets/ (its device named) is shown,
labelled as recorded.
"""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from engine.links import LADDER_VIEWS
from engine.measure.caveats import ladder_note
from topics.ladder import draw as draw
from topics.ladder.measure import kept_ladder, ladder_failed, ladder_job, recorded, start_ladder
from topics.ladder.record import Ladder
from ui.links import write_link
from ui.style import scale
from ui.text import error, plain, warning

PICTURES = dict(zip(LADDER_VIEWS, ("ms per token", "roofline", "time split", "table")))  # short: four fit a phone


def shown_ladder(lm) -> tuple[Ladder | None, str]:
    """The ladder to quote: this server's own when measured, else the recorded one; and where it comes from."""
    live = kept_ladder(lm) if lm is not None else None
    if live is not None:
        return live, f"measured on this server ({live.device})"
    for rec in recorded():
        return rec, f"recorded on {rec.device}, {rec.measured_at[:10]}"
    return None, ""


def lesson_claim(lm, phase: str) -> str | None:
    """A lesson's claim (prefill compute-bound, decode memory-bound) in the ladder's numbers, with where they come
    from, and what the bundled model is bound by; None when no ladder exists at all."""
    shown, source = shown_ladder(lm)
    if shown is None:
        return None
    own = draw.bundled_sentence(shown)
    return (f"{draw.phase_claim(shown, phase)} ({source}; the Scale page's *Grow the model* shows every rung.)"
            + (f" {own}" if own else ""))


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
    """While this server measures the ladder (in a thread of its own: LadderStore.start), every page run of every
    session shows how far it got, each second; when it is done the whole page is drawn again, with the result."""
    job = ladder_job(lm)
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
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    st.session_state.setdefault("scale_ladder_view", "per_token")
    row.segmented_control("picture", list(PICTURES), key="scale_ladder_view", persist_state="session",
                          format_func=PICTURES.get, label_visibility="collapsed")
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
    shown, source = shown_ladder(lm)
    if shown is None:
        st.info("No ladder has been measured here yet: press the button to time one.")
        return
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
    st.caption(plain(f"{shown.model} grown in its own family ({shown.family}), {source}: each rung's prefill of "
                     f"{shown.tokens} tokens and one decode step at that context, medians of {shown.repeats} runs "
                     f"after a warm-up, on {shown.threads} threads."))
    said = draw.bundled_sentence(shown)
    if said:
        st.caption(said)
    if shown.left_out:
        st.caption(plain(f"Left out: {', '.join(shown.left_out)} (would not fit this device's memory)."))
