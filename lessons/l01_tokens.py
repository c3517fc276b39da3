"""Lesson 1. Text in, tokens out"""

from __future__ import annotations

import streamlit as st

from drawing.palette import show_piece
from drawing.request import request_html
from drawing.tokens import token_chips_html
from engine.generate.loop import token_pieces
from lessons.course import Course
from lessons.next_word import ARTICLE_PROMPT
from ui.text import plain

TITLE = '1. Text in, tokens out'


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once the text is tokenized
    st.markdown("A model never sees letters. A **tokenizer** cuts the text into pieces from a fixed vocabulary and "
                "replaces each piece by its number (its **id**). The model reads ids and writes ids; turning the "
                "ids back into text is **detokenizing**.")
    left, right = st.columns([1, 2], vertical_alignment="bottom")
    text = left.text_input("try it: type any text", "Today's weather is so", key="lesson1_text",
                           persist_state="session")
    if not text:
        st.info("Type some text to see its tokens.")
        return
    ids = course.lm.tokenizer(text)["input_ids"]
    bos = course.lm.tokenizer.bos_token_id
    right.html(token_chips_html(list(zip(ids, token_pieces(course.lm.tokenizer, ids))), [], set()))
    back = course.lm.tokenizer.decode(ids, skip_special_tokens=True)
    course.takeaway(first, f"{len(text)} characters became {len(ids)} tokens: the model reads and writes ids, never "
                           "letters.")
    lead = (f" The first, id {ids[0]}, is the start marker the tokenizer adds." if ids and ids[0] == bos else "")
    st.markdown(f"**{len(text)} characters became {len(ids)} tokens** out of a vocabulary of {course.spec.vocab:,}.{lead} "
                "Decoding the ids gives back " + ("the same text." if back == text else plain(
                    f"not exactly the same text (the tokenizer normalised it): \"{back}\".")))
    st.markdown("**One request, start to finish**, timed on this server's device:")
    st.html(request_html(course.request(ARTICLE_PROMPT)))
    st.caption("The text is tokenized on the CPU, the ids are copied to the device, one prefill pass (the initiation "
               "phase, which chooses the first new token) and one decode pass per new token after it (the "
               "generation phase) run there, the new ids are copied back and detokenized. Loading the weights "
               "happens once per server.")
    odds = course.article_odds()
    top = ", ".join(f"{show_piece(piece)} ({p:.0%})" for piece, p in odds["top"])
    said = "; ".join(f"'{w}' {o['p'] * 100:.2g}% (rank {o['rank']:,})" for w, o in odds["words"].items())
    why = (" It was trained only on TinyStories, short children's stories: it has read 'was so big' and 'so happy' in "
           "thousands of them, and hardly any weather reports." if course.bundled else "")
    with st.expander("The numbers, in full: what this model predicts after a web-text prompt"):
        st.markdown(plain(f"A web-text example: after \"{ARTICLE_PROMPT}\" a model trained on web text predicts "
                          f"'nice' or 'warm'. This model predicts {top}; those two words get {said}.{why}"))
