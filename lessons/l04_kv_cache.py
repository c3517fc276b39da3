"""Lesson 4. The KV cache"""

from __future__ import annotations

import streamlit as st

from drawing.differences import cache_match_words
from drawing.kv import kv_frame, kv_growth_figure
from lessons.course import Course
from physics import kvcalc
from ui.charts import chart
from ui.presets import PROMPTS
from ui.style import scale

TITLE = '4. The KV cache'


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once the cache is measured
    st.markdown("A decode step needs the **keys and values** of every earlier position. They do not change once "
                "computed, so the **KV cache** keeps them, per layer, and each step adds only the new position's. "
                "Queries are not kept: a query is used once, by its own position, to look back; no later step ever "
                "needs an old query again.")
    steps = st.slider("try it: decode steps", 0, 20, 8, key="lesson4_steps", persist_state="session")
    run = course.greedy_run(PROMPTS[0]["prompt"], decode_steps=steps)
    t = run.records[-1]
    batch, kv_heads, pos, head_dim = t.layers[0].shapes["kv.keys"]
    elem = course.lm.elem_bytes
    formula = course.spec.kv_bytes(t.kv_len, batch, elem)  # the ModelSpec's formula, from the config
    course.takeaway(first, f"The cache holds {pos} positions' keys and values: {t.kv_bytes:,} bytes measured on the "
                           f"tensors, {'exactly' if t.kv_bytes == formula else 'not'} the formula's; no query is kept.")
    st.markdown(f"After prefill and {steps} decode steps the cache holds **{pos} positions**"
                + ("" if not course.spec.sliding_layers else " in its full layers (the sliding-window layers hold fewer)")
                + f". Each layer stores keys and values of shape `[{batch}, {kv_heads}, {pos}, {head_dim}]` = "
                "`[batch, kv_head, pos, head_dim]`.")
    st.latex(kvcalc.formula_latex(course.spec, t.kv_len, batch, elem))
    st.markdown(f"Measured from the real tensors: **{t.kv_bytes:,} bytes** "
                f"({'the same' if t.kv_bytes == formula else 'different!'}). Each new token adds "
                f"{course.spec.kv_bytes_per_token(elem):,.0f} bytes while every layer still keeps every position.")
    proof = course.proof(PROMPTS[0]["prompt"], steps)
    if proof is not None:
        with st.expander("The numbers, in full: the cache checked against recomputing every position"):
            st.markdown(f"**Checked on this run:** recomputing every one of the {proof.positions} positions with "
                        f"no cache gives {cache_match_words(proof.max_key_diff, proof.max_value_diff)}: the cached K "
                        "and V are exactly what a full recomputation would give. And every step's q was "
                        f"`[1, {course.spec.heads}, 1, {course.spec.head_dim}]` after prefill: one row, its own, used "
                        "once.")
    st.table(kv_frame(t).set_index("layer"))
    chart(kv_growth_figure(run.records, scale=scale()), key="lesson4_growth")
