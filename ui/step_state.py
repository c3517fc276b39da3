"""The step page's run, as the rest of the app reaches it: the classroom's poll, its class bar and Fork.

The step page (step/page.py) makes its controller here, and nothing else names its session-state keys; the
classroom reads and moves the step page only through these functions.

    step_controller(make)    the step page's own controller (a run of the prompt on screen, step by step)
    on_screen()              the step page's controller, read-only: .run, .at, .latest, .started, .done
    show_step(at)            put a recorded step back on screen (the poll's Reveal)
    replay_steps(at)         drop the step page's run and replay `at` steps once its settings are set (Fork)
    view_on_screen()         the view, layer and head the step page shows: what a follower is sent
    prompt_on_screen()       the prompt in the step page's box (a Fork replays it)
    STEP_PAGE                the step page, for st.switch_page
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

from engine.paths import ROOT
from ui.controller import Controller

SET_BY_CODE = "widgets_set_by_code"  # counts the times code set a More widget's value (step/page.py says why)
STEP_PAGE = str(ROOT / "pages" / "step_through.py")  # where st.switch_page takes a forked student
PREFIX = "step"  # the step page's session-state keys: step_run, step_at, step_view, step_layer, step_head, …


def set_by_code() -> None:
    """Code set the step page's preset or head (a scenario, a link, a fork): its More widgets are made anew."""
    st.session_state[SET_BY_CODE] = st.session_state.get(SET_BY_CODE, 0) + 1


def step_controller(make: Callable[[], object]) -> Controller:
    """The step page's controller: `make` is a new run of the prompt on screen with the sidebar's settings."""
    return Controller(PREFIX, make, noun="step", link_steps="steps")  # the page's link counts its steps


def on_screen() -> Controller:
    """The step page's run and cursor, to read (it cannot make a run: only the step page can)."""
    return Controller(PREFIX, make=None, noun="step")


def show_step(at: int) -> None:
    on_screen().show(at)


def replay_steps(at: int) -> None:
    """A fresh run on the step page, replaying `at` steps as soon as its settings are the ones just set."""
    page = on_screen()
    page.reset()
    page.queue_replay(at, at)


def view_on_screen() -> dict:
    """What the step page shows beside the stage: {view, layer, head, every, steps} (Attention's "every query row"
    and "one head, every step so far" switches)."""
    ss = st.session_state
    return {"view": ss.get(f"{PREFIX}_view", "Attention"), "layer": ss.get(f"{PREFIX}_layer") or 0,
            "head": ss.get(f"{PREFIX}_head", 0), "every": bool(ss.get(f"{PREFIX}_att_every")),
            "steps": bool(ss.get(f"{PREFIX}_att_assembled"))}


def prompt_on_screen() -> str:
    return st.session_state.get(f"{PREFIX}_prompt", "")
