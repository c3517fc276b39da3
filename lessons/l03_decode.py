"""Lesson 3. Decode (generation phase): one token per step"""

from __future__ import annotations

import streamlit as st

from drawing.attention import assembled_attention, attention_heatmap
from lessons.course import Course, busy, show_stage
from ui.charts import chart
from ui.presets import PROMPTS
from ui.style import scale

TITLE = '3. Decode (generation phase): one token per step'


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once the steps have run
    st.markdown("**Decode** (the *generation phase*) adds one token per forward pass. Only the newest position is "
                "computed; its query is "
                "compared with the keys of every position so far. The attention matrix gains **one row** per step, "
                "and the rows above it never change.")
    steps = st.slider("try it: decode steps (move it back and forth to replay them)", 1, 12, 5, key="lesson3_steps",
                      persist_state="session")
    run = course.greedy_run(PROMPTS[0]["prompt"], decode_steps=12)
    pre, t = run.records[0], run.records[steps]
    kind = course.step_kind(t)  # the claim is about a big model; the bundled one's own step may say otherwise
    kind = f"on the {kind}" if kind.endswith("side") else kind  # "overhead-bound", "on the memory side"
    course.takeaway(first, f"Decode feeds 1 token a pass, attending to all {t.kv_len} positions: each weight is read "
                           "for one row, so " + ("bytes, not arithmetic, set its time (this step too: memory-bound)."
                                                 if kind == "memory-bound" else "on a big model, bytes, not "
                                                 f"arithmetic, set its time (this small model's step: {kind})."))
    show_stage(run, steps)
    course.physics("decode", t)
    with st.expander("The numbers, in full: this step's shapes and its place on the roofline"):
        st.markdown(f"After prefill ({pre.q_len} positions) and {steps} decode steps, the last step fed **1 token** "
                    f"(q_len = {t.q_len}) and attended to **{t.kv_len} positions** (kv_len): "
                    f"`[1, 1, {course.spec.d_model}]` in, against `[1, {pre.q_len}, {course.spec.d_model}]` at "
                    "prefill. Every weight matrix now multiplies a single row, a **matrix-vector** product: each weight "
                    "is read from memory for one row of arithmetic, so the weights' bytes, not the arithmetic, should "
                    "set a decode step's time.")
        st.markdown(f"It took {t.timing.describe()} (measured) for {t.flops_estimate / 1e6:.1f} MFLOPs (estimate). "
                    + course.bound_sentence(t, "A decode step"))
    busy([t])  # the step on screen: its time is the one this lesson quotes
    z = assembled_attention(run.records[: steps + 1], 0, 0)
    chart(attention_heatmap(z, course.labels(run)[: z.shape[0]], course.labels(run)[: z.shape[1]],
                                          "layer 0, head 0: prefill square + a row a step",  # whole on a phone
                                          scale=scale()), key="lesson3_att")
