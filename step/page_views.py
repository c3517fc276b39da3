"""The step page's views: the blocks of drawing/views.py placed on the page, plus what only a live run adds.

The blocks are the same for the lecturer's page and a class's published pictures; what is added here needs
a widget (every query row, one head over every step) or a forward pass (the check that cached K and V equal
a recomputation), so it lives with the page.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from drawing.differences import cache_match_words
from drawing.views import VIEWS, Block, StepContext, one_head_every_step, view_blocks
from engine.generate.compare import kv_reuse
from topics.ladder.page_ladder import latency_claim
from ui.charts import chart
from ui.text import plain

__all__ = ["VIEWS", "place", "show_view"]


def place(blocks: list[Block], key: str) -> None:
    """Put a view's blocks on the page; text that may hold a visitor's words is shown inert."""
    for b in blocks:
        if b.kind == "figure":
            chart(b.value, key=f"{key}_{b.name}")
        elif b.kind == "table":
            if len(b.value) > 12:  # a long table scrolls in place instead of pushing the page down
                st.dataframe(b.value, width="stretch", height=240)
            else:
                st.table(b.value)  # a table wraps: nothing runs off the side
        elif b.kind == "html":
            st.html(b.value)
        elif b.kind == "md":
            st.markdown(b.value)
        elif b.kind == "text":
            st.markdown(plain(b.value))
        elif b.kind == "caption":
            st.caption(b.value)
        elif b.kind == "note":
            st.info(b.value)
        elif b.kind == "warn":
            st.warning(b.value)
        elif b.kind == "latex":
            st.latex(b.value)
        elif b.kind == "metrics":
            for col, (label, value, why) in zip(st.columns(len(b.value)), b.value):
                col.metric(label, value, help=why)


def show_view(view: str, c: StepContext, run=None, key: str = "step") -> None:
    """One view of the step `c` shows; `run` is the live Stepper when there is one (the lecturer's own page)."""
    if view == "Attention" and c.t.pattern_rows > 1 and c.t.layers[c.layer].pattern is not None and \
            st.toggle("every query row (one panel per head)", key=f"{key}_att_every", persist_state="session"):
        c = replace(c, every_row=True)
    place(view_blocks(view, c), key)
    if view == "Attention" and c.t.layers[c.layer].pattern is not None:
        every_step_switch(c, key)
    elif view == "Latency" and run is not None:
        said = latency_claim(run.lm)  # the claim at a size where the hardware, not Python, sets the time
        if said:
            st.caption(said)
    elif view == "Matmuls" and run is not None:
        cached_kv_check(run, c)


def every_step_switch(c: StepContext, key: str) -> None:
    if st.toggle("one head, every step so far", key=f"{key}_att_assembled", persist_state="session",
                 help="The prefill square plus one row per decode step"):  # built only when asked: a click stays cheap
        place([one_head_every_step(c)], key)


def cached_kv_check(run, c: StepContext) -> None:
    """Why K and V are cached and Q is not, checked on this run: one extra pass per cache length, never per rerun."""
    if not run.use_cache:
        st.info("The cache is off: every step computes K and V of all positions again, and throws them away.")
        return
    if run.cache is None:
        return
    ss = st.session_state
    cache_key = (id(run), run.cache.get_seq_length())
    if ss.get("step_proof_key") != cache_key:
        ss["step_proof"] = kv_reuse(run.lm, run.ids, run.cache)
        ss["step_proof_key"] = cache_key
    proof = ss["step_proof"]
    st.markdown(f"**Why K and V are cached and Q is not**, checked on this run: recomputing all "
                f"{proof.positions} positions with no cache gives "
                f"{cache_match_words(proof.max_key_diff, proof.max_value_diff)}: "
                "old K and V never change. Every step's q has query_pos = "
                f"{'1' if c.t.phase == 'decode' else c.t.q_len} (the fed rows only): no later step reads an old Q.")
