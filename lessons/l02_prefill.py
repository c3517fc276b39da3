"""Lesson 2. Prefill (initiation phase): the whole prompt at once

Its first screen (1280x720, presenter mode) holds the claim, the stage of the prefill and the causal mask with why it
is there, side by side; the numbers behind them (rows in, the product, the roofline) fold below."""

from __future__ import annotations

import streamlit as st

from drawing.attention import attention_heatmap, attention_rows, masked_weight
from lessons.course import Course, busy, prompt_picker, show_stage
from ui.charts import chart
from ui.style import scale

TITLE = '2. Prefill (initiation phase): the whole prompt at once'
MASK_HEIGHT = 300  # the mask's heatmap beside the stage, before scale: both fit the first screen of a projector


def show(course: Course) -> None:
    claim, pick = st.columns([2.6, 1], gap="medium", vertical_alignment="bottom")
    first = claim.empty()  # the takeaway, once the prompt has run
    with pick:
        prompt = prompt_picker("lesson2_prompt", default=2)
    run = course.greedy_run(prompt, decode_steps=1)
    pre, dec = run.records[0], run.records[1]
    course.takeaway(first, f"Prefill runs all {pre.q_len} prompt tokens in one pass: each weight read from memory "
                           f"serves {pre.q_len} rows of arithmetic.")
    stage, mask, why = st.columns([1.0, 0.9, 0.55], gap="small")
    with stage:
        show_stage(run, 0, enlarge="lesson2_enlarge")
    rows, att = attention_rows(pre, 0, 0)
    above = masked_weight(pre, 0, 0)  # the recorded weights, not the picture's blanks
    with mask:
        fig = attention_heatmap(att, course.labels(run)[: pre.kv_len], course.labels(run)[: pre.kv_len],
                                "layer 0, head 0: the causal mask", scale=scale())
        fig.update_layout(height=int(MASK_HEIGHT * scale()))
        fig.update_traces(colorbar=dict(thickness=10, title=dict(text="")), selector=dict(type="heatmap"))
        chart(fig, key="lesson2_att")
    why.markdown(f"**Why a mask:** when the model writes the token after position t, nothing after t exists yet. "
                 f"Prefill has every row at once, so the **causal mask** hides each row's future: row t reads keys "
                 f"0…t only. Grey is **masked**: a pair never weighed, not a weight that came out small (white). "
                 f"The weights above the diagonal add up to **{above:.1g}**, "
                 "and each position's K and V are what feeding the prompt one token at a time would give.")
    with st.expander("The numbers, in full: the rows in, the product they make, where this pass sits on the roofline"):
        st.markdown("**Prefill** (the *initiation phase*) is the first forward pass: **every prompt position at "
                    "once**. The stage shows s rows going in together and K and V of all of them written to the "
                    "cache; the heatmap shows what each row may read.")
        st.markdown(f"This prompt is **{pre.q_len} tokens**, so prefill pushed all {pre.q_len} through at once: the "
                    f"rows entering each block are `[1, {pre.q_len}, {course.spec.d_model}]` = `[batch, pos, d_model]`. "
                    f"Every weight matrix multiplies all {pre.q_len} rows at once, a **matrix-matrix** product: each "
                    f"weight read from memory serves {pre.q_len} rows of arithmetic.")
        st.markdown(course.bound_sentence(pre, "This prefill") + f" The decode step after it: "
                    f"{dec.intensity_estimate:.1f} FLOPs per byte. A longer prompt does more arithmetic per weight it "
                    "reads, and moves right.")
        course.physics("prefill", pre)
    busy(run.records[:1])  # the prefill's times are the ones this lesson quotes: its decode step's noise is not
