"""Lesson 9. Speculative decoding: one pass per token is slow because each pass reads every weight for one row;
guess several, check them in one pass. Its pictures are the speculative page's (topics/speculative/)."""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from engine.generate.speculative import Speculator
from lessons.course import Course
from topics.speculative.lookahead import Lookahead, lookahead_html
from topics.speculative.measure import one_row_ms, rows_cost_sentence
from topics.speculative.page_parts import drafter_for, rounds_html, totals, verify_stage
from ui.text import error

TITLE = "9. Speculative decoding"
LESSON_PROMPT = "One day, a little girl named Lily went to the park with her dog."


@st.cache_resource(max_entries=16, show_spinner="Running speculative decoding once for this k (it is kept)…")
def _lesson_run(_lm, model: tuple, k: int, settings) -> Speculator:
    """Lesson 9's run: made once per (model, k), then only read."""
    speculator = Speculator(_lm, LESSON_PROMPT, drafter_for("draft model", settings), k=k,
                            max_new_tokens=30, stop_on_eos=False)
    speculator.run()
    return speculator


@st.cache_resource(max_entries=32, show_spinner=False)
def _one_row_ms(_lm, model: tuple, ids: tuple[int, ...]) -> float:
    return one_row_ms(_lm, ids)


def show(course: Course) -> None:
    lm, model = course.lm, course.model
    st.markdown("A decode step reads **every weight** to compute **one** row. Where reading the weights is what takes "
                "the time, a pass over k+1 rows takes about as long as a pass over 1. **Speculative decoding** bets "
                "on that: a cheap **drafter** guesses k tokens; the model checks all of them in **one pass** of k+1 "
                "rows on its KV cache (a small prefill); the longest agreeing prefix is kept, the first disagreement "
                "is replaced by the model's own token, and the cache columns of the rejected guesses are **cut** off "
                "again. Greedy output is exactly the model's own; with sampling, accepting a guess with probability "
                "min(1, p/q) and otherwise resampling from max(0, p − q) keeps the model's distribution exactly.")
    k = st.slider("try it: k (guesses per round)", 1, 8, 4, key="lesson9_k", persist_state="session")
    try:
        speculator = _lesson_run(lm, model, k, course.settings)
    except DecodeLabError as e:
        error(str(e))
        return
    shown = next((r.round for r in speculator.rounds if r.cut), len(speculator.rounds) - 1)
    r = speculator.rounds[shown]
    st.html(rounds_html(speculator, len(speculator.rounds) - 1))
    st.markdown(f"Round {shown} below: {r.q_len} rows went through the model in one pass; "
                f"{r.cut} of the columns it wrote were cut again.")
    st.html(verify_stage(speculator, shown))
    if r.round:  # the bet, checked on this page's own numbers: the verify pass above against a one-row pass
        one = _one_row_ms(lm, model, tuple(speculator.ids[0, : r.past + 1].tolist()))
        st.markdown(rows_cost_sentence(r.q_len, r.target.forward_ms, one))
    totals(speculator)
    plan = Lookahead()
    st.markdown("**Next idea: lookahead decoding** (Fu et al. 2024) needs no drafter at all. In the same pass that "
                "verifies, it also guesses: a *lookahead* branch refines a window of future tokens by Jacobi "
                "iteration (each position re-guessed from the previous guesses), n-grams that appear along the way "
                "go into a pool, and a *verification* branch checks pool n-grams that start with the current token, "
                f"as the verify pass above does. One pass of {plan.rows} rows, three branches, each with its own "
                "attention mask:")
    st.html(lookahead_html(plan))
