"""Lesson 12. Bytes are time: shrink the weights and the cache, and watch decode speed up while prefill does not.
Its measurements and pictures are the Scale page's section (topics/bytes/): the shipped recording by default, a
button to measure on this server in the background."""

from __future__ import annotations

import streamlit as st

from lessons.course import Course
from topics.bytes import draw, figures
from topics.bytes import store as bytes_store
from topics.bytes.page import bounds_folded, measure_label, progress, shown
from ui.charts import chart
from ui.style import scale
from ui.text import plain

TITLE = "12. Bytes are time: fewer bytes, both phases timed"
GUESSES = ("decode faster, prefill about the same", "both faster", "neither moves")


def show(course: Course) -> None:
    first = st.empty()  # the takeaway: the bytes the recording halved, before the prediction (never its answer)
    test, answer = st.columns([0.4, 0.6])  # the test and its answer side by side: one projector screen (a phone
    test.markdown(  # stacks them, the prediction first)
        "Lessons 2 and 3 said a prefill waits on its arithmetic and a decode step on reading its weights. Test it: "
        "store the same weights in fewer bytes (fp32 → bf16 or fp16: half; int8: a quarter; int4: an eighth), keep "
        "the arithmetic in fp32 (weight-only, as gpt-fast does; torch's int4 kernel takes bf16 inputs), and time "
        "both: whether the time follows the bytes is the test. **Predict first.**")
    guess = test.radio("predict: with half the bytes…", GUESSES, index=None, key="lesson12_guess",
                       persist_state="session")
    rec, source = shown()
    if rec is None:
        test.info("No recording ships for this device: measure it on this server.")
        measure(course, rec)
        return
    fp32, bf16 = rec.get("fp32", "decode"), rec.get("bf16", "decode")
    if fp32 is not None and bf16 is not None:
        halved = f"{draw.mb(fp32.weight_bytes)} in fp32, {draw.mb(bf16.weight_bytes)} in bf16"
        course.takeaway(first, f"The same weights, {halved}: predict what a decode step and a prefill do with half "
                               "the bytes, then read what they did.")
    if guess is None:
        answer.caption(plain(f"Choose a prediction to see the measurement: the {rec.named}'s weights"
                             + (f", {halved}," if fp32 is not None and bf16 is not None else "")
                             + f" timed on {rec.device}."))
        measure(course, rec)
        return
    held = draw.prediction_held(rec)  # the answer first: on a projector it is on the screen with the chart
    # "predicted", not "you predicted": a class following the lecturer sees the lecturer's pick, not its own
    test.markdown(plain(f"Predicted: {guess}. What bf16 did, measured: {held}"
                        + (" (the prediction held)." if held == guess else ".")))
    chart(figures.storage_figure(rec, scale=scale()), "lesson12_storage", on=answer)
    answer.caption(plain(f"{source}: {draw.measured_on(rec)}."))
    st.markdown(plain(draw.storage_sentence(rec)))
    st.markdown(plain(draw.why_prefill(rec)))
    said = draw.int8_sentence(rec)
    if said:
        st.markdown(plain(said))
    bounds_folded(rec, source)
    st.markdown("**The cache's bytes.** Every decode step reads the whole K/V cache too, so a longer context is "
                "more bytes a step; evicting to a window reads fewer.")
    chart(figures.context_figure(rec, scale=scale()), "lesson12_context")
    st.markdown(plain(draw.context_sentence(rec) + " " + draw.evicted_sentence(rec)))
    why = draw.context_why(rec)
    if why:
        with st.expander("Why the slope is not its bytes' time alone"):
            st.caption(plain(why))
    if rec.damage:
        st.markdown("**What it costs in tokens.** " + plain(draw.damage_sentence(rec)))
        with st.expander("Every model and storage: agreement and KL, with their spread over the stories"):
            st.dataframe(draw.damage_frame(rec), hide_index=True, width="stretch")
    st.page_link(str(course.pages / "scale.py"), label="Open the Scale page: the pass-of-n curve and this beside it",
                 icon=":material/speed:")
    measure(course, rec)


def measure(course: Course, rec) -> None:
    """The recording shown is this project's CPU's until this server measures its own (in the background: a thread
    of its own, the page's other clicks go on); while it runs, how far it got."""
    j = bytes_store.job()
    if j is None or j.done.is_set():
        if st.button(measure_label(rec), key="lesson12_measure"):
            bytes_store.start(course.lm)
            st.rerun()
    else:
        progress()
