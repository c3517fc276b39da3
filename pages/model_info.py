"""The loaded model at a glance: every figure read from its config and weights."""

import pandas as pd
import streamlit as st

from ui.setup import page_setup

st.title("The model")
_, lm = page_setup("model_info", need_model=True)
st.caption("Every row is read from the model's config and weights, except the device: where this server runs it. "
           "The warm-up below is measured at load. The words in the left column are the names the code and the "
           "traces use.")
st.table(pd.DataFrame(lm.rows(), columns=["", "value"]).set_index(""))
st.write(f"Warm-up at load: {lm.warmup_ms:.1f} ms (two small forward passes, excluded from every latency shown).")
if lm.spec.sliding_layers:
    st.dataframe(pd.DataFrame([{"layer": i, "attends to": "every position" if lm.spec.window(i) is None
                                else f"the last {lm.spec.window(i)} positions"} for i in range(lm.spec.layers)]),
                 hide_index=True)
