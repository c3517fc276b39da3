"""Lesson 6. Choosing the next token"""

from __future__ import annotations

import streamlit as st

from drawing.palette import show_piece
from drawing.tokens import next_token_figure
from engine import Sampling
from lessons.course import ENDING, Course
from lessons.next_word import until_end
from ui.charts import chart
from ui.presets import PROMPTS
from ui.style import scale
from ui.text import plain

TITLE = '6. Choosing the next token'


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once this draw is made
    intro = st.expander("The numbers, in full: logits, softmax, greedy and the warpers")
    intro.markdown("The last position's output is a score (**logit**) for every token in the vocabulary. Softmax turns "
                "scores into probabilities. **Greedy** takes the most likely token. **Sampling** draws one at "
                "random after **warpers** reshape the distribution: temperature flattens (>1) or sharpens (<1) "
                "it, top-k keeps the k most likely, top-p keeps the smallest set whose probabilities add up to p, "
                "and a repetition penalty lowers tokens already used.")
    c = st.columns(5)
    temperature = c[0].slider("temperature", 0.1, 2.0, 1.0, 0.1, key="lesson6_t", persist_state="session")
    top_k = c[1].number_input("top-k (0 = off)", 0, course.spec.vocab, 0, key="lesson6_k", persist_state="session")
    top_p = c[2].slider("top-p", 0.05, 1.0, 1.0, 0.05, key="lesson6_p", persist_state="session")
    rep = c[3].slider("repetition penalty", 1.0, 2.0, 1.0, 0.1, key="lesson6_r", persist_state="session")
    seed = c[4].number_input("seed", 0, 10_000, 0, key="lesson6_seed", persist_state="session")
    sampling = Sampling(greedy=False, temperature=temperature, top_k=int(top_k), top_p=top_p,
                        repetition_penalty=rep, seed=int(seed))
    t = course.sampled_prefill(PROMPTS[2]["prompt"], sampling)  # one pass per (settings, seed), kept
    top = t.top[0]
    kept = sum(1 for c_ in t.top if c_.p_after > 0)
    before, after = f"{top.p_before:.1%}", f"{top.p_after:.1%}"
    off = not sampling.processors()  # the engine's own list of what these settings apply: none
    moved = (f"The warpers move the top token {show_piece(top.token)} from {before} to {after}" if before != after
             else f"The warpers leave the top token {show_piece(top.token)} at {before}"
             + (" (all four are off: temperature 1, no top-k, top-p 1, no penalty; move one)" if off else ""))
    course.takeaway(first, plain(f"{moved}; {kept} of the {len(t.top)} candidates shown can still be drawn."))
    chart(next_token_figure(t, scale=scale()), key="lesson6_next")
    st.markdown(plain(f"Before the warpers the most likely next token is {show_piece(top.token)} (logit "
                      f"{top.logit:.2f}) at {top.p_before:.1%}; after them it has {top.p_after:.1%}, and {kept} of the "
                      f"{len(t.top)} shown candidates can still be drawn. This draw ({t.rule}) picked "
                      f"{show_piece(t.token)}."))
    ending = course.ending()
    if ending is None:  # once per model and server; every later rerun reads it back
        limit = 400
        bar = st.progress(0.0, text="Generating a story until the model ends it (once, then kept)…")
        ending = until_end(course.lm, ENDING, limit, on_step=lambda n: bar.progress(
            min(1.0, n / limit), text=f"Generating a story until the model ends it: {n} tokens so far…"))
        course.keep_ending(ending)
        bar.empty()
    st.markdown(f"A run **stops** at the end-of-text token (id {course.lm.tokenizer.eos_token_id}), after the maximum number "
                f"of new tokens, when the new text contains a stop string, or when the context of "
                f"{course.spec.max_positions} positions is full. Greedy from the story below (up to {ending['max_new_tokens']} "
                f"tokens) stopped after **{ending['tokens']} tokens**, reason: **{ending['stop_reason']}**"
                + (": the model wrote end-of-text itself." if ending["stop_reason"] == "eos" else "."))
    st.text(ending["prompt"] + ending["text"])
