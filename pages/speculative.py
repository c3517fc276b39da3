"""Speculative decoding: guess several tokens cheaply, let the model check them all in one pass."""

import streamlit as st

from pages.shared import frame

st.title("Speculative decoding")
settings, lm = frame()
st.info("This page is being built.")
