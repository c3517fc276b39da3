"""Serving: many requests on one model (continuous batching, a paged KV cache)."""

import streamlit as st

from ui.frame import frame

st.title("Serving: many requests, one model")
settings, lm = frame(__file__)
st.info("Coming in this wave.")
