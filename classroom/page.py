"""Follow, on the page: the lecturer's panel and class bar, the student's live view, and fork.

The thinking is classroom (codes, caps, the shared record, the hub that pushes each version); this
module only places it:

    lecturer_panel   sidebar: the "lecturer key" and "Start a class" (the key again, after a reload, gives the
                     same class back); then the link, its QR, End class
    class_bar        step page, for the lecturer: publish this screen to the class; the link, followers, QR; the poll
    follower_page    /?follow=CODE: join, then the live view (classroom/follow.js), which updates itself with no script run
    follow_route     app.py: a ?follow= link on any page opens the follower's page
    back_to_class    app.py: on every page of a student who forked, a link back to the class's live screen

The key is read once, by "Start a class", and then cleared from the session: what drives the class
afterwards is a random token the page never shows. Other pages are published by classroom/page_copy.py.
"""

from __future__ import annotations

import os
import re
import secrets
from html import escape as plain_html
from pathlib import Path
from urllib.parse import urlsplit

import streamlit as st

from classroom import Refused, StoreDown, server
from classroom import page_poll as poll
from classroom.lectures import NO_CLASS, normalize
from classroom.page_copy import publishes_itself
from classroom.publisher import Publisher, qr_data_uri
from topics.ladder.page_ladder import latency_claim
from ui.link_codec import read_link
from ui.links import apply_values, link_values
from ui.sidebar import DEFAULTS
from ui.step_state import STEP_PAGE, prompt_on_screen, replay_steps, view_on_screen
from ui.style import COMPACT_CSS
from ui.text import error, plain, warning

ROOT = Path(__file__).resolve().parent.parent
FOLLOW_PATH = "follow"  # the follower's page (app.py registers it, hidden from the sidebar's list)
HERE = Path(__file__).resolve().parent
LIVE = st.components.v2.component("decode_lab_follow", html="", css=(HERE / "follow.css").read_text(),
                                  js=(HERE / "follow.js").read_text(), isolate_styles=False)

classroom = server.classroom  # this server's classes: in this process, or in Redis (DECODE_LAB_REDIS_URL)


def who() -> str:
    """This browser session, for rate limits, the follower count and votes (random; names nobody)."""
    return st.session_state.setdefault("follow_who", secrets.token_hex(8))


def class_address(public_url: str, headers, browser_url: str | None, base_path: str = "") -> str:
    """Where students reach this server, as a link's start ("" when nothing says).

    DECODE_LAB_PUBLIC_URL (`public_url`) wins. Else the request's host: the one a proxy says it was asked for
    (X-Forwarded-Host, X-Forwarded-Proto), else the Host header the lecturer's browser sent, else the address in the
    browser's bar; with the server's base path (server.baseUrlPath), so a server behind a path keeps it."""
    if public_url.strip():
        return public_url.strip().rstrip("/")
    seen = urlsplit(browser_url or "")

    def header(name: str) -> str:
        return (headers.get(name) or "").split(",")[0].strip()

    host = header("X-Forwarded-Host") or header("Host") or seen.netloc
    if _loopback(host) and seen.netloc and not _loopback(seen.netloc):
        host = seen.netloc  # a proxy that passed on its own upstream address: the browser's bar says where it is
    if not host or not HOST_RE.match(host):
        return ""
    scheme = header("X-Forwarded-Proto") or seen.scheme or "http"
    scheme = scheme if scheme in ("http", "https") else "http"
    path = "/".join(part for part in base_path.split("/") if part)
    return f"{scheme}://{host}" + (f"/{path}" if path else "")


HOST_RE = re.compile(r"^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")  # a host[:port], nothing else


def follow_link(code: str) -> str:
    """The link students open: this server's address as the lecturer's request reached it + /?follow=CODE
    (`class_address`). DECODE_LAB_PUBLIC_URL overrides it, e.g. when the lecturer's own browser uses localhost."""
    base = class_address(os.environ.get("DECODE_LAB_PUBLIC_URL", ""), st.context.headers, st.context.url,
                         str(st.get_option("server.baseUrlPath") or ""))
    return f"{base}/?follow={code}"


def _loopback(netloc: str) -> bool:
    host = urlsplit(f"//{netloc}").hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def _local(link: str) -> bool:
    """The link names this machine (or no machine at all): students on other machines cannot open it."""
    netloc = urlsplit(link).netloc
    return not netloc or _loopback(netloc)


# ------------------------------------------------------------------ the router's part


def follow_route(current, follow_page) -> bool:
    """app.py, after st.navigation: a ?follow=CODE link opens the follower's page. True on that page."""
    if "follow" in st.query_params:
        st.session_state["link_read"] = True  # a follow link carries no settings to apply
        if current.url_path != FOLLOW_PATH:
            st.switch_page(follow_page, query_params={"follow": st.query_params.get("follow", "")})
    following = current.url_path == FOLLOW_PATH
    if following:
        st.session_state.pop("follow_forked_from", None)  # back with the class: no way back to show any more
    return following


BACK_LABEL = "Back to the class"


def back_to_class(follow_page) -> None:
    """app.py, on every page of a student who forked: one link back to the class's live screen (the follow link
    again: the same code, the live view at the lecturer's newest step). Nothing once the class has ended."""
    code = st.session_state.get("follow_forked_from")
    if not code:
        return
    try:
        running = classroom().version(code) is not None
    except StoreDown:
        running = True  # unreachable for now: the link still leads back, and says so there if it must
    if not running:
        st.session_state.pop("follow_forked_from", None)
        return
    # no help tooltip: the link appears where Fork was clicked, and a tooltip under the pointer would cover the bar
    st.page_link(follow_page, label=f"{BACK_LABEL} {code}: the lecturer's live step", icon=":material/arrow_back:",
                 query_params={"follow": code})


# ------------------------------------------------------------------ the lecturer


def _start(new: bool = False) -> None:
    ss = st.session_state
    key = ss.get("follow_key", "")
    ss["follow_key"] = ""  # the key is not kept: the page holds only the class's token from here on
    try:
        lecture = classroom().start(key, who(), new=new)
        ss["follow_resumed_with"] = classroom().followers(lecture.code) if lecture.resumed else 0  # counted once
    except (Refused, StoreDown) as e:
        ss["follow_msg"] = str(e)
        return
    ss["follow_lead"] = lecture
    ss["follow_pub"] = Publisher(classroom(), lecture)
    ss.pop("follow_q", None)


def _end() -> None:
    lecture = st.session_state.pop("follow_lead", None)
    st.session_state.pop("follow_pub", None)
    st.session_state.pop("follow_q", None)
    if lecture is not None:
        try:
            classroom().end(lecture)
        except (Refused, StoreDown):
            pass  # ended already, or unreachable: it expires by itself


def _qr(link: str, width: int) -> str:
    return (f'<img data-testid="dl-follow-qr" alt="QR code of the follow link" src="{qr_data_uri(link)}" '
            f'style="width:{width}px;max-width:100%;image-rendering:pixelated"/>')


def lecturer_panel(where) -> None:
    """Sidebar: lead a class (only when the server has a lecturer key)."""
    room = classroom()
    if not room.enabled:
        return
    ss = st.session_state
    lecture = ss.get("follow_lead")
    box = where.expander("Lead a class", icon=":material/cast_for_education:", expanded=lecture is not None)
    if lecture is None or ss.get("follow_again"):
        # one form: the key and the click reach the server together. Typed into a plain box, the key reran the page
        # when the box lost focus, and the Start click that took the focus could land in that rerun and be lost
        form = box.form("follow_start_form", border=False)
        form.text_input("lecturer key", type="password", key="follow_key", autocomplete="off",
                        help="The key the person who started the server set (DECODE_LAB_LECTURER_KEY). It drives "
                             "the class; it is never shown, never put in a link. After a reload, type it again: "
                             "your class comes back with the same code.")
        if ss.get("follow_again"):
            form.form_submit_button("Start a new class", key="follow_start_new", type="primary", on_click=_start_new)
        else:
            form.form_submit_button("Start a class", key="follow_start", on_click=_start, type="primary",
                                    help="Opens a class, or gives you back the one running (same code, students "
                                         "still there)")
    else:
        link = follow_link(lecture.code)
        box.markdown(f"Class **{lecture.code}**: students open")
        if lecture.resumed:
            following = ss.get("follow_resumed_with", 0)  # as the class stood when the key brought it back
            box.caption(f"Class {lecture.code} was running: you lead it again"
                        + (f", and {following} student{'s still follow' if following != 1 else ' still follows'} it."
                           if following
                           else ", and no student follows it now."))
        box.code(link, language=None, wrap_lines=True)
        box.html(_qr(link, 220))
        if _local(link):  # said only when the lecturer's own address names this machine, or no address is known
            box.caption("This address only works on this machine: open the app by its network address, or set "
                        "DECODE_LAB_PUBLIC_URL, so that students can reach it.")
        box.caption("Every page you open drives the class: students see your current step, lesson or round.")
        row = box.container(horizontal=True)
        row.button("End class", key="follow_end", on_click=_end)
        if lecture.resumed:
            row.button("Start a new class", key="follow_new", on_click=lambda: ss.update(follow_again=True),
                       help="Type the key once more: a new code (the running class stays until it idles out)")
    if ss.get("follow_msg"):
        error(ss.pop("follow_msg"), box)


def _start_new() -> None:
    st.session_state.pop("follow_again", None)
    _start(new=True)


def fork_values(settings, prompt: str) -> dict:
    """The settings that replay this run in a student's session (a link's values, plus device and dtype)."""
    values = link_values(settings)
    values.pop("presenter", None)  # a student's own screen keeps its own presenter mode
    return {**values, "prompt": prompt, "device": settings.device, "dtype": settings.dtype}


def _stop_leading(message: str) -> None:
    ss = st.session_state
    for key in ("follow_lead", "follow_pub", "follow_q"):
        ss.pop(key, None)
    warning(message)


def class_bar(s, at: int) -> None:
    """Step page, lecturer only: publish what is on this screen, and show the class's link (never the key)."""
    ss = st.session_state
    lecture, pub = ss.get("follow_lead"), ss.get("follow_pub")
    if lecture is None or pub is None:
        return
    publishes_itself()  # (classroom/page_copy.py makes no frame of this page)
    hold = poll.held(s, at)
    picks = view_on_screen()
    said = latency_claim(s.lm) if s is not None else None  # as show_view says it: sent whatever the lecturer's view,
    # for a tab may look at Latency first, and its picture is built once per step
    try:
        pub.update(s, at, **picks,
                   fork=fork_values(ss["settings"], s.prompt if s is not None else prompt_on_screen()),
                   hold=hold, latency_claim=said or "")
    except Refused as e:  # ended (idle too long), or another page leads it now: say so once and stop publishing
        _stop_leading(str(e))
        return
    except StoreDown as e:
        warning(str(e))
        return
    link = follow_link(lecture.code)
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.html(f'<div data-testid="dl-class-bar" style="font-size:0.95rem">Class <b>{lecture.code}</b> · follow at '
             f'<code>{plain_html(link)}</code> ·</div>', width="content")
    with row:
        _following(lecture.code)
    with row.popover("QR", icon=":material/qr_code_2:"):
        st.html(_qr(link, 360))
        st.markdown(plain(link))
    poll.ask_buttons(row)
    poll.panel()


@st.fragment(run_every=5.0)
def _following(code: str) -> None:
    """'N following', read again every 5 s: a student who joins is counted without the lecturer's next click."""
    try:
        n = classroom().followers(code)
    except StoreDown:
        return
    st.html(f'<div data-testid="dl-class-following" style="font-size:0.95rem">{n} following</div>', width="content")


# ------------------------------------------------------------------ the student


def _join(raw: str) -> str | None:
    """The class this session follows, joined once per code; a plain message (and None) when refused."""
    code = normalize(raw)
    if st.session_state.get("follow_code") == code:
        return code
    try:
        code = classroom().join(raw, who())
    except (Refused, StoreDown) as e:
        error(str(e))
        return None
    st.session_state["follow_code"] = code
    return code


def _code_box(prefill: str = "") -> None:
    """Type a class code (from the projector) instead of opening the link."""
    st.session_state.setdefault("follow_typed", prefill)
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    row.text_input("class code", key="follow_typed", max_chars=12, width=200, placeholder="e.g. K7QX2M")
    if row.button("Follow", key="follow_go", type="primary"):
        st.query_params["follow"] = normalize(st.session_state.get("follow_typed", ""))[:12]
        st.session_state.pop("follow_code", None)
        st.rerun()


def _fork_clicked() -> None:
    """The live view's Fork (a trigger value {run, at}): the page forks the step the student looks at."""
    asked = (st.session_state.get("follow_live") or {}).get("fork")
    if isinstance(asked, dict):
        st.session_state["follow_fork"] = asked


def fork(code: str, at, run: str | None = None) -> None:
    """Fork: the run up to step `at`, replayed in the student's own session, then carried on there.

    The same prompt and settings for the same steps give the same tokens; the lecturer's run is only read.
    """
    ss = st.session_state
    try:
        shared = classroom().read(code)
    except StoreDown as e:
        ss["follow_msg"] = str(e)
        return
    if shared is None or shared.run is None or not shared.records:
        ss["follow_msg"] = "There is no run to fork yet: wait for the lecturer's Prefill."
        return
    if run is not None and run != shared.run:
        ss["follow_msg"] = "The lecturer has started another run since that step: fork one of its steps instead."
        return
    try:
        at = max(0, min(int(at), shared.latest()))
    except (TypeError, ValueError):
        at = shared.latest()
    fork_d = dict(shared.fork)
    values, problems = read_link({k: v for k, v in fork_d.items() if k not in ("prompt", "device", "dtype")})
    ss.update(DEFAULTS)  # start from the defaults, so nothing of the student's own settings lingers
    values["prompt"] = fork_d.get("prompt", "")
    ss["link_problems"] = apply_values(values, problems)
    ss["side_device"], ss["side_dtype"] = fork_d.get("device", "auto"), fork_d.get("dtype", "auto")
    replay_steps(at)  # the step page replays it once its settings are the fork's
    try:
        classroom().leave(code, who())
    except StoreDown:
        pass
    ss.pop("follow_code", None)
    ss["follow_forked"] = True
    ss["follow_forked_from"] = code  # every page shows the way back (back_to_class)


def follower_page() -> None:
    """/?follow=CODE: join once, then the live view, which follows the lecturer with no script run of its own."""
    ss = st.session_state
    if ss.pop("follow_forked", False):
        st.switch_page(STEP_PAGE)
    st.markdown(COMPACT_CSS, unsafe_allow_html=True)  # a follower's frame has no sidebar settings to draw it
    raw = st.query_params.get("follow", "")
    title = st.empty()  # the heading goes above a refusal, and only where no class is shown
    code = _join(raw) if raw else None
    if code is None:
        title.subheader("Follow the lecturer")
        if not classroom().enabled:  # no class can run here: say so before a student types a code in vain
            st.info("Follow is off on this server: no class can be started here, so no code will join one. The "
                    "other pages work as usual.")
            return
        st.caption("Open the link on the projector, or type the class code it shows.")
        _code_box()
        return
    asked = ss.pop("follow_fork", None)
    if isinstance(asked, dict):
        fork(code, asked.get("at"), asked.get("run"))
        if ss.pop("follow_forked", False):
            st.switch_page(STEP_PAGE)
    if ss.get("follow_msg"):
        error(ss.pop("follow_msg"))
    try:
        running = classroom().version(code) is not None
    except StoreDown as e:
        error(str(e))
        running = True
    if not running:
        error("This class has ended (or its code is no longer valid). " + NO_CLASS.split(": ", 1)[-1])
        ss.pop("follow_code", None)
        _code_box()
        return
    LIVE(key="follow_live", data={"code": code, "who": who()}, on_fork_change=_fork_clicked)
