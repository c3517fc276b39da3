"""A stage drawn in a column beside something else (its words ~5-10 px on a 1280x720 projector), and a button
that opens the same picture across the screen: lessons 2, 5 and 9, and the Speculative page."""

from __future__ import annotations

import streamlit as st

ENLARGED_PX = 1000  # the dialog's width: the stage's 1,000 units at 1 px each, its smallest words ~13 px, not ~5-10


@st.dialog("The stage, across the screen", width=ENLARGED_PX)
def _enlarged(html: str) -> None:
    st.html(html)


def enlarge_button(html: str, key: str) -> None:
    """Under a stage drawn in a column: the same picture, enlarged."""
    # no help tooltip: after the dialog closes, the pointer still rests on the button, its tooltip on the stage
    if st.button("Enlarge the stage", key=key, icon=":material/fullscreen:", type="tertiary"):
        _enlarged(html)
