"""Text a visitor typed or linked is shown inert: never as markdown, HTML or a Streamlit directive."""

from __future__ import annotations

import re

import streamlit as st

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$&])")


def plain(text: str) -> str:
    """User-controlled text made inert for st.markdown / st.error / st.warning: every markdown, HTML and
    streamlit directive character is backslash-escaped, so a link, an image or :red[...] shows as typed."""
    return _MD_SPECIAL.sub(r"\\\1", str(text)).replace("\n", "  \n")


def error(text: str, where=None) -> None:
    (where or st).error(plain(text), icon=":material/error:")


def warning(text: str, where=None) -> None:
    (where or st).warning(plain(text), icon=":material/warning:")
