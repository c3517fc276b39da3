"""Lesson 2. Prefill (initiation phase): the whole prompt at once"""

from __future__ import annotations

import numpy as np
import streamlit as st

from engine.draw.attention import attention_heatmap, attention_rows
from lessons.course import Course, busy, prompt_picker, show_stage
from ui.style import scale

TITLE = '2. Prefill (initiation phase): the whole prompt at once'


def show(course: Course) -> None:
    st.markdown("**Prefill** (the *initiation phase*) is the first forward pass: every prompt position goes "
                "through the model at once. "
                "Each position's query is compared with the keys of itself and every earlier position; the "
                "**causal mask** hides later positions, because when the model writes a token the future does "
                "not exist yet. The stage shows s rows going in together, and K and V of all of them written to "
                "the cache at once.")
    prompt = prompt_picker("lesson2_prompt", default=2)
    run = course.greedy_run(prompt, decode_steps=1)
    pre, dec = run.traces[0], run.traces[1]
    show_stage(run, 0)
    rows, att = attention_rows(pre, 0, 0)
    above = float(np.nansum(np.triu(np.nan_to_num(att, nan=0.0), 1)))
    st.markdown(f"This prompt is **{pre.q_len} tokens**, so prefill pushed all {pre.q_len} through at once: the rows "
                f"entering each block are `[1, {pre.q_len}, {course.spec.d_model}]` = `[batch, pos, d_model]`. Every weight "
                f"matrix multiplies all {pre.q_len} rows at once, a **matrix-matrix** product: each weight read from "
                f"memory serves {pre.q_len} rows of arithmetic. In the heatmap (layer 0, head 0) every row sums to 1, "
                f"and the weights above the diagonal add up to **{above:.1g}**: the mask at work (drawn grey: masked, "
                "not zero).")
    st.plotly_chart(attention_heatmap(att, course.labels(run)[: pre.kv_len], course.labels(run)[: pre.kv_len],
                                          "layer 0, head 0: prefill, causal", scale=scale()), key="lesson2_att")
    st.markdown(course.bound_sentence(pre, "This prefill") + f" The decode step after it: {dec.intensity_estimate:.1f} "
                "FLOPs per byte. A longer prompt does more arithmetic per weight it reads, and moves right.")
    course.physics("prefill")
    busy(run.traces)
