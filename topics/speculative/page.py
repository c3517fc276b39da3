"""Speculative decoding: a drafter guesses k tokens, the model checks them all in one pass, round by round.

Thin page: the engine is engine/generate/speculative.py (drafters: engine/generate/drafters.py); what this page and
lesson 9 share is topics/speculative/page_parts.py.
"""

import streamlit as st

from engine.generate.speculative import Speculator
from physics.machine import release_memory
from topics.speculative.page_parts import (
    DRAFTER_LINKS,
    DRAFTERS,
    SELF_DRAFT,
    comparison,
    drafter_for,
    drafts_itself,
    measured_comparison,
    rounds_frame,
    rounds_html,
    totals,
    verify_stage,
)
from ui.controller import Controller
from ui.link_codec import MAX_PROMPT_CHARS
from ui.links import write_link
from ui.presets import PROMPTS
from ui.setup import class_label, page_setup
from ui.stage import enlarge_button
from ui.style import keys_back, picked
from ui.text import error, warning

ROUNDS_LISTED = 6  # beside the stage, the latest rounds: the list stays about the stage's height on a projector


def show() -> None:
    """The speculative-decoding page, drawn (pages/speculative.py is its door)."""
    st.title("Speculative decoding")
    settings, lm = page_setup("speculative", need_model=True)
    st.caption("A cheap drafter guesses k tokens; the model checks them all in ONE pass of k+1 rows on its KV cache. Kept "
               "guesses are solid, the model's own token green, rejected guesses struck out, their cache columns cut.")


    def new_run() -> Speculator:
        """A run of the prompt on screen (the controller's first step is its prefill; every later one a round)."""
        return Speculator(lm, st.session_state["speculative_prompt"], drafter_for(st.session_state["speculative_drafter"], settings),
                          k=st.session_state["speculative_k"], sampling=settings.sampling,
                          max_new_tokens=settings.max_new_tokens, stop_strings=settings.stop_strings)


    rounds = Controller("speculative", new_run, noun="round", link_steps="steps")
    wanted = st.session_state.pop("speculative_wanted", None)  # a link's prompt, drafter, k and rounds, checked here
    if wanted is not None:
        if wanted["prompt"] is not None:
            st.session_state["speculative_prompt"] = wanted["prompt"]
        if wanted["drafter"] in DRAFTER_LINKS:
            st.session_state["speculative_drafter"] = DRAFTER_LINKS[wanted["drafter"]]
        elif wanted["drafter"] is not None:
            warning(f"link parameter drafter={wanted['drafter'][:40]!r} ignored: the drafters are "
                    f"{', '.join(DRAFTER_LINKS)}")
        if wanted["k"] is not None:
            st.session_state["speculative_k"] = wanted["k"]
        if wanted["steps"] is not None:
            st.session_state["speculative_replay"] = (wanted["steps"], wanted["at"])
    st.session_state.setdefault("speculative_prompt", PROMPTS[1]["prompt"])
    st.session_state.setdefault("speculative_drafter", DRAFTERS[0])
    st.session_state.setdefault("speculative_k", 4)
    rounds.sync((settings, st.session_state["speculative_prompt"], st.session_state["speculative_drafter"], st.session_state["speculative_k"]))
    rounds.replay_queued()  # a link's rounds, now that its prompt, drafter and k are the page's
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    # widths that keep the bar on one row on a 1280 projector, Reset included (at 300, 230 and 90 it wrapped)
    bar.text_input("prompt", key="speculative_prompt", persist_state="session", label_visibility="collapsed", width=200)
    bar.selectbox("drafter", DRAFTERS, key="speculative_drafter",
                  persist_state="session", label_visibility="collapsed", width=230, on_change=picked)
    keys_back()  # after a pick, the run's shortcuts work again
    bar.number_input("k", 1, 8, key="speculative_k", persist_state="session", width=70, help="guesses per round")
    rounds.buttons(bar, next_label="Next round", first_help="Run the prompt through the model once (P)",
                   next_help="Draft k guesses and check them in one pass (N)")
    rounds.run_to_end_if_asked()
    drafter = next(name for name, title in DRAFTER_LINKS.items() if title == st.session_state["speculative_drafter"])
    prompt = st.session_state["speculative_prompt"]
    write_link(settings, prompt=prompt if len(prompt) <= MAX_PROMPT_CHARS else None, drafter=drafter,
               k=st.session_state["speculative_k"],
               steps=rounds.latest if rounds.started else None,
               at=rounds.at if rounds.started and rounds.at != rounds.latest else None)  # a link reopens this round
    if said := rounds.said():
        error(said)
    if notice := rounds.notice():
        st.info(notice, icon=":material/replay:")
    if drafts_itself(st.session_state["speculative_drafter"], lm):
        st.warning(SELF_DRAFT + " Pick prompt lookup as the drafter, or load another model, to see the bet pay.",
                   icon=":material/info:")

    run = rounds.run
    if not rounds.started:
        st.info("Press **Prefill** (P): the model runs the prompt once; then each **Next round** (N) drafts k guesses and "
                "checks them in one pass.")
    else:
        if rounds.latest > 0:
            st.slider("round", 0, rounds.latest, key="speculative_at",
                      persist_state="session", label_visibility="collapsed", width=300)
        at = rounds.at
        class_label("round 0 (prefill)" if at == 0 else f"round {at}", order=(rounds.run_id, at))  # leading a class: what students see this screen called (classroom/page_copy.py)
        left, right = st.columns([3, 2], gap="medium")
        with left:
            picture = verify_stage(run, at)
            st.html(picture)
            enlarge_button(picture, "speculative_enlarge")  # in a column its words are ~10 px on a projector
            st.text(run.text)
        with right:
            totals(run, at)
            st.html(rounds_html(run, at, dense=True, last=ROUNDS_LISTED))
            if run.done:
                st.markdown(f"**Finished**: {rounds.stopped()}. Reset (X) to start again.")
        with st.expander("Every round: proposals, what was kept, the cache before, after the verify pass and after "
                         "the crop"):
            st.dataframe(rounds_frame(run), hide_index=True, width="stretch")

    st.divider()
    st.subheader("Does it pay on this machine?")
    st.caption("Plain decoding and speculative decoding of the same prompt and length, measured here in alternation, "
               "next to the speed-up the standard formula predicts from the measured acceptance and draft cost.")
    c = st.container(horizontal=True, vertical_alignment="bottom")
    steps = c.number_input("new tokens", 8, 200, 40, key="speculative_measure_steps", persist_state="session", width=140)
    asked = (st.session_state["speculative_prompt"], st.session_state["speculative_drafter"],
             int(st.session_state["speculative_k"]), int(steps), settings)
    if c.button("Measure", key="speculative_measure"):
        with st.spinner("Measuring plain and speculative decoding, alternated…"):
            prompt, drafter, k, n, _ = asked
            st.session_state["speculative_measured"] = (asked, measured_comparison(lm, prompt, n, drafter, k, settings))
        release_memory()
    kept, m = st.session_state.get("speculative_measured") or (None, None)
    if m is not None:  # what it measured, said; and said apart where the settings above have moved since
        prompt, drafter, k, n, then = kept
        st.caption(f"Measured with k = {k}, the {drafter}, {n} new tokens.")
        moved = [name for name, was, now in zip(("the prompt", "the drafter", "k", "the new tokens",
                                                 "the sidebar's settings"), kept, asked) if was != now]
        if moved:
            st.info(f"Since this was measured, {' and '.join(moved)} changed above: the figures below are still "
                    "those of the settings it names. Measure again to time the new ones.",
                    icon=":material/history:")
        comparison(m)
