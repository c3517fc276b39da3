"""Lesson 8. Scale: the cache of big models"""

from __future__ import annotations

import streamlit as st

from lessons.course import Course
from physics import kvcalc
from physics.units import human_bytes
from topics.ladder.tables import compare_frame
from ui.presets import PROMPTS

TITLE = '8. Scale: the cache of big models'
MODELS = ("Llama-2-7b", "Llama-3-8B", "Llama-2-70b", "Llama-3-70B", "Gemma-2-9b")  # published configurations


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once the cards are counted
    st.markdown("The cache that was a few kilobytes here is the main memory cost of serving big models. The formula "
                "is the same: 2 × layers × kv_heads × head_dim × bytes per element, per token (a sliding-window "
                "layer stops growing at its window).")
    t = course.greedy_run(PROMPTS[0]["prompt"], decode_steps=4).records[-1]
    live = t.kv_bytes / t.kv_len
    tokens = st.select_slider("try it: context length", [1024, 4096, 8192, 32768], 8192, key="lesson8_tokens",
                              persist_state="session")
    st.markdown(f"Your live model stores **{live:,.0f} bytes per token** (measured, {course.lm.dtype_name}). Published "
                f"configurations, computed from their figures (estimates, fp16, batch 1):")
    st.dataframe(compare_frame(list(MODELS), tokens), hide_index=True, width="stretch")
    beyond = [a.name for a in map(kvcalc.from_table, MODELS) if a.max_positions and tokens > a.max_positions]
    if beyond:  # the bytes of a context the model cannot read: arithmetic, said so beside the table
        one = len(beyond) == 1
        st.caption(f"{', '.join(beyond)} {'reads' if one else 'read'} fewer positions than {tokens:,} (the table's "
                   f"last column): {'its row is' if one else 'their rows are'} memory arithmetic only, a context "
                   f"{'it' if one else 'they'} cannot use.")
    l2, l3 = kvcalc.from_table("Llama-2-70b"), kvcalc.from_table("Llama-3-8B")
    st.markdown(f"Grouped-query attention shares each K/V head among several query heads: {l2.name}'s "
                f"{l2.heads} query heads use {l2.kv_heads} K/V heads, a cache {l2.heads // l2.kv_heads}× smaller "
                f"than MHA; Llama-3-8B's cache is {l3.heads // l3.kv_heads}× smaller than it would be with MHA.")
    big = kvcalc.from_table("Llama-3-70B")
    cards = kvcalc.cards_for(big, tokens)  # enough 80 GB cards, plus one for caches
    past = (f"; memory arithmetic only: it reads at most {big.max_positions:,}"
            if big.max_positions and tokens > big.max_positions else "")
    course.takeaway(first, f"Llama-3-70B's fp16 weights alone are {human_bytes(cards.weights)}: {cards.cards} cards of "
                           f"80 GB hold them and the caches of {cards.max_batch:,} sequences of {tokens:,} "
                           f"tokens (estimates{past}).")
    st.caption(f"Why it matters: Llama-3-70B's fp16 weights alone are {human_bytes(cards.weights)}, more than one "
               f"80 GB accelerator holds. On {cards.cards} of them ({cards.cards * 80} GB), what the weights "
               f"leave holds the caches of **{cards.max_batch:,} sequences** of {tokens:,} tokens "
               f"({human_bytes(cards.per_sequence)} each, estimate; activations not counted{past}).")
    st.expander("What comes next").markdown("What comes next:\n"
                "- **Paged KV cache** (vLLM's PagedAttention): store the cache in fixed-size blocks like virtual "
                "memory pages, so many sequences share GPU memory without fragmentation.\n"
                "- **Speculative decoding** (next lesson, and its own page): guess several tokens cheaply and check "
                "them all in one pass.\n"
                "- **A KV cache on a budget** (lesson 11, and its own page): store keys and values in 8 or 4 bits, "
                "or evict positions, and measure what each costs in tokens.")
