"""What every page starts from: what app.py prepared for this run, and the way back to a deep link.

The parts a page uses live by job: ui/sidebar.py (Settings, the sidebar), ui/model.py (the one model
cache, the server's allow-list, the device's roofline), ui/links.py (the address bar), ui/text.py
(text shown inert), ui/style.py (CSS, presenter mode), ui/presets.py (bundled prompts and scenarios).
"""

from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

_screen = threading.local()  # what this page run calls its screen, in its script thread (see class_label)


def page_setup(name: str, need_model: bool = False) -> tuple:
    """What app.py prepared for this run: the sidebar's settings and the model.

    need_model: a page that cannot work without one says so once and stops here when loading failed.

    Until app.py has called st.navigation once, Streamlit serves a fresh server's first request in
    its old folder-based mode (a `pages/` folder sits beside app.py): a deep link (/race, a shared
    lesson URL) then runs that page's door (pages/NAME.py) alone, without app.py. The page notes where it
    was asked for (`name`, its url path) and hands over to app.py, which draws the sidebar and switches back
    to it (`resume_page`), query parameters and all. (.streamlit/config.toml hides the old mode's file-name menu.)
    """
    if "settings" not in st.session_state:
        st.session_state["wanted_page"] = (name, st.query_params.to_dict())
        st.switch_page(str(Path(__file__).resolve().parent.parent / "app.py"))
    settings, lm = st.session_state["settings"], st.session_state["lm"]
    if need_model and lm is None:
        st.error("No model is loaded: see the message in the sidebar.")
        st.stop()
    return settings, lm


def resume_page(pages: list) -> None:
    """app.py, after st.navigation: go to the page a fresh server's first request asked for (see `page_setup`)."""
    wanted = st.session_state.pop("wanted_page", None)
    if wanted is None:
        return
    name, params = wanted
    target = next((p for p in pages if p.url_path == name), None)  # app.py names each page by its file
    if target is not None:
        st.switch_page(target, query_params=params)
    st.query_params.from_dict(params)  # the default page: only the link's settings to put back


def page_links(pages: list, where) -> None:
    """The pages, as links at the top of the sidebar (st.navigation itself is hidden: see config.toml)."""
    for p in pages:
        where.page_link(p)


def class_label(text: str, order: tuple[str, int] | None = None) -> None:
    """What this screen is called in a class's timeline when a student looks back ('engine step 3'); the page's
    title else. order: (the run, the step) for a page that steps a run, so that a step the lecturer scrubs back to
    takes its place in the timeline. Read by the classroom's page copy (classroom/page_copy.py)."""
    _screen.name = str(text)
    _screen.order = order


def screen_name(clear: bool = False) -> str | None:
    """The name this page run gave its screen (class_label), or None; clear=True forgets it (a new run)."""
    name = getattr(_screen, "name", None)
    if clear:
        _screen.name = _screen.order = _screen.passing = None
    return name


def not_a_screen() -> None:
    """This page run is on its way to the next (Run to end's progress bar, before it draws the last step again):
    a class keeps no frame of it."""
    _screen.passing = True


def screen_passing() -> bool:
    return bool(getattr(_screen, "passing", None))


def screen_order() -> tuple[str, int] | None:
    """The (run, step) this page run gave its screen (class_label), or None."""
    return getattr(_screen, "order", None)
