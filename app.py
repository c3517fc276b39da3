"""Decode Lab: watch a real language model generate, one forward pass at a time.

Run with `streamlit run app.py`. This file is read twice, for two jobs:

- as the script of every page run (Streamlit runs it as __main__): the router and frame: page config, the
  shared sidebar, navigation;
- as a module, once, by `streamlit run` itself, which finds `app = st.App(...)` below and serves it: Streamlit's
  own server plus the class's routes (/class/...: a follower's event stream, pictures, votes; classroom/http.py).
"""

from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
PAGES = ROOT / "pages"


def page(name: str, title: str, icon: str) -> st.Page:
    """pages/NAME.py, at /NAME."""
    return st.Page(PAGES / f"{name}.py", title=title, icon=icon, url_path=name)


def home(name: str, title: str, icon: str) -> tuple[st.Page, st.Page]:
    """pages/NAME.py as the default page, at /, and again at /NAME (hidden from the list): Streamlit serves a default
    page only at /, so its own address answered "Page not found". The entry at / comes first, so st.switch_page by
    file (a fork, a test) lands there."""
    return (st.Page(PAGES / f"{name}.py", title=title, icon=icon, url_path=f"{name}-home", default=True),
            page(name, title, icon))


def router() -> None:
    from classroom.page import back_to_class, follow_route, lecturer_panel
    from classroom.page_copy import published
    from ui.links import apply_link, write_link
    from ui.setup import page_links, resume_page
    from ui.sidebar import sidebar
    from ui.text import warning

    presenting = st.query_params.get("presenter") == "on"  # a presenter link opens with the sidebar folded away
    # the icon is a local file: a material-icon favicon would make every browser fetch it from a font CDN
    st.set_page_config(page_title="Decode Lab", page_icon=str(ROOT / "assets" / "icon.png"), layout="wide",
                       initial_sidebar_state="collapsed" if presenting else "auto")
    step, step_at_its_name = home("step_through", "Step through", ":material/footprint:")
    pages = [
        step,
        page("lessons", "Lessons", ":material/school:"),
        page("race", "Race: cache vs no cache", ":material/sports_score:"),
        page("speculative", "Speculative decoding", ":material/fast_forward:"),
        page("serving", "Serving: many requests", ":material/dns:"),
        page("scale", "Scale: KV memory and roofline", ":material/trending_up:"),
        page("budget", "KV cache on a budget", ":material/compress:"),
        page("model_info", "Model", ":material/info:"),
    ]
    follow = page("follow", "Follow the lecturer", ":material/cast_for_education:")  # /?follow=CODE; not listed
    unlisted = [follow, step_at_its_name]
    current = st.navigation(pages + unlisted, position="hidden")  # listed by page_links in the sidebar (config.toml)
    resume_page(pages + unlisted)  # a fresh server's first request was a deep link: go back to it
    following = follow_route(current, follow)  # a ?follow=CODE link, on any page, opens the follower's page
    page_links(pages, st.sidebar)
    link_problems = apply_link()  # first run of a session only: settings from a shared link
    if following:  # a follower shows the lecturer's screen: no settings or model of its own to draw (classroom/page.py)
        st.session_state.setdefault("settings", None)
        st.session_state.setdefault("lm", None)
    else:
        st.session_state["settings"], st.session_state["lm"] = sidebar()
        lecturer_panel(st.sidebar)  # "lecturer key" and "Start a class", when the server has a key
    for problem in link_problems:
        warning(problem)
    if not following:  # a follower's address keeps its class code
        back_to_class(follow)  # a student who forked: a way back to the class, on every page
        write_link(st.session_state["settings"])  # the URL always reproduces what is on screen
    with published(current.title):  # leading a class: what this page draws is the class's frame (classroom/page_copy.py)
        current.run()


if __name__ == "__main__":  # Streamlit runs this file as the script of every page run
    router()
else:  # `streamlit run app.py` imports it to find the server: Streamlit's, with the class's routes in front
    from starlette.middleware import Middleware

    from classroom.http import ClassRoutes
    from classroom.server import hub

    app = st.App(__file__, middleware=[Middleware(ClassRoutes, hub_factory=hub)])
