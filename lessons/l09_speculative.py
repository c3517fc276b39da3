"""Lesson 9. Speculative decoding: one pass per token is slow because each pass reads every weight for one row;
guess several, check them in one pass. Its pictures are the speculative page's (topics/speculative/).

Its first screen (1280x720, presenter mode) holds the claim, the rounds and the verify pass of a round with a cut,
side by side; the bet measured, why the output is exact, and lookahead decoding fold below, each fold saying what
it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from engine import DecodeLabError
from engine.generate.speculative import Speculator
from lessons.course import Course
from topics.speculative.lookahead import Lookahead, lookahead_html
from topics.speculative.measure import bet_timings, rows_cost_sentence
from topics.speculative.page_parts import (
    DRAFTERS,
    SELF_DRAFT,
    drafter_for,
    drafts_itself,
    rounds_html,
    totals,
    verify_stage,
)
from ui.stage import enlarge_button
from ui.text import error

if TYPE_CHECKING:
    from engine.forward.run import Timing

TITLE = "9. Speculative decoding"
LESSON_PROMPT = "One day, a little girl named Lily went to the park with her dog."


@st.cache_resource(max_entries=16, show_spinner="Running speculative decoding once for this k (it is kept)…")
def _lesson_run(_lm, model: tuple, k: int, settings, drafter: str = DRAFTERS[0]) -> Speculator:
    """Lesson 9's run: made once per (model, k, drafter), then only read."""
    speculator = Speculator(_lm, LESSON_PROMPT, drafter_for(drafter, settings), k=k,
                            max_new_tokens=30, stop_on_eos=False)
    speculator.run()
    return speculator


@st.cache_resource(max_entries=32, show_spinner=False)
def _bet(_lm, model: tuple, ids: tuple[int, ...], rows: int) -> tuple[Timing, Timing]:
    return bet_timings(_lm, ids, rows)


def show(course: Course) -> None:
    lm, model = course.lm, course.model
    first = st.empty()  # the takeaway, once the rounds have run
    intro = st.expander("The numbers, in full: the bet speculative decoding makes")
    intro.markdown("A decode step reads **every weight** to compute **one** row. **Speculative decoding** bets that a "
                "pass over k+1 rows takes about as long as a pass over 1: a cheap **drafter** guesses k tokens, the "
                "model checks all of them in **one pass** on its KV cache, keeps the longest agreeing prefix and its "
                "own next token, and **cuts** the cache columns of the rejected guesses.")
    stage, rounds = st.columns([0.42, 0.58], gap="medium")  # a round on one line each, beside the stage
    with rounds:
        k = st.slider("try it: k (guesses per round)", 1, 8, 4, key="lesson9_k", persist_state="session")
    drafter = DRAFTERS[1] if drafts_itself(DRAFTERS[0], lm) else DRAFTERS[0]  # never the model drafting for itself
    if drafter != DRAFTERS[0]:
        st.caption(f"{SELF_DRAFT} This lesson drafts by {drafter} instead: guesses copied from the text so far.")
    try:
        speculator = _lesson_run(lm, model, k, course.settings, drafter)
    except DecodeLabError as e:
        error(str(e))
        return
    per_pass = speculator.tokens_per_target_pass
    course.takeaway(first, f"Speculative decoding with k = {k}: each verify pass of the model added "
                           + (f"{per_pass:.2f} tokens here, not 1," if per_pass is not None else "its tokens,")
                           + " and the output is exactly the model's own.")
    shown = next((r.round for r in speculator.records if r.cut), len(speculator.records) - 1)
    r = speculator.records[shown]
    with rounds:
        st.html(rounds_html(speculator, len(speculator.records) - 1, dense=True))
    with stage:
        picture = verify_stage(speculator, shown)
        st.html(picture)
        enlarge_button(picture, "lesson9_enlarge")
    st.markdown(f"On the stage, round {shown}: {r.q_len} rows went through the model in one pass; "
                f"{r.cut} of the columns it wrote were cut again.")
    totals(speculator)
    if r.round:  # the bet, checked on this page's own numbers: the verify pass against a one-row pass
        # the stage's verify pass fed its newest token and the guesses: timed again beside one row, in alternation
        fed = speculator.ids[0, : r.past + 1].tolist() + list(r.proposed_ids)
        verify, one = _bet(lm, model, tuple(fed), r.q_len)
        ratio = verify.forward_ms / one.forward_ms
        spread = (f" (runs ×{verify.low_ms / one.high_ms:.2f}–×{verify.high_ms / one.low_ms:.2f})"  # the title's
                  if verify.repeats > 1 and one.repeats > 1 else "")  # ratio with its spread: a busy one reads as such
        with st.expander(f"The bet, measured here: {r.q_len} rows in one pass cost ×{ratio:.2f} one row{spread}"):
            st.markdown(rows_cost_sentence(r.q_len, verify, one, speculator.tokens_per_target_pass))
    with st.expander("Why the output is exactly the model's own, greedy or sampled"):
        st.markdown("Every kept token is one the model itself would have chosen at that position: the verify pass "
                    "computes the model's own next-token distribution at every fed row, and the first disagreement "
                    "is replaced by the model's token. Greedy output is exactly the model's own; with sampling, "
                    "accepting a guess with probability min(1, p/q) and otherwise resampling from max(0, p − q) "
                    "keeps the model's distribution exactly.")
    plan = Lookahead()
    with st.expander(f"Next idea: lookahead decoding, no drafter at all (one pass of {plan.rows} rows, three "
                     "branches)"):
        st.markdown("**Lookahead decoding** (Fu et al. 2024) needs no drafter at all. In the same pass that "
                    "verifies, it also guesses: a *lookahead* branch refines a window of future tokens by Jacobi "
                    "iteration (each position re-guessed from the previous guesses), n-grams that appear along the way "
                    "go into a pool, and a *verification* branch checks pool n-grams that start with the current "
                    f"token, as the verify pass on the stage does. One pass of {plan.rows} rows, three branches, each "
                    "with its own attention mask (which rows each row may read; not drawn below):")
        st.html(lookahead_html(plan))
