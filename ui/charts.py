"""Every chart a page places, placed one way: plotly's hover toolbar (its modebar) never drawn, so no icon covers
a chart's title on a projector or a phone. Dragging still zooms and a double click gives the range back."""

from __future__ import annotations

import streamlit as st

from ui.style import scale

CONFIG = {"displayModeBar": False}  # the toolbar's icons would sit over a title's end


def chart(fig, key: str, on=None, **kw):
    """st.plotly_chart(fig) in `on` (a column, a container; the page itself by default), without the toolbar. The
    figure carries the scale its text was drawn at (`meta.dl_scale`: larger on a projector), so that a class's phone,
    which draws the lecturer's figure (classroom/follow.js), brings the text back to a phone's size."""
    fig.update_layout(meta={"dl_scale": scale()})
    return (on or st).plotly_chart(fig, key=key, config=CONFIG | kw.pop("config", {}), **kw)
