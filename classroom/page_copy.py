"""Any other page, published to the class as the lecturer's browser was sent it: Lessons, Serving, Race, Speculative.

    with published():         app.py, around the page's run: while a lecturer leads a class, the elements the
                              page draws are kept too, and become one frame when the page is done
    ui.setup.class_label      a page's one line: what its frame is called when a student looks back
    publishes_itself()        the step page: it publishes its own frame (classroom/page.class_bar), none is made here

Every element a page draws goes to its browser as a delta at a path in the page's tree. While the page runs,
this keeps the newest element at each path of the main area; at the end the tree becomes a frame
(classroom/frames.py's blocks): markdown and tables as HTML made here, pictures as they were, charts as
plotly's JSON, a widget as its label and the value the lecturer chose (a lesson's slider at 12, the serving
scenario), nothing the lecturer could click. The lecturer's page is not changed and not slowed by more than
the copy; no follower runs it. The step page publishes itself (classroom/page.class_bar) and is left alone here.

Only a run that the page ended is the screen: one that drew to the end, or stopped itself (st.stop(), st.rerun()).
A run cut short because the lecturer moved on (a slider moved again, Next clicked again) is not: Streamlit's fast
reruns stop it and start the next run at once, in another thread, and the stopped one can reach its end after the
newer run has published, with half its elements (and, read from the shared session state, the newer widget
values). So a stopped run publishes nothing, and no run publishes once a newer run of that lecturer has begun.

Streamlit's internals are read in this one module: ScriptRunContext.enqueue, and the element protos.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import logging
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import escape

import streamlit as st
from markdown_it import MarkdownIt

from classroom import Refused, StoreDown
from classroom.frames import latex_text, md_html, table_html
from ui.setup import screen_name, screen_order, screen_passing
from ui.streamlit_internals import RUN_ENDINGS, arrow_table, script_context, widget_shown, widget_state

MAIN = 0  # a delta path's first index: the main area (1 is the sidebar)
MAX_ROWS = 60  # rows of a table sent to the class
MAX_CHART = 400_000  # characters of one chart's JSON: a bigger chart stays on the projector
WIDGETS = ("slider", "selectbox", "number_input", "radio", "text_input", "text_area", "checkbox", "multiselect",
           "button_group", "date_input", "time_input", "color_picker")
SKIPPED = ("button", "download_button", "page_link", "link_button", "progress", "spinner", "empty", "skeleton",
           "exception", "bidi_component", "component_instance", "toast", "balloons", "snow", "space", "favicon",
           "file_uploader", "camera_input", "chat_input", "audio_input", "feedback", "menu_button", "help_info",
           "iframe", "imgs", "audio", "video", "data_editor", "deck_gl_json_chart")
ALERTS = {1: "error", 2: "warn", 3: "note", 4: "note"}
_LOG = logging.getLogger(__name__)
_now = threading.local()  # the page run being kept, in its script thread (session state is not read when it ends:
#                           after st.stop() every read of it would stop again)
_RAW_MD = MarkdownIt("commonmark", {"html": True}).enable("table")  # a page's own HTML (unsafe_allow_html)
_OWN_ENDINGS = {inspect.unwrap(f).__code__ for f in (st.stop, st.rerun)}  # a page that ends its run itself
_RUN_NUMBERS = itertools.count(1)
_SEATS_LOCK = threading.Lock()


@dataclass
class _Run:
    pub: object
    kept: dict = field(default_factory=dict)
    skip: bool = False
    number: int = 0


@dataclass
class _Seat:
    """One lecturer's page runs: the newest one's number, and a lock so that "still the newest?" and its publish
    are one step (a newer run that begins meanwhile publishes after it)."""
    newest: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_seats: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # the lecturer's Publisher -> its _Seat


def _seat(pub) -> _Seat:
    with _SEATS_LOCK:
        seat = _seats.get(pub)
        if seat is None:
            seat = _seats[pub] = _Seat()
        return seat


def publishes_itself() -> None:
    run = getattr(_now, "run", None)
    if run is not None:
        run.skip = True


@contextmanager
def published(page_title: str):
    """Keep what the page draws; publish it as the class's frame when the page is done (leading a class only)."""
    pub = st.session_state.get("follow_pub")
    ctx = script_context()
    if pub is None or ctx is None:
        yield
        return
    seat = _seat(pub)
    run = _now.run = _Run(pub)
    screen_name(clear=True)  # a name given by an earlier run of this thread is not this run's
    with seat.lock:
        run.number = seat.newest = next(_RUN_NUMBERS)
    send = ctx.enqueue

    def keep(msg) -> None:
        if msg.WhichOneof("type") == "delta":
            path = tuple(msg.metadata.delta_path)
            if path and path[0] == MAIN and msg.delta.WhichOneof("type") in ("new_element", "add_block"):
                run.kept[path] = msg.delta
        send(msg)

    ctx.enqueue = keep
    finished = False
    try:
        yield
        finished = True
    except RUN_ENDINGS as e:  # the page's st.stop(), autoplay's st.rerun() after a drawn step;
        finished = _ended_by_page(e)  # or the run was stopped because the lecturer moved on: not the screen
        raise
    finally:
        ctx.enqueue = send
        _now.run = None
        if finished and run.kept and not run.skip and not screen_passing():
            with seat.lock:
                if run.number == seat.newest:
                    _publish(run, page_title)


def _ended_by_page(e: BaseException) -> bool:
    """The page called st.stop() or st.rerun() itself: its run ended where it meant to."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in _OWN_ENDINGS:
            return True
        tb = tb.tb_next
    return False


def _publish(run: _Run, page_title: str) -> None:
    nodes = _children((MAIN,), run.kept)
    if not nodes:
        return
    label = screen_name() or _first_heading(run.kept) or page_title
    nodes = _unsaid(nodes, label)
    body = json.dumps(nodes, separators=(",", ":"))
    fid = "page:" + hashlib.sha1(f"{page_title}\n{label}\n{body}".encode()).hexdigest()[:16]
    order = screen_order()
    if order is not None:  # a step of a run: its place in the timeline is in its id (classroom/lectures.py)
        fid = f"{fid}.{order[0]}:{int(order[1])}"  # (what classroom/http.py's FRAME_RE lets a tab ask for)
    try:
        run.pub.page({"id": fid, "kind": "page", "page": page_title, "label": label, "nodes": nodes})
    except (Refused, StoreDown) as e:  # the class bar says so on the lecturer's next step page
        _LOG.warning("a page was not published to the class: %s", e)


def _unsaid(nodes: list[dict], label: str) -> list[dict]:
    """The frame less what a follower's bar already says ("Following class … · live: Lessons · 4. The KV cache"):
    the page's title (its h1) and a picker showing the screen's own name (the lesson picker), which on a phone
    repeated the lesson's title four times; a row or column left empty goes with them."""
    picked = f"<b>{escape(label)}</b></div>"
    out = []
    for n in nodes:
        if (n["kind"] == "heading" and n["html"].startswith("<h1>")) or \
                (n["kind"] == "widget" and n["html"].endswith(picked)):
            continue
        if n["kind"] == "row":
            cols = [{**c, "nodes": _unsaid(c["nodes"], label)} for c in n["cols"]]
            n = {**n, "cols": [c for c in cols if c["nodes"]]}
            if not n["cols"]:
                continue
        elif n["kind"] in ("col", "group"):
            n = {**n, "nodes": _unsaid(n["nodes"], label)}
            if not n["nodes"]:
                continue
        out.append(n)
    return out


# ---------------------------------------------------------------- the page's tree, as the class's blocks


def _children(path: tuple, kept: dict) -> list[dict]:
    depth = len(path) + 1
    below = sorted(p for p in kept if len(p) == depth and p[:-1] == path)
    out = []
    for p in below:
        out += _node(p, kept[p], kept)
    return out


def _node(path: tuple, delta, kept: dict) -> list[dict]:
    if delta.WhichOneof("type") == "add_block":
        return _block(path, delta.add_block, kept)
    return _element(delta.new_element)


def _block(path: tuple, block, kept: dict) -> list[dict]:
    kind = block.WhichOneof("type")
    inside = _children(path, kept)
    if kind in ("popover", "dialog") or not inside:
        return []  # what the lecturer folded away (More, a dialog) is not the screen
    if kind == "column":
        return [{"kind": "col", "w": float(block.column.weight or 1), "nodes": inside}]
    if kind == "expandable":  # folded on a student's tab as the lecturer's page first draws it; a student may open it
        return [{"kind": "group", "label": block.expandable.label, "nodes": inside, "fold": True,
                 "open": bool(block.expandable.expanded)}]
    if kind == "tab":
        return [{"kind": "group", "label": block.tab.label, "nodes": inside}]
    horizontal = kind == "horizontal" or (kind == "flex_container" and block.flex_container.direction == 2)
    if horizontal:
        cols = [n if n["kind"] == "col" else {"kind": "col", "w": 1, "nodes": [n]} for n in inside]
        return [{"kind": "row", "cols": [{"w": c["w"], "nodes": c["nodes"]} for c in cols]}]
    return inside


def _html(kind: str, html: str) -> list[dict]:
    return [{"kind": kind, "name": "", "html": html}]


def _element(el) -> list[dict]:
    kind = el.WhichOneof("type")
    if kind in SKIPPED or kind is None:
        return []
    if kind == "markdown":
        return _markdown(el.markdown)
    if kind == "heading":
        tag = el.heading.tag if el.heading.tag in ("h1", "h2", "h3", "h4", "h5", "h6") else "h3"
        return _html("heading", f"<{tag}>{md_html(el.heading.body, inline=True)}</{tag}>")
    if kind == "alert":
        return _html(ALERTS.get(el.alert.format, "note"), md_html(el.alert.body))
    if kind == "metric":
        m = el.metric
        return _html("metrics", f'<div class="dlf-metrics"><div class="dlf-metric"><div class="dlf-metric-label">'
                                f'{escape(m.label)}</div><div class="dlf-metric-value">{escape(m.body)}</div>'
                                + (f"<div>{escape(m.delta)}</div>" if m.delta else "") + "</div></div>")
    if kind == "plotly_chart":
        spec = el.plotly_chart.spec
        if len(spec) > MAX_CHART:
            return _html("note", "<p>A large chart: see it on the projector.</p>")
        return [{"kind": "figure", "name": "", "spec": json.loads(spec)}]
    if kind == "html":
        body = el.html.body
        return [] if _only_style(body) or _only_tag(body, "script") else _html("html", body)
    if kind in ("table", "dataframe"):
        return _table(getattr(el, kind).arrow_data.data)
    if kind == "text":
        return _html("text", f"<pre>{escape(el.text.body)}</pre>")
    if kind == "code":
        return _html("code", f"<pre><code>{escape(el.code.code_text)}</code></pre>")
    if kind == "json":
        return _html("code", f"<pre>{escape(el.json.body)}</pre>")
    if kind in WIDGETS:
        return _widget(getattr(el, kind))
    return []


def _only_style(body: str) -> bool:
    return _only_tag(body, "style")


def _only_tag(body: str, tag: str) -> bool:
    """A page's own <style> or <script>, and nothing else: not the screen (a class is sent what it shows)."""
    text = body.strip()
    return text.startswith(f"<{tag}") and text.endswith(f"</{tag}>") and text.count(f"<{tag}") == 1


def _markdown(md) -> list[dict]:
    body = md.body
    if md.element_type == 5:  # divider
        return _html("html", "<hr/>")
    if md.element_type == 4:  # st.latex: no TeX renderer in a follower's tab (nothing from a CDN)
        return _html("latex", f'<div class="dlf-latex">{escape(latex_text(body.strip("$ ")))}</div>')
    if md.element_type == 3:
        return _html("code", f"<pre><code>{escape(body)}</code></pre>")
    if _only_style(body):
        return []
    html = _RAW_MD.render(body) if md.allow_html else md_html(body)
    return _html("caption" if md.element_type == 2 else "md", html)


def _table(data: bytes) -> list[dict]:
    try:
        df = arrow_table(data)
    except Exception:  # noqa: BLE001 - a table that cannot be read back is left on the projector
        return []
    more = len(df) - MAX_ROWS
    html = table_html(df.head(MAX_ROWS)) + (f"<p>… and {more} more rows on the projector</p>" if more > 0 else "")
    return _html("table", html)


def _widget(w) -> list[dict]:
    """A control, as its label and the lecturer's value (a student reads the setting; nothing to click)."""
    state = widget_state(script_context())  # read without a yield point: the page may have stopped
    key = w.id.rsplit("-", 1)[-1] if w.id.startswith("$$ID-") else "None"
    value = None
    for name in ((key, w.id) if key != "None" else (w.id,)):
        try:
            value = state[name]
            break
        except (KeyError, AttributeError, TypeError):
            continue
    if value is not None and len(getattr(w, "options", ()) or ()):  # a picker: the option as it shows it, not its key
        said = widget_shown(script_context(), w.id, value)
        if isinstance(said, str) or (isinstance(said, list) and all(isinstance(v, str) for v in said)):
            value = said
    if isinstance(value, bool):  # a toggle or a checkbox, as a person says it
        value = "on" if value else "off"
    label = escape(getattr(w, "label", "") or "")
    shown = "" if value is None else escape(", ".join(map(str, value)) if isinstance(value, (list, tuple)) else
                                           str(value))
    return _html("widget", f'<div class="dlf-widget">{label}: <b>{shown}</b></div>') if label or shown else []


def _first_heading(kept: dict) -> str | None:
    """The page's first section heading (a lesson's title), else its title."""
    headings = [kept[p].new_element.heading for p in sorted(kept) if kept[p].WhichOneof("type") == "new_element"
                and kept[p].new_element.WhichOneof("type") == "heading"]
    best = next((h for h in headings if h.tag == "h2"), headings[0] if headings else None)
    return best.body if best is not None else None
