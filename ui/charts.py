"""Every chart a page places, placed one way: plotly's hover toolbar (its modebar) never drawn, so no icon covers
a chart's title on a projector or a phone. Dragging still zooms and a double click gives the range back."""

from __future__ import annotations

import streamlit as st

CONFIG = {"displayModeBar": False}  # the toolbar's icons would sit over a title's end


def chart(fig, key: str, on=None, **kw):
    """st.plotly_chart(fig) in `on` (a column, a container; the page itself by default), without the toolbar."""
    return (on or st).plotly_chart(fig, key=key, config=CONFIG | kw.pop("config", {}), **kw)
