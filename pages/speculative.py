"""Speculative decoding: a drafter guesses k tokens, the model checks them all in one pass, round by round.

Thin page: the engine is engine/generate/speculative.py (drafters: engine/generate/drafters.py); what this page and
lesson 9 share is ui/speculative.py.
"""

import streamlit as st

from engine import DecodeLabError
from engine.load.device import release_memory
from engine.generate.speculative import Speculator
from ui.frame import PROMPTS, error, frame, plain
from ui.speculative import (DRAFTERS, comparison, drafter_for, measured_comparison, rounds_frame,
                                    rounds_html, totals, verify_stage)

st.title("Speculative decoding")
settings, lm = frame(__file__)
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()
st.caption("A cheap drafter guesses k tokens; the model checks them all in ONE pass of k+1 rows on its KV cache. Kept "
           "guesses are solid, the model's own token green, rejected guesses struck out, their cache columns cut.")


def spec_state() -> Speculator | None:
    return st.session_state.get("spec_run")


def reset() -> None:
    old = st.session_state.pop("spec_run", None)
    if old is not None:
        old.free()
        release_memory()


def start() -> None:
    reset()
    try:
        run = Speculator(lm, st.session_state["spec_prompt"], drafter_for(st.session_state["spec_drafter"], settings),
                       k=st.session_state["spec_k"], sampling=settings.sampling,
                       max_new_tokens=settings.max_new_tokens, stop_strings=settings.stop_strings)
        run.prefill()
    except DecodeLabError as e:
        st.session_state["spec_error"] = str(e)
        return
    st.session_state["spec_run"] = run
    st.session_state["spec_at"] = 0


def advance(rounds: int | None) -> None:
    """One more round (1), or every round until the run stops (None); then show the newest."""
    run = spec_state()
    try:
        run.run(rounds)
    except DecodeLabError as e:
        st.session_state["spec_error"] = str(e)
    st.session_state["spec_at"] = len(run.rounds) - 1


st.session_state.setdefault("spec_prompt", PROMPTS[1]["prompt"])
run = spec_state()
started = run is not None
bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
bar.text_input("prompt", key="spec_prompt", label_visibility="collapsed", width=300, on_change=reset)
bar.selectbox("drafter", DRAFTERS, key="spec_drafter", label_visibility="collapsed", width=230, on_change=reset)
bar.number_input("k", 1, 8, 4, key="spec_k", width=90, on_change=reset, help="guesses per round")
bar.button("Prefill", type="primary", key="spec_prefill", on_click=start, disabled=started, shortcut="P")
bar.button("Next round", type="primary", key="spec_next", on_click=advance, args=(1,),
           disabled=not started or run.done, shortcut="N")
bar.button("Run to end", key="spec_run_all", on_click=advance, args=(None,), disabled=not started or run.done,
           shortcut="E")
bar.button("Reset", key="spec_reset", on_click=reset, shortcut="X")
if st.session_state.get("spec_error"):
    error(st.session_state.pop("spec_error"))

run = spec_state()
if run is None:
    st.info("Press **Prefill** (P): the model runs the prompt once; then each **Next round** (N) drafts k guesses and "
            "checks them in one pass.")
else:
    last = len(run.rounds) - 1
    if last > 0:
        st.slider("round", 0, last, key="spec_at", label_visibility="collapsed", width=300)
    at = max(0, min(st.session_state.get("spec_at", last), last))
    left, right = st.columns([3, 2], gap="medium")
    with left:
        st.html(verify_stage(run, at))
        st.text(run.text)
    with right:
        totals(run)
        st.html(rounds_html(run, at))
        if run.done:
            st.markdown(plain(f"Finished: {run.stop_reason}."))
    with st.expander("Every round: proposals, what was kept, the cache before, after the verify pass and after "
                     "the crop"):
        st.dataframe(rounds_frame(run), hide_index=True, width="stretch")

st.divider()
st.subheader("Does it pay on this machine?")
st.caption("Plain decoding and speculative decoding of the same prompt and length, measured here in alternation, "
           "next to the speed-up the standard formula predicts from the measured acceptance and draft cost.")
c = st.container(horizontal=True, vertical_alignment="bottom")
steps = c.number_input("new tokens", 8, 200, 40, key="spec_measure_steps", width=140)
if c.button("Measure", key="spec_measure"):
    with st.spinner("Measuring plain and speculative decoding, alternated…"):
        st.session_state["spec_measured"] = measured_comparison(
            lm, st.session_state["spec_prompt"], int(steps), st.session_state["spec_drafter"],
            st.session_state["spec_k"], settings)
    release_memory()
if st.session_state.get("spec_measured"):
    comparison(st.session_state["spec_measured"])
