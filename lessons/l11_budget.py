"""Lesson 11. The KV cache on a budget: when the cache does not fit, quantize it (fewer bits a number) or evict from it
(fewer positions), and measure what each costs in tokens. Its pictures and measurements are the budget page's
(topics/budget/)."""

from __future__ import annotations

import streamlit as st

from drawing.svg import picture_html
from lessons.course import Course
from physics import kvcalc
from physics.units import human_bytes
from topics.budget import draw, measure
from topics.budget.policies import CAPPED
from topics.budget.policies import POLICIES as MEANS
from topics.budget.records import SHORT_DTYPE
from topics.budget.stories import recorded_stories
from ui.charts import chart
from ui.style import scale

TITLE = "11. The KV cache on a budget: quantize it, evict from it"
POLICIES = ("full", "fp8", "int4", "window", "heavy", "heavy-avg")
BUDGET = 64  # a quarter of the held-out context
LONG = "Llama-3.1-8B"  # a published model whose context window is long (assets/model_configs.csv)


@st.cache_resource(max_entries=4, show_spinner="Measuring five policies against the full cache (once, then kept)…")
def _rows(_lm, model: tuple):
    return measure.compare_policies(_lm, POLICIES, BUDGET, new_tokens=48)


@st.cache_resource(max_entries=4, show_spinner=False)
def _sinks(_lm, model: tuple):
    return measure.sink_mass(_lm)


def show(course: Course) -> None:
    lm = course.lm
    first = st.empty()  # the takeaway, once each policy is measured
    long = kvcalc.from_table(LONG)
    tokens = long.max_positions
    st.markdown(
        f"Lesson 8 counted a cache's bytes; a long context's bytes do not fit: {long.name} filling its "
        f"{tokens // 1024}K-token context holds {human_bytes(long.kv_bytes(tokens, 1, 2.0))} of keys and values in "
        f"bf16 (an estimate from its config) for one sequence. Servers answer in two ways. **Quantize**: store each "
        "number in fewer bits (8, or 4), keeping the newest positions exact. "
        f"**Evict**: hold at most B positions and forget the rest: the last B (a *window*), or the ones attention "
        f"kept reading (*heavy hitters*, scored two published ways). Below, each with a budget of {BUDGET} positions, measured against the full "
        "cache on a story this model never trained on: bytes from the tensors, and the damage as the share of next "
        "tokens that agree when both read the same text (teacher-forced).")
    rows = _rows(lm, course.model)
    by_policy = {r.policy: r for r in rows}
    pick = st.radio("try it: the cache drawn", POLICIES[1:], horizontal=True, key="lesson11_policy",
                    persist_state="session")
    row = by_policy[pick]
    left, right = st.columns([1, 1], gap="medium")
    with left:
        st.html(picture_html(draw.cache_svg(row.cache, width=draw.COLUMN_W),
                             f"the {pick} cache per layer after the held-out story", "lesson11-cache",
                             phone=draw.cache_svg(row.cache, width=draw.PHONE_W)))
    with right:
        st.dataframe(draw.policy_table(rows, short=True), hide_index=True)
    fp8, window = by_policy["fp8"], by_policy["window"]
    spread = recorded_stories(lm)  # one story is one draw: the same policies over several, with their intervals
    heavy, avg = by_policy["heavy"], by_policy["heavy-avg"]
    course.takeaway(first, f"With {BUDGET} positions: fp8 keeps {fp8.cache.ratio:.0%} of the bytes and agrees on "
                           f"{fp8.forced.agreement:.1%} of next tokens; a window of {BUDGET}, on "
                           f"{window.forced.agreement:.1%}.")
    st.markdown(
        f"Here fp8 holds **{fp8.cache.ratio:.0%}** of the bytes of this model's full "
        f"{SHORT_DTYPE.get(fp8.cache.dtype, fp8.cache.dtype)} cache "
        f"({fp8.cache.ratio_bf16:.0%} of a bf16 server's, counted) and agrees on **{fp8.forced.agreement:.1%}** of the "
        f"next tokens: rounded numbers, nothing forgotten. A window of {BUDGET} holds {window.cache.ratio:.0%} of the "
        f"bytes and agrees on **{window.forced.agreement:.1%}**: what fell out of the window is gone, and a name the "
        "story gave early can go with it. "
        + ("Run free, the window's text parts from the full cache's at step "
           f"**{window.parting_step}**. " if window.parting_step is not None else
           "Run free, the two texts never part in these tokens. ")
        + draw.scores_words(heavy, avg, spread))
    if spread is not None:
        dtype = spread.dtypes[0]
        st.caption(f"One story is one draw. Over {spread.stories} held-out stories (recorded, "
                   f"{SHORT_DTYPE.get(dtype, dtype)}), the eviction policies holding {spread.budget} positions rank "
                   f"{spread.ranking_sentence(dtype, CAPPED)}. The budget page shows every interval, and the same "
                   "in bf16. " + "; ".join(f"*{p}* holds {MEANS[p]}" for p in CAPPED if p not in POLICIES) + ".")
        # (the policies this lesson's text does not introduce, each in words: no name left unexplained)
    sink_rows = _sinks(lm, course.model)
    chart(draw.sink_fig(sink_rows, lm.spec.name, scale=scale()), "lesson11_sinks")
    st.caption("The first position: big trained models (GPT-2, Llama) pour attention onto it, a *sink*, and collapse "
               "when a window evicts it (StreamingLLM keeps 4 sink positions beside the window for this). The chart "
               "shows how much each layer of this model pays position 0 (a bar: the heads' mean; a dot: each head) "
               "beside what a uniform reader would. " + draw.sink_words(sink_rows))
    st.page_link(str(course.pages / "budget.py"), label="Open the budget page: every policy, any budget, both texts",
                 icon=":material/compress:")
