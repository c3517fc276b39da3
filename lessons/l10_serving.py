"""Lesson 10. Serving many requests: many requests share one pass; their keys and values live in blocks; a prefix
is stored once. Its pictures are the Serving page's (topics/serving/)."""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from engine.generate.serving import ServingRun
from engine.paths import ROOT
from lessons.course import Course
from topics.serving.measure import same_as_alone
from topics.serving.page_parts import pictures, summary
from topics.serving.scenarios import SCENARIOS
from ui.text import error

TITLE = "10. Serving many requests: batching and a paged cache"


def show(course: Course) -> None:
    lm = course.lm
    first = st.empty()  # the takeaway, once the scenario is served
    st.markdown(
        "A decode step (the *generation phase*) of one request is **matrix-vector** work: every weight is read to "
        "compute one row. A server "
        "answering many people puts the decode steps of **all** running requests into **one forward pass** "
        "(*continuous batching*): their rows are laid end to end, `[1, T]`, and a new request's prompt joins the "
        "very next pass, beside everyone's decode token. Each request's keys and values live in fixed-size "
        "**blocks** of a shared pool (*paged attention*): a **block table** per request lists its blocks, blocks are "
        "taken as it grows and given back when it ends, so nothing is reserved for tokens never written. Requests "
        "that start with the same prompt **share** its full blocks. When the pool runs out, a request is "
        "**preempted** and recomputed later.")
    sc = SCENARIOS["shared_prefix"]
    served = _lesson_run(lm)  # the whole scenario, served once: the slider walks its record
    if served is None:
        return
    run, exact = served
    last = len(run.records) - 1
    course.takeaway(first, f"{len(run.requests)} requests served in {last + 1} engine passes: each pass carries every "
                           "running request's rows, their keys and values in blocks of one shared pool.")
    at = st.slider("try it: the engine step shown (the shared-system-prompt scenario; 0 is the first pass)", 0, last,
                   min(7, last), key="lesson10_steps", persist_state="session")
    st.markdown(summary(run, at))  # "step 7 of 0–{last}": the same run the slider walks; the engine's numbers only
    pictures(run, at)
    same = sum(exact.values())
    checked = (f" Checked here: every request's tokens are exactly the ones it gets decoded alone (greedy, {same} of "
               f"{len(exact)})" if same == len(exact) else
               f" Checked here: {same} of {len(exact)} requests' tokens are the ones they get decoded alone; "
               f"{', '.join(r for r, ok in exact.items() if not ok)} differ")
    st.caption(sc["why"] + checked + ": the pass mixes requests in one attention call per layer, each reading its keys "
               "through its own block table, and the mask keeps each query to its own request's keys.")
    st.page_link(str(ROOT / "pages" / "serving.py"), label=f"Open the Serving page: all {len(SCENARIOS)} scenarios, step by step",
                 icon=":material/dns:")


@st.cache_resource(max_entries=4, show_spinner="Serving the scenario…")
def _lesson_cached(_lm, source: str):
    sc = SCENARIOS["shared_prefix"]
    try:
        run = ServingRun(_lm, sc["requests"], **sc["sizing"])
        run.run()
        return run, same_as_alone(run)  # each request decoded alone too: the exactness the caption states
    except DecodeLabError as e:
        return e


def _lesson_run(lm) -> tuple[ServingRun, dict[str, bool]] | None:
    run = _lesson_cached(lm, lm.spec.name)
    if isinstance(run, DecodeLabError):
        error(str(run))
        return None
    return run
