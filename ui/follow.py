"""Follow, on the page: the lecturer's panel and class bar, the student's live view, and fork.

The thinking is engine/follow (codes, caps, the shared record); this module only places it:

    lecturer_panel   sidebar: the "lecturer key" field and "Start a class"; then the link, its QR, End class
    class_bar        step page, for the lecturer: publish this screen to the class; the link, followers, QR
    follower_page    /?follow=CODE: the lecturer's current step, updating by itself; own view, layer, head; Fork
    follow_route     app.py: a ?follow= link on any page opens the follower's page

The key is read once, by "Start a class", and then cleared from the session: what drives the class
afterwards is a random token the page never shows. A follower's update reads the shared record
(no forward pass): the page draws the student's pickers, and one fragment (_live) draws the step,
waits on the server for the lecturer's next change and reruns only itself.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from html import escape as plain_html
from pathlib import Path
from urllib.parse import urlsplit

import streamlit as st

from engine.draw.stage import caption, stage_html, stage_svg
from engine.draw.warm import blank_figure
from engine.follow import Classroom, Refused, StoreDown
from engine.follow.classroom import NO_CLASS, normalize
from engine.follow.share import Publisher, qr_data_uri
from engine.share import read_link
from ui.controller import Controller
from ui.links import apply_values, link_values
from ui.sidebar import DEFAULTS
from ui.style import COMPACT_CSS
from ui.text import error, plain, warning

ROOT = Path(__file__).resolve().parent.parent
STEP_PAGE = str(ROOT / "pages" / "step_through.py")
FOLLOW_PATH = "follow"  # the follower's page (app.py registers it, hidden from the sidebar's list)
CHECK_S = max(0.02, float(os.environ.get("DECODE_LAB_FOLLOW_CHECK_S", "0.1") or 0.1))  # a follower reads the version
WAIT_S = 30.0  # ... for this long within one run of the live part; then it is drawn again and waits again
PRESENCE_EVERY_S = 5.0  # how often a follower says it is still there


@st.cache_resource(show_spinner=False)
def classroom() -> Classroom:
    """The server's classes: in this process, or in Redis when DECODE_LAB_REDIS_URL is set (one per server)."""
    return Classroom.from_settings(sys.argv[1:])


def who() -> str:
    """This browser session, for rate limits and the follower count (random; names nobody)."""
    return st.session_state.setdefault("follow_who", secrets.token_hex(8))


def follow_link(code: str) -> str:
    """The link students open: this server's address (as the lecturer's browser reached it) + ?follow=CODE.

    DECODE_LAB_PUBLIC_URL overrides the address, e.g. when the lecturer's own browser uses localhost.
    """
    base = os.environ.get("DECODE_LAB_PUBLIC_URL", "").strip()
    if not base:
        parts = urlsplit(st.context.url or "")
        base = f"{parts.scheme or 'http'}://{parts.netloc}" if parts.netloc else ""
    return f"{base.rstrip('/')}/?follow={code}"


def _local(link: str) -> bool:
    host = urlsplit(link).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


# ------------------------------------------------------------------ the router's part


def follow_route(current, follow_page) -> bool:
    """app.py, after st.navigation: a ?follow=CODE link opens the follower's page. True on that page."""
    if "follow" in st.query_params:
        st.session_state["link_read"] = True  # a follow link carries no settings to apply
        if current.url_path != FOLLOW_PATH:
            st.switch_page(follow_page, query_params={"follow": st.query_params.get("follow", "")})
    return current.url_path == FOLLOW_PATH


# ------------------------------------------------------------------ the lecturer


def _start() -> None:
    key = st.session_state.get("follow_key", "")
    st.session_state["follow_key"] = ""  # the key is not kept: the page holds only the class's token from here on
    try:
        lecture = classroom().start(key, who())
    except (Refused, StoreDown) as e:
        st.session_state["follow_msg"] = str(e)
        return
    st.session_state["follow_lead"] = lecture
    st.session_state["follow_pub"] = Publisher(classroom(), lecture)


def _end() -> None:
    lecture = st.session_state.pop("follow_lead", None)
    st.session_state.pop("follow_pub", None)
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
    lecture = st.session_state.get("follow_lead")
    box = where.expander("Lead a class", icon=":material/cast_for_education:", expanded=lecture is not None)
    if lecture is None:
        box.text_input("lecturer key", type="password", key="follow_key", autocomplete="off",
                       help="The key the person who started the server set (DECODE_LAB_LECTURER_KEY). It drives "
                            "the class; it is never shown, never put in a link.")
        box.button("Start a class", key="follow_start", on_click=_start, type="primary")
    else:
        link = follow_link(lecture.code)
        box.markdown(f"Class **{lecture.code}**: students open")
        box.code(link, language=None, wrap_lines=True)
        box.html(_qr(link, 220))
        if _local(link):
            box.caption("This address only works on this machine: open the app by its network address, or set "
                        "DECODE_LAB_PUBLIC_URL, so that students can reach it.")
        box.caption("Your Step-through page drives the class: every student sees your current step.")
        box.button("End class", key="follow_end", on_click=_end)
    if st.session_state.get("follow_msg"):
        error(st.session_state.pop("follow_msg"), box)


def fork_values(settings, prompt: str) -> dict:
    """The settings that replay this run in a student's session (a link's values, plus device and dtype)."""
    values = link_values(settings)
    values.pop("presenter", None)  # a student's own screen keeps its own presenter mode
    return {**values, "prompt": prompt, "device": settings.device, "dtype": settings.dtype}


def class_bar(s, at: int) -> None:
    """Step page, lecturer only: publish what is on this screen, and show the class's link (never the key)."""
    lecture = st.session_state.get("follow_lead")
    pub = st.session_state.get("follow_pub")
    if lecture is None or pub is None:
        return
    ss = st.session_state
    try:
        pub.update(s, at, view=ss.get("step_view", "Attention"), layer=ss.get("step_layer") or 0,
                   head=ss.get("step_head", 0),
                   fork=fork_values(ss["settings"], s.prompt if s is not None else ss.get("step_prompt", "")))
        following = classroom().followers(lecture.code)
    except Refused as e:  # ended (idle too long): say so once and stop publishing
        ss.pop("follow_lead", None), ss.pop("follow_pub", None)
        warning(str(e))
        return
    except StoreDown as e:
        warning(str(e))
        return
    link = follow_link(lecture.code)
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.html(f'<div data-testid="dl-class-bar" style="font-size:0.95rem">Class <b>{lecture.code}</b> · follow at '
             f'<code>{plain_html(link)}</code> · {following} following</div>', width="content")
    with row.popover("QR", icon=":material/qr_code_2:"):
        st.html(_qr(link, 360))
        st.markdown(plain(link))


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
    for key in ("follow_version", "follow_at", "follow_own", "follow_view", "follow_layer", "follow_head"):
        st.session_state.pop(key, None)
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


def _fork(code: str) -> None:
    """Fork: the run up to the step shown, replayed in the student's own session, then carried on there.

    The same prompt and settings for the same steps give the same tokens; the lecturer's run is only read.
    """
    ss = st.session_state
    try:
        shared = classroom().read(code)
    except StoreDown as e:
        ss["follow_msg"] = str(e)
        return
    if shared is None or shared.run is None:
        return  # ended, or nothing to fork yet: the page says so
    at = max(0, min(int(ss.get("follow_at", shared.at)), shared.latest()))
    fork = dict(shared.fork)
    values, problems = read_link({k: v for k, v in fork.items() if k not in ("prompt", "device", "dtype")})
    ss.update(DEFAULTS)  # start from the defaults, so nothing of the student's own settings lingers
    values["prompt"] = fork.get("prompt", "")
    ss["link_problems"] = apply_values(values, problems)
    ss["side_device"], ss["side_dtype"] = fork.get("device", "auto"), fork.get("dtype", "auto")
    step_page = Controller("step", make=None)
    step_page.reset()
    step_page.queue_replay(at, at)  # the step page replays it once its settings are the fork's
    ss["step_view"] = ss.get("follow_view", "Attention")
    ss["step_layer"], ss["step_head"] = ss.get("follow_layer", 0), ss.get("follow_head", 0)
    try:
        classroom().leave(ss.get("follow_code", ""), who())
    except StoreDown:
        pass
    ss.pop("follow_code", None)
    ss["follow_forked"] = True


def _shown() -> tuple:
    """What the student chose inside the live part (the scrubber, a view's switches): when it differs from what is
    drawn, the student clicked, and the live part draws at once instead of waiting for the lecturer."""
    ss = st.session_state
    return ss.get("follow_look"), bool(ss.get("follow_att_every")), bool(ss.get("follow_att_assembled"))


def _look(step: int, lecturer_at: int) -> None:
    """The scrubber's buttons: look at `step` (the lecturer's own step means live again)."""
    st.session_state["follow_look"] = None if step == lecturer_at else step


def _adopt(shared) -> bool:
    """The lecturer moved: the scrubber goes where the lecturer is, and untouched pickers follow.

    True when a picker's value changed: the pickers are drawn with the page, so the page must run again.
    """
    ss = st.session_state
    if ss.get("follow_version") == shared.version:
        return False
    ss["follow_version"], ss["follow_at"], ss["follow_look"] = shared.version, shared.at, None
    own, moved = ss.setdefault("follow_own", set()), False
    for name, value in (("view", shared.view), ("layer", shared.layer), ("head", shared.head)):
        if name not in own and ss.get(f"follow_{name}") != value:
            ss[f"follow_{name}"], moved = value, True
    return moved


def _pickers(shared, code: str) -> None:
    """The student's own Fork, layer, head and view: drawn with the page (they change only when the student
    picks, or when the lecturer's picks move untouched ones), so a step redraws none of them."""
    from ui.follow_views import VIEWS

    ss = st.session_state
    own = ss.setdefault("follow_own", set())
    spec = shared.spec
    layers = spec.layers if spec is not None else len(shared.traces[0].layers)
    heads = spec.heads if spec is not None else 1
    ss["follow_layer"] = max(0, min(int(ss.get("follow_layer") or 0), layers - 1))
    ss["follow_head"] = max(0, min(int(ss.get("follow_head") or 0), heads - 1))
    if ss.get("follow_view") not in VIEWS:
        ss["follow_view"] = VIEWS[0]
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.button("Fork", key="follow_fork", icon=":material/call_split:", on_click=_fork, args=(code,),
               help="Continue this run on your own from the step shown: the same prompt and settings are replayed "
                    "in your session, so the tokens match the lecturer's; the lecturer's run is not touched.")
    if layers <= 12:
        row.segmented_control("layer", list(range(layers)), key="follow_layer", format_func=lambda x: f"layer {x}",
                              label_visibility="collapsed", on_change=own.add, args=("layer",))
    else:
        row.number_input("layer", 0, layers - 1, key="follow_layer", width=100, on_change=own.add, args=("layer",))
    row.selectbox("head", list(range(heads)), key="follow_head", format_func=lambda h: f"head {h}", width=120,
                  label_visibility="collapsed", on_change=own.add, args=("head",),
                  help="The head whose attention the stage draws")
    row.radio("view", VIEWS, key="follow_view", horizontal=True, label_visibility="collapsed",
              on_change=own.add, args=("view",))
    ss["follow_page_run"] = shared.run


def _wait(code: str, version) -> None:
    """Wait for the lecturer: read the class's version every CHECK_S, for up to WAIT_S; a change draws it.

    A long poll on the server instead of the browser asking twice a second: every run costs the browser
    a redraw, and thirty students' browsers would spend a whole core on asking. Reading st.session_state
    is a Streamlit yield point, so a click of the student's own (a view, a layer) stops the wait at once.
    """
    ss = st.session_state
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        ss.get("follow_code")  # a yield point: this student's own click preempts the wait
        try:
            now = classroom().version(code)
            if time.monotonic() - ss.get("follow_seen", 0.0) > PRESENCE_EVERY_S:
                ss["follow_seen"] = time.monotonic()
                classroom().seen(code, who())
        except StoreDown:
            now = version  # unreachable for now: keep waiting
        if now != version:
            st.rerun(scope="fragment")
        time.sleep(CHECK_S)


def follower_page() -> None:
    """/?follow=CODE: the lecturer's current step, live; the student's own view, layer and head; Fork."""
    ss = st.session_state
    if ss.pop("follow_forked", False):
        st.switch_page(STEP_PAGE)
    st.markdown(COMPACT_CSS, unsafe_allow_html=True)  # a follower's frame has no sidebar settings to draw it
    raw = st.query_params.get("follow", "")
    title = st.empty()  # the heading goes above a refusal, and only where no class is shown
    code = _join(raw) if raw else None
    if code is None:
        title.subheader("Follow the lecturer")
        st.caption("Open the link on the projector, or type the class code it shows.")
        _code_box()
        return
    if ss.get("follow_msg"):
        error(ss.pop("follow_msg"))
    try:
        shared = classroom().read(code)
    except StoreDown as e:
        error(str(e))
        shared = False
    if shared is None:
        error("This class has ended (or its code is no longer valid). " + NO_CLASS.split(": ", 1)[-1])
        ss.pop("follow_code", None)
        _code_box()
        return
    ss.pop("follow_page_run", None)
    if shared and shared.run is not None and shared.traces:
        _adopt(shared)
        _pickers(shared, code)
    ss["follow_inline"] = True
    _live(code)


@st.fragment(run_every=1.0)
def _live(code: str) -> None:
    """What changes with each of the lecturer's steps, in a fragment: only it is sent again when the lecturer
    moves, so a student's browser redraws only what moved (thirty tabs follow each click).

    A run draws, then waits server-side for the lecturer's next change, which reruns only this fragment. The
    page's own run draws it and ends (a fragment cannot rerun itself during a page run), and so does a run of
    the student's own click here (it may draw fewer elements than the last; the ones left over go only when a
    run ends): the timer (run_every) then starts the next wait, within a second. A wait that starts late still
    sees a change it missed (it compares with the version drawn). Streamlit queues a timer's tick while the
    fragment runs; a slow timer sends fewer of them.
    """
    ss = st.session_state
    if ss.get("follow_forked"):
        st.rerun()  # Fork was pressed: the page switches to the student's own step page
    inline = ss.pop("follow_inline", False)
    clicked = _shown() != ss.get("follow_shown")
    with st.container(key="follow_live"):
        version = _draw_live(code)
    ss["follow_shown"] = _shown()
    if version is None:
        time.sleep(1.0)  # the store is unreachable (the page says so): try again in a second
    elif not inline and not clicked:
        _wait(code, version)


def _draw_live(code: str) -> int | None:
    """Draw the lecturer's current step (or the one the student scrubbed to); returns the class's version drawn."""
    from ui.follow_views import once, show_view  # the views import plotly: only a follower needs them

    ss = st.session_state
    try:
        shared = classroom().read(code)
    except StoreDown as e:
        error(str(e))
        return None
    if shared is None or (shared.run is not None and shared.traces and ss.get("follow_page_run") != shared.run):
        st.rerun()  # ended, or a new run (Prefill, Reset, another model): the page draws its pickers again
    if _adopt(shared):
        st.rerun()  # the lecturer's view, layer or head moved untouched pickers: they are drawn with the page
    if shared.run is None or not shared.traces:
        st.markdown(f"**Following class {code}** · live")
        st.info("The lecturer has not pressed Prefill yet: this page shows each step as soon as it is taken.")
        with st.container(key="step_warm"):  # out of sight (ui/style.py CSS): the browser loads its chart library now
            st.plotly_chart(blank_figure(), key="follow_warm_chart", config={"staticPlot": True})
        return shared.version
    latest = shared.latest()
    look = ss.get("follow_look")
    at = shared.at if look is None else max(0, min(int(look), latest))
    ss["follow_at"] = at  # the step shown (Fork replays up to it)
    where = "**live**" if at == shared.at else f"looking back: the lecturer is at step **{shared.at}**"
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    row.markdown(f"**Following class {code}** · " + plain(shared.model) + f" · {where}", width="content")
    # The scrubber is buttons, not a slider: the lecturer's next change sets where a student looks, and a value
    # set from here on a widget can cross, in the browser, with a timer's run still carrying the old one.
    row.button("", key="follow_earlier", icon=":material/chevron_left:", on_click=_look, args=(at - 1, shared.at),
               disabled=at <= 0, help="One step back in the lecturer's run")
    row.button("", key="follow_later", icon=":material/chevron_right:", on_click=_look, args=(at + 1, shared.at),
               disabled=at >= latest, help="One step forward")
    row.button("Live", key="follow_back_live", icon=":material/sensors:", on_click=_look,
               args=(shared.at, shared.at), disabled=at == shared.at,
               help="Back to the lecturer's step (the lecturer's next change also brings you back)")
    layer, head = int(ss.get("follow_layer") or 0), int(ss.get("follow_head") or 0)
    t = shared.traces[at]
    layer = max(0, min(layer, len(t.layers) - 1))
    left, right = st.columns([3, 2], gap="medium")
    with left:
        picture = once((code, shared.run, at, "stage", layer, head), lambda: stage_html(
            stage_svg(t, shared.pieces(), shared.prompt_len, layer=layer, head=head), caption(t)))
        drawn = int(time.time() * 1000)  # when this server drew it: tests/load_follow.py splits server from browser
        st.html(f'<div data-testid="dl-follow-stage" data-step="{at}" data-drawn="{drawn}" '
                f'style="width:100%;min-width:0">{picture}</div>')  # the stage's own box scrolls on a phone
        st.html(f'<div class="dl-text" data-testid="dl-text">{plain_html(shared.texts[at])}</div>')
    with right:
        new_tokens = len(shared.generated_ids)
        st.markdown(f"**{new_tokens} new token{'s' if new_tokens != 1 else ''}** · step **{at}** of {latest} "
                    f"({t.phase}) · KV cache **{t.kv_bytes:,} bytes**"
                    + (f" · stopped: **{plain(shared.stop_reason)}**" if shared.done else ""))
        show_view(ss.get("follow_view", "Attention"), shared, at, layer, head, (code, shared.run))
    return shared.version
