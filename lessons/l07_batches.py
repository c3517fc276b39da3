"""Lesson 7. Batches and padding"""

from __future__ import annotations

import numpy as np
import streamlit as st

from drawing.attention import attention_heatmap
from drawing.palette import axis_labels
from drawing.tokens import batch_attention, batch_shapes_frame, padded_batch_html
from engine import DecodeLabError
from lessons.course import Course
from ui.charts import chart
from ui.presets import PROMPTS
from ui.style import scale
from ui.text import error, plain

TITLE = '7. Batches and padding'


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once the batch has run
    intro = st.expander("The numbers, in full: why a batch is padded on the left, and its mask")
    intro.markdown("Servers answer many prompts at once by stacking them into a **batch**: one forward pass, "
                "`[batch, pos, d_model]`. Prompts have different lengths, so the short ones are **padded**, on the "
                "**left**: then every row's last position is a real token, the next-token logits of all rows sit in "
                "the same column, and each decode step appends one column to every row. The **attention mask** "
                "marks padding with 0 so no real token ever attends to it.")
    a = st.text_input("try it: first prompt", "Tom had a red ball.", key="lesson7_a", persist_state="session")
    b = st.text_input("try it: second prompt", PROMPTS[1]["prompt"], key="lesson7_b", persist_state="session")
    try:
        run, alone = course.batch((a, b))
    except DecodeLabError as e:
        error(str(e))
        return
    short = int(np.argmax(run.pad_counts))
    course.takeaway(first, f"One pass for both prompts: row {short} got {run.pad_counts[short]} padding positions on "
                           f"the left, and no real token gives them more than {run.max_attention_on_padding():.1g} "
                           "attention.")
    st.html(padded_batch_html(run.pieces, run.input_ids, run.attention_mask))
    pad_id, bos_id = int(run.input_ids[short, 0]), course.lm.tokenizer.bos_token_id
    if pad_id == bos_id:
        st.caption(f"Padding reuses id {pad_id}, the start marker's id (this tokenizer has no separate pad token): the "
                   "ids alone cannot tell padding from a real token; only the attention mask can.")
    st.markdown(f"Row {short} got **{run.pad_counts[short]} padding positions**. Its attention (layer 0, head 0) "
                f"below: the padded columns are masked, drawn grey like every masked pair (never weighed, not a small weight). Over "
                f"every layer and head, the largest weight a real token gave a padded one is "
                f"**{run.max_attention_on_padding():.1g}**.")
    pieces = [p or "PAD" for p in run.pieces[short]]
    chart(attention_heatmap(batch_attention(run, short, 0, 0), axis_labels(pieces),
                                          axis_labels(pieces), f"batch row {short}, layer 0, head 0",
                                          scale=scale()), key="lesson7_att")
    st.caption("The PAD rows at the top are the padding positions' own queries: the mask hides every key from "
               "them (all grey), and whatever they compute is never used.")
    st.dataframe(batch_shapes_frame(run.shapes), hide_index=True)
    for i, same in enumerate(alone):  # engine.generate.batch.same_as_alone: each prompt decoded alone
        st.markdown(plain(f"Row {i}: {run.texts[i]}") + f" — same tokens as running it alone: **{'yes' if same else 'no'}**")
