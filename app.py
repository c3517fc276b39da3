"""Decode Lab: watch a real language model generate, one forward pass at a time.

Router and frame only: page config, the shared sidebar, and navigation.
Run with `streamlit run app.py`.
"""

from pathlib import Path

import streamlit as st

from ui.frame import apply_link, sidebar, warning, write_link

ROOT = Path(__file__).resolve().parent
PAGES = ROOT / "pages"

presenting = st.query_params.get("presenter") == "on"  # a presenter link opens with the sidebar folded away
# the icon is a local file: a material-icon favicon would make every browser fetch it from a font CDN
st.set_page_config(page_title="Decode Lab", page_icon=str(ROOT / "assets" / "icon.png"), layout="wide",
                   initial_sidebar_state="collapsed" if presenting else "auto")

page = st.navigation([
    st.Page(PAGES / "step_through.py", title="Step through", icon=":material/footprint:", default=True),
    st.Page(PAGES / "lessons.py", title="Lessons", icon=":material/school:"),
    st.Page(PAGES / "race.py", title="Race: cache vs no cache", icon=":material/sports_score:"),
    st.Page(PAGES / "speculative.py", title="Speculative decoding", icon=":material/fast_forward:"),
    st.Page(PAGES / "scale.py", title="Scale: KV memory and roofline", icon=":material/trending_up:"),
    st.Page(PAGES / "model_info.py", title="Model", icon=":material/info:"),
])
link_problems = apply_link()  # first run of a session only: settings from a shared link
st.session_state["settings"], st.session_state["lm"] = sidebar()
for problem in link_problems:
    warning(problem)
write_link(st.session_state["settings"])  # the URL always reproduces what is on screen
page.run()
