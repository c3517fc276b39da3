"""Lessons: the ideas in order, each with the live views of the real model and a control to try.

One file per lesson (lessons/l01_tokens.py … l12_bytes.py, each `TITLE` and `show(c)`); this page only picks one.
Every number a lesson quotes is computed from a run made while the page draws (lessons/course.py keeps them), and
every label a figure could contradict ("compute-bound", "climbs") is computed from that figure's own numbers; the
text around them is only the explanation.
"""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from lessons import (
    l01_tokens,
    l02_prefill,
    l03_decode,
    l04_kv_cache,
    l05_no_cache,
    l06_sampling,
    l07_batches,
    l08_scale,
    l09_speculative,
    l10_serving,
    l11_budget,
    l12_bytes,
)
from lessons.course import Course
from ui.setup import page_setup
from ui.text import error, warning

LESSONS = {m.TITLE: m.show for m in (l01_tokens, l02_prefill, l03_decode, l04_kv_cache, l05_no_cache, l06_sampling,
                                     l07_batches, l08_scale, l09_speculative, l10_serving, l11_budget, l12_bytes)}
TITLES = list(LESSONS)


def move(delta: int) -> None:
    i = TITLES.index(st.session_state.get("lesson_pick", TITLES[0]))
    st.session_state["lesson_pick"] = TITLES[max(0, min(len(TITLES) - 1, i + delta))]


def show() -> None:
    """The Lessons page, drawn (pages/lessons.py is its door)."""
    st.title("Lessons: how a language model generates text")
    settings, lm = page_setup("lessons", need_model=True)
    wanted = st.session_state.pop("lesson_wanted", None)  # from a shared link: lesson=N
    if wanted is not None:
        if 1 <= wanted <= len(TITLES):
            st.session_state["lesson_pick"] = TITLES[wanted - 1]
        else:
            warning(f"link parameter lesson={wanted} ignored: there are lessons 1 to {len(TITLES)}")
    c = st.container(horizontal=True, vertical_alignment="bottom")
    lesson = c.selectbox("lesson", TITLES, key="lesson_pick", persist_state="session", width=420)
    st.query_params["lesson"] = str(TITLES.index(lesson) + 1)  # the link reopens this lesson
    # no tooltips: the buttons show their keys (← →), and a tooltip left under the pointer would cover the title
    c.button("Previous", on_click=move, args=(-1,), disabled=lesson == TITLES[0], key="lesson_prev", shortcut="left")
    c.button("Next", on_click=move, args=(1,), disabled=lesson == TITLES[-1], key="lesson_next", shortcut="right")
    # Two places, the lesson in the one its number's parity picks: → and ← draw the next lesson in the other place,
    # and the place the last lesson held is emptied at once. (Streamlit keeps an element drawn before until the run
    # draws over it or ends, so in one place the last lesson stood faded under the new one while it measured.)
    places = [st.empty(), st.empty()]
    with places[TITLES.index(lesson) % 2].container():
        st.header(lesson)
        try:
            LESSONS[lesson](Course(lm, settings))
        except DecodeLabError as e:
            error(str(e))
