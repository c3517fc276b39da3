"""Follow, on the page: the lecturer's panel and class bar, the student's live view, and fork.

The thinking is engine/follow (codes, caps, the shared record); this module only places it:

    lecturer_panel   sidebar: the "lecturer key" field and "Start a class"; then the link, its QR, End class
    class_bar        step page, for the lecturer: publish this screen to the class; the link, followers, QR
    follower_page    /?follow=CODE: the lecturer's current step, updating by itself; own view, layer, head; Fork
    follow_route     app.py: a ?follow= link on any page opens the follower's page

The key is read once, by "Start a class", and then cleared from the session: what drives the class
afterwards is a random token the page never shows. A follower's update reads the shared record
(no forward pass); a small fragment polls the class's version and reruns the page when it changes.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import streamlit as st

from engine.draw.stage import caption, stage_html, stage_svg
from engine.draw.warm import blank_figure
from engine.follow import Classroom, Refused, StoreDown
from engine.follow.classroom import NO_CLASS, normalize
from engine.follow.share import Publisher, qr_data_uri
from engine.share import make_link, read_link
from ui.frame import COMPACT_CSS, DEFAULTS, apply_values, error, plain, warning

ROOT = Path(__file__).resolve().parent.parent
STEP_PAGE = str(ROOT / "pages" / "step_through.py")
FOLLOW_PATH = "follow"  # the follower's page (app.py registers it, hidden from the sidebar's list)
CHECK_S = max(0.02, float(os.environ.get("DECODE_LAB_FOLLOW_CHECK_S", "0.1") or 0.1))  # a follower reads the version
WAIT_S = 10.0  # ... for this long within one run of its watcher; then the watcher starts again
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
    sp = settings.sampling
    return {**make_link({"model": settings.source, "rule": "greedy" if sp.greedy else "sample",
                         "temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
                         "repetition_penalty": sp.repetition_penalty, "seed": sp.seed,
                         "max_new_tokens": settings.max_new_tokens, "stop": ",".join(settings.stop_strings),
                         "cache": "on" if settings.use_cache else "off"}),
            "prompt": prompt, "device": settings.device, "dtype": settings.dtype}


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


def plain_html(text: str) -> str:
    import html

    return html.escape(text, quote=True)


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


def _fork(shared, at: int) -> None:
    """Fork: this run up to step `at`, replayed in the student's own session, then carried on there.

    The same prompt and settings for the same steps give the same tokens; the lecturer's run is only read.
    """
    ss = st.session_state
    fork = dict(shared.fork)
    values, problems = read_link({k: v for k, v in fork.items() if k not in ("prompt", "device", "dtype")})
    ss.update(DEFAULTS)  # start from the defaults, so nothing of the student's own settings lingers
    values["prompt"] = fork.get("prompt", "")
    ss["link_problems"] = apply_values(values, problems)
    ss["side_device"], ss["side_dtype"] = fork.get("device", "auto"), fork.get("dtype", "auto")
    old = ss.pop("step_stepper", None)
    if old is not None:
        old.free()
    ss["step_replay"], ss["step_at_wanted"] = at, at
    ss["step_view"] = ss.get("follow_view", "Attention")
    ss["step_layer"], ss["step_head"] = ss.get("follow_layer", 0), ss.get("follow_head", 0)
    try:
        classroom().leave(ss.get("follow_code", ""), who())
    except StoreDown:
        pass
    ss.pop("follow_code", None)
    ss["follow_forked"] = True


@st.fragment(run_every=0.2)
def _watch(code: str, version: int) -> None:
    """Wait for the lecturer: read the class's version every CHECK_S, for up to WAIT_S; a change reruns the page.

    One run of this fragment waits server-side (a long poll) instead of the browser asking twice a
    second: each fragment run costs the browser a redraw (~20-40 ms of its main thread), and thirty
    students' browsers would spend a whole core on asking. The timer (run_every) only starts the
    next wait, soon after a page run: Streamlit queues a fragment's timer tick while the fragment
    runs. Reading st.session_state is a Streamlit yield point, so a click of the student's own (a
    view, a layer) stops the wait at once.
    """
    ss = st.session_state
    if ss.pop("follow_inline", False):
        return  # drawn with the page: the timer starts the wait, so that the page run itself ends now
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
            st.rerun()
        time.sleep(CHECK_S)


def follower_page() -> None:
    """/?follow=CODE: the lecturer's current step, live; the student's own view, layer and head; Fork."""
    from ui.follow_views import VIEWS, once, show_view  # the views import plotly: only a follower needs them

    if st.session_state.pop("follow_forked", False):
        st.switch_page(STEP_PAGE)
    ss = st.session_state
    st.markdown(COMPACT_CSS, unsafe_allow_html=True)  # a follower's frame has no sidebar settings to draw it
    raw = st.query_params.get("follow", "")
    title = st.empty()  # the heading goes above a refusal, and only where no class is shown
    code = _join(raw) if raw else None
    if code is None:
        title.subheader("Follow the lecturer")
        st.caption("Open the link on the projector, or type the class code it shows.")
        _code_box()
        return
    try:
        shared = classroom().read(code)
    except StoreDown as e:
        error(str(e))
        ss["follow_inline"] = True
        _watch(code, -1)
        return
    if shared is None:
        error("This class has ended (or its code is no longer valid). " + NO_CLASS.split(": ", 1)[-1])
        ss.pop("follow_code", None)
        _code_box()
        return
    own = ss.setdefault("follow_own", set())
    live = ss.get("follow_version") != shared.version
    if live:  # the lecturer moved: the scrubber goes where the lecturer is; untouched pickers follow too
        ss["follow_version"], ss["follow_at"] = shared.version, shared.at
        for name, value in (("view", shared.view), ("layer", shared.layer), ("head", shared.head)):
            if name not in own:
                ss[f"follow_{name}"] = value
    top = st.container(horizontal=True, vertical_alignment="center", gap="small")
    if shared.run is None or not shared.traces:
        top.markdown(f"**Following class {code}** · live")
        st.info("The lecturer has not pressed Prefill yet: this page shows each step as soon as it is taken.")
        with st.container(key="step_warm"):  # out of sight (ui/frame.py CSS): the browser loads its chart library now
            st.plotly_chart(blank_figure(), key="follow_warm_chart", config={"staticPlot": True})
        ss["follow_inline"] = True
        _watch(code, shared.version)
        return
    latest = shared.latest()
    at = max(0, min(int(ss.get("follow_at", shared.at)), latest))
    ss["follow_at"] = at
    spec = shared.spec
    where = "**live**" if at == shared.at else f"looking back: the lecturer is at step **{shared.at}**"
    top.markdown(f"**Following class {code}** · " + plain(shared.model) + f" · {where}")
    top.button("Fork", key="follow_fork", icon=":material/call_split:", on_click=_fork, args=(shared, at),
               help="Continue this run on your own from the step shown: the same prompt and settings are replayed "
                    "in your session, so the tokens match the lecturer's; the lecturer's run is not touched.")
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    if latest > 0:
        row.slider("step", 0, latest, key="follow_at", label_visibility="collapsed", width=300,
                   help="The lecturer's recorded steps: the newest change of the lecturer brings you back")
    layers = spec.layers if spec is not None else len(shared.traces[at].layers)
    heads = spec.heads if spec is not None else 1
    ss["follow_layer"] = max(0, min(int(ss.get("follow_layer") or 0), layers - 1))
    ss["follow_head"] = max(0, min(int(ss.get("follow_head") or 0), heads - 1))
    if layers <= 12:
        row.segmented_control("layer", list(range(layers)), key="follow_layer", format_func=lambda x: f"layer {x}",
                              label_visibility="collapsed", on_change=own.add, args=("layer",))
    else:
        row.number_input("layer", 0, layers - 1, key="follow_layer", width=100, on_change=own.add, args=("layer",))
    row.selectbox("head", list(range(heads)), key="follow_head", format_func=lambda h: f"head {h}", width=120,
                  label_visibility="collapsed", on_change=own.add, args=("head",),
                  help="The head whose attention the stage draws")
    layer, head = int(ss.get("follow_layer") or 0), int(ss.get("follow_head") or 0)
    t = shared.traces[at]
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
        if ss.get("follow_view") not in VIEWS:
            ss["follow_view"] = VIEWS[0]
        view = st.radio("view", VIEWS, key="follow_view", horizontal=True, label_visibility="collapsed",
                        on_change=own.add, args=("view",))
        show_view(view, shared, at, layer, head, (code, shared.run))
    ss["follow_inline"] = True
    _watch(code, shared.version)
