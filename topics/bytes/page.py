"""The Scale page's section "Bytes are time" (one call from the page, beside the pass-of-n curve): the shipped
recording by default, a button to measure on this server in the background; every sentence from topics.bytes.draw,
every figure from topics.bytes.figures."""

from __future__ import annotations

import streamlit as st

from physics.units import human_ms
from topics.bytes import draw, figures
from topics.bytes import store as bytes_store
from ui.charts import chart
from ui.style import scale
from ui.text import error, plain

HELP = ("If decode's time is the bytes it reads, fewer bytes make it faster; prefill, compute-bound, follows the "
        "arithmetic's rate instead. The lean pass runs the ≥ 100 M rung (random weights, timing only) with its "
        "weights stored in fp32, then bf16, fp16, int8 and int4 weight-only (fewer bytes, the arithmetic still fp32, "
        "except that torch's int4 kernel takes its inputs in bf16), and the whole model cast to bf16 (its arithmetic "
        "in bf16 too); then one fp32 decode step at longer and longer contexts, and the longest one again with its "
        "cache evicted to a window.")


def measure_label(rec) -> str:
    """The button's words: how long the run shown took on its machine (the shipped recording's, or this server's),
    never a promise of "a few minutes" (one took 9 on this project's 2 cores beside a class's requests)."""
    took = f"; the run shown took {human_ms(rec.wall_s * 1e3)} on its machine" if rec is not None else ""
    return f"Measure on this server (in the background{took})"


def shown():
    """(the record shown, where it came from in words): this server's measurement once made, else the recording."""
    j = bytes_store.job()
    if j is not None and j.result is not None:
        return j.result, "measured on this server"
    rec = bytes_store.recorded()
    return rec, ("a recording shipped with the app (assets/bytes_cpu.json)" if rec else "")


@st.fragment(run_every=1.0)
def progress() -> None:
    """While this server measures (a thread of its own: store.start), how far it got, each second, on the Scale
    page and lesson 12 alike; once it is done the whole page is drawn again, with the result (or why it failed)."""
    j = bytes_store.job()
    if j is None or j.done.is_set():
        st.rerun()
    st.info(plain(f"Measuring on this server: {j.progress}"))


def bounds_folded(rec, source: str = "") -> None:
    """Each step against its bound and the part of it outside the products, folded (the Scale page's section and
    lesson 12 alike); `source`: where the recording came from, said inside the fold with the rest of where."""
    with st.expander("Each step against its bound, and the part of it that is not its products"):
        for said in (draw.decode_sentence(rec), draw.products_sentence(rec)):
            if said:
                st.caption(plain(said))
        if source:
            st.caption(plain(f"{source}. {draw.where(rec)}."))


def section(lm=None, curve_step=None) -> None:
    """`curve_step`: the reference's decode step and prefills as the pass-of-n curve's recording timed them
    (topics.ladder.store.CurveSteps; the page's door reads it), so that a pass timed apart on another day is said to
    be."""
    st.subheader("Bytes are time: the weights and the cache in fewer bytes, timed", help=HELP)
    j = bytes_store.job()
    rec, source = shown()
    if lm is not None and (j is None or j.done.is_set()):
        if st.button(measure_label(rec), key="scale_bytes_measure"):
            bytes_store.start(lm)
            st.rerun()
    if j is not None and not j.done.is_set():
        progress()
    if j is not None and j.error is not None:
        error(f"The measurement on this server failed: {j.error}")
    if rec is None:
        st.info("No recording of this measurement ships for this device: measure it on this server.")
        return
    chart(figures.storage_figure(rec, scale=scale()), "scale_bytes_storage")  # under its heading: one screen
    st.caption(plain(f"{source}. {draw.where(rec)}."))
    if curve_step:
        apart = draw.other_recording(rec, curve_step)
        if apart:
            st.caption(plain(apart))
    st.markdown(plain(draw.storage_sentence(rec)))
    frame = draw.storage_frame(rec)
    formats = {c: "×%.2f" if "×" in c else "%.1f" for c in frame.columns  # as the sentences print them: ×0.45,
               if "×" in c or (" ms" in c and frame[c].dtype.kind == "f")}  # 16.0 ms
    st.dataframe(frame, hide_index=True, width="stretch", column_config={  # headers short enough that a projector
        c: (st.column_config.NumberColumn(draw.short_header(c), help=c, format=formats[c]) if c in formats  # shows
            else st.column_config.Column(draw.short_header(c), help=c)) for c in frame.columns})  # every column
    for said in (draw.why_prefill(rec), draw.int8_sentence(rec)):
        if said:
            st.caption(plain(said))
    bounds_folded(rec)
    chart(figures.context_figure(rec, scale=scale()), "scale_bytes_context")
    st.markdown(plain(draw.context_sentence(rec) + " " + draw.evicted_sentence(rec)))
    why = draw.context_why(rec)
    if why:
        st.caption(plain(why))
    if rec.damage:
        with st.expander("The damage in tokens: the bundled models in each storage, against fp32"):
            st.markdown(plain(draw.damage_sentence(rec)))
            st.dataframe(draw.damage_frame(rec), hide_index=True, width="stretch")
    for note in rec.notes:
        st.caption(plain(note))
