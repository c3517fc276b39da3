"""Follow: a class watches the lecturer's run live, only the key drives it, and a fork carries on alone.

Engine units run on both stores (this process, and a real redis-server started here on loopback);
the pages with AppTest; the acceptance run in a real browser (system Chromium).
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import pytest

from classroom import Classroom, Lecture, Limits, MemoryKV, Refused, WireError, wire
from classroom.lectures import ALPHABET, CODE_RE, NO_CLASS, new_code
from classroom.publisher import Publisher, qr_data_uri
from drawing.attention import heads_figure
from drawing.kv import kv_grid_figure
from drawing.latency import latency_figure
from drawing.matmuls import matmul_frame
from drawing.palette import axis_labels
from drawing.stage import stage_svg
from drawing.tokens import next_token_figure
from engine import Stepper
from tests.appserver import KEY  # the fixtures `store` and `keyed_server`: tests/conftest.py

ROOT = Path(__file__).resolve().parent.parent


def classroom(store, **limits) -> Classroom:
    kv, clock, _ = store
    return Classroom(kv, key=KEY, limits=Limits(**limits), clock=clock)


def run(lm, steps: int = 3, **kw) -> Stepper:
    s = Stepper(lm, "Once upon a time there was a girl named Lily.", max_new_tokens=20, **kw)
    s.prefill()
    for _ in range(steps):
        s.decode()
    return s


# ---------------------------------------------------------------- the record, as JSON and back


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_trace_read_back_from_json_is_the_same_trace_and_draws_the_same_stage(bundled_lm, use_cache):
    s = run(bundled_lm, 3, use_cache=use_cache)
    pieces = s.pieces()
    for t in s.records:
        back = wire.trace_from_wire(wire.loads(wire.dumps(wire.trace_to_wire(t, text="x"))))
        assert back == t
        assert back.to_dict(attention=True) == t.to_dict(attention=True)
        for a, b in zip(back.layers, t.layers):
            assert a.shapes == b.shapes
            assert (a.pattern is None and b.pattern is None) or a.pattern.equal(b.pattern)  # bit for bit
        for layer in range(len(t.layers)):
            assert stage_svg(back, pieces, s.prompt_len, layer, 1) == stage_svg(t, pieces, s.prompt_len, layer, 1)


def test_the_followers_heads_picture_prints_each_heads_weights_for_the_newest_query(bundled_lm):
    """The picture a follower sees instead of the heatmap: one row per head, the newest query's weights, read back."""
    import re

    from drawing.heads import heads_svg

    s = run(bundled_lm, 2)
    for t in s.records:  # a prefill (its last query row) and decode steps
        for layer in (0, len(t.layers) - 1):
            svg = heads_svg(t, layer, s.pieces())
            printed = [float("0" + v) for v in re.findall(r">(\.\d\d|1\.00)</text>", svg)]
            weights = t.layers[layer].pattern[:, -1, :].float()  # [head, key_pos]
            assert len(printed) == weights.numel()  # every pair of this query is visible: nothing masked
            assert printed == pytest.approx(weights.flatten().tolist(), abs=0.006)
            assert f"query_pos {t.kv_len - 1}" in svg and svg.count(">head ") == weights.shape[0]
    assert ">&lt;|endofte…</text>" in heads_svg(s.records[-1], 0, s.pieces())  # a long key's label, cut and seen to be


def test_every_family_round_trips(tiny_lm):
    s = run(tiny_lm, 2)
    for t in s.records:
        assert wire.trace_from_wire(wire.loads(wire.dumps(wire.trace_to_wire(t)))) == t


def test_the_wire_refuses_what_is_not_a_trace(bundled_lm):
    d = wire.trace_to_wire(run(bundled_lm, 0).records[0])
    bad = dict(d, layers=[dict(d["layers"][0], pattern={"shape": [8, 1, 5], "f16": "AAAA"})])
    with pytest.raises(WireError):
        wire.trace_from_wire(bad)
    with pytest.raises(WireError):
        wire.trace_from_wire({"phase": "prefill"})
    with pytest.raises(ValueError):  # a pickle is not JSON: it is never unpickled
        wire.loads(b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94.")


# ---------------------------------------------------------------- only the key drives


def test_codes_are_short_random_and_without_look_alikes():
    codes = {new_code() for _ in range(500)}
    assert len(codes) == 500
    assert all(CODE_RE.match(c) and len(c) == 6 for c in codes)
    assert not set("0O1IL") & set(ALPHABET)


def test_only_the_lecturer_key_starts_a_class_and_the_key_is_stored_nowhere(store):
    room = classroom(store)
    with pytest.raises(Refused, match="not the lecturer key"):
        room.start("wrong", "s1")
    lecture = room.start(KEY, "s1")
    assert CODE_RE.match(lecture.code) and KEY not in lecture.token
    kv, _, kind = store
    if kind == "memory":
        everything = str(kv._data)
    else:
        everything = str([kv.get(k) if kv.type(k) == "string" else kv.hgetall(k) for k in kv.keys("*")])
    assert lecture.code in everything and KEY not in everything
    with pytest.raises(Refused, match="does not lead"):  # a code is not a token
        room.publish(Lecture(lecture.code, "guess"), frame={"id": "x", "kind": "waiting"})
    assert not Classroom(MemoryKV()).enabled  # no key set: follow is off
    with pytest.raises(Refused, match="Follow is off"):
        Classroom(MemoryKV()).start("", "s1")


def test_wrong_keys_are_rate_limited_per_session_and_per_server(store):
    room = classroom(store, key_tries=3, key_tries_server=5)
    for _ in range(3):
        with pytest.raises(Refused, match="not the lecturer key"):
            room.start("nope", "s1")
    with pytest.raises(Refused, match="Too many wrong lecturer keys"):
        room.start(KEY, "s1")  # even the right key, until the minute is over
    for _ in range(2):
        with pytest.raises(Refused, match="not the lecturer key"):
            room.start("nope", "s2")
    with pytest.raises(Refused, match="Too many"):
        room.start(KEY, "s3")  # the server's budget is spent too
    store[1].now += 61
    assert room.start(KEY, "s1").code


def test_a_wrong_malformed_or_ended_code_gets_one_plain_message(store):
    room = classroom(store, join_fails=4)
    lecture = room.start(KEY, "lect")
    assert room.join(lecture.code.lower()[:3] + " " + lecture.code.lower()[3:], "s1") == lecture.code
    for bad in ("ZZZZZZ", "<img src=x>", ""):
        with pytest.raises(Refused) as e:
            room.join(bad, "s2")
        assert str(e.value) == NO_CLASS
    room.end(lecture)
    with pytest.raises(Refused) as e:
        room.join(lecture.code, "s2")
    assert str(e.value) == NO_CLASS
    assert room.version(lecture.code) is None and room.read(lecture.code) is None
    with pytest.raises(Refused, match="Too many wrong class codes"):
        room.join(lecture.code, "s2")


def test_a_class_ends_after_hours_without_a_change_from_its_lecturer(store):
    kv, clock, kind = store
    room = classroom(store, idle_s=1 if kind == "redis" else 3 * 3600)
    lecture = room.start(KEY, "lect")
    room.join(lecture.code, "s1")
    if kind == "memory":
        clock.now += 3 * 3600 - 10
        assert room.version(lecture.code) == 0
        clock.now += 11
    else:
        time.sleep(2.1)  # Redis expires keys itself
    assert room.version(lecture.code) is None
    with pytest.raises(Refused, match="has ended"):
        room.publish(lecture)
    assert room.classes() == 0


def test_caps_classes_per_server_and_followers_per_class(store):
    room = classroom(store, max_classes=2, max_followers=2, presence_s=20)
    first = room.start(KEY, "a")
    room.start(KEY, "b", new=True)  # new: another class (the key alone resumes the newest)
    with pytest.raises(Refused, match="already runs 2 classes"):
        room.start(KEY, "c", new=True)
    room.end(first)
    third = room.start(KEY, "c", new=True)
    room.join(third.code, "s1")
    room.join(third.code, "s2")
    with pytest.raises(Refused, match="full"):
        room.join(third.code, "s3")
    assert room.join(third.code, "s1") == third.code  # one already in comes back
    store[1].now += 30  # s1 and s2 went quiet: their places free up
    assert room.join(third.code, "s3") == third.code
    assert room.followers(third.code) == 1


# ---------------------------------------------------------------- following costs no forward pass


def test_a_follower_sees_the_lecturers_steps_without_running_the_model(bundled_lm, store, monkeypatch):
    room = classroom(store)
    lecture = room.start(KEY, "lect")
    s = run(bundled_lm, 3)
    pub = Publisher(room, lecture)
    fork = {"prompt": s.prompt}
    assert pub.update(s, 3, "Attention", 1, 2, fork) == 1
    assert pub.update(s, 3, "Attention", 1, 2, fork) is None  # nothing changed, nothing sent

    import engine.forward.run as run_module

    def no_pass(*a, **k):
        raise AssertionError("a follower ran a forward pass")

    monkeypatch.setattr(run_module, "run_pass", no_pass)
    monkeypatch.setattr(bundled_lm.model, "forward", no_pass)
    other = Classroom(store[0], key=KEY, clock=store[1])  # another replica on the same store
    shared = other.read(lecture.code)
    assert shared.records == s.records and shared.at == 3 and (shared.layer, shared.head) == (1, 2)
    assert shared.ids == s.ids[0].tolist() and shared.pieces() == s.pieces()
    assert shared.texts[-1] == s.text
    assert other.read(lecture.code) is shared  # one decode per update, shared by this server's followers
    def same(a, b) -> bool:  # two plotly figures draw the same thing
        return a.to_json() == b.to_json()

    labels = axis_labels(s.pieces())
    for i, t in enumerate(shared.records):  # everything a follower draws is the lecturer's step i, as the lecturer's
        mine = s.records[i]  # run draws it
        svg = stage_svg(t, shared.pieces(), shared.prompt_len, 1, 2)
        assert f'data-step="{i}"' in svg and svg == stage_svg(mine, s.pieces(), s.prompt_len, 1, 2)
        assert same(heads_figure(t, 1, axis_labels(shared.pieces())), heads_figure(mine, 1, labels))
        assert same(next_token_figure(t), next_token_figure(mine))
        assert matmul_frame(t, shared.spec, 1).equals(matmul_frame(mine, bundled_lm.spec, 1))
    assert same(latency_figure(shared.records), latency_figure(s.records))
    assert same(kv_grid_figure(shared.records, shared.spec.layers), kv_grid_figure(s.records, bundled_lm.spec.layers))
    assert shared.spec == bundled_lm.spec


def test_a_click_sends_one_new_step_and_a_reset_starts_a_new_run(bundled_lm, store):
    room = classroom(store)
    lecture = room.start(KEY, "lect")
    sent = []
    real = room.publish
    room.publish = lambda lec, **kw: sent.append((sorted(kw.get("traces") or {}), kw.get("fresh_run", False))) or \
        real(lec, **kw)
    pub = Publisher(room, lecture)
    s = run(bundled_lm, 1)
    pub.update(s, 1, "Attention", 0, 0, {})
    s.decode()
    pub.update(s, 2, "Attention", 0, 0, {})
    pub.update(s, 1, "Attention", 0, 0, {})  # the lecturer scrubs back: no trace, a frame already in the timeline
    pub.update(s, 1, "Latency", 0, 0, {})  # ... or picks a view
    assert sent == [([0, 1], True), ([2], False), ([], False), ([], False)]
    assert room.read(lecture.code).view == "Latency" and room.live(lecture.code)["picks"]["view"] == "Latency"
    assert [f for f, _ in room.timeline(lecture.code)] == [f"{pub._run}:1", f"{pub._run}:2"]
    pub.update(None, 0, "Latency", 0, 0, {})  # Reset
    assert room.read(lecture.code).run is None and room.live(lecture.code)["frame"] == "waiting"
    s2 = run(bundled_lm, 0)
    pub.update(s2, 0, "Latency", 0, 0, {})
    shared = room.read(lecture.code)
    assert sent[-1] == ([0], True) and len(shared.records) == 1 and shared.records[0] == s2.records[0]


def qr_modules(svg: str) -> list[list[int]]:
    """The dark modules a segno SVG draws, read back from its path ('M x y' moves to a row's centre line, 'hN' draws
    N dark modules, 'mdx dy' moves relatively): the picture as a matrix of 0 and 1, its quiet border included."""
    size = int(re.search(r'<path fill="#fff" d="M0 0h(\d+)v', svg).group(1))
    grid = [[0] * size for _ in range(size)]
    d = re.search(r'<path class="qrline" stroke="#111" d="([^"]+)"', svg).group(1)
    x = y = 0.0
    for op, args in re.findall(r"([Mmh])([-\d. ]+)", d):
        nums = [float(n) for n in args.split()]
        if op == "M":
            x, y = nums
        elif op == "m":
            x, y = x + nums[0], y + nums[1]
        else:
            for col in range(int(x), int(x + nums[0])):
                grid[int(y)][col] = 1
            x += nums[0]
    return grid


def test_the_qr_code_is_a_picture_of_the_link():
    """Module for module, the picture is the QR code of the link (error correction M), encoded apart by segno."""
    import base64

    import segno

    link = "http://10.0.0.5:8501/?follow=K7QX2M"
    uri = qr_data_uri(link)
    assert uri.startswith("data:image/svg+xml;base64,")
    svg = base64.b64decode(uri.split(",", 1)[1]).decode()
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and "<script" not in svg  # an <img> needs xmlns
    expected = segno.make_qr(link, error="m")
    want = [[int(bool(v)) for v in row] for row in expected.matrix_iter(border=2)]
    drawn = qr_modules(svg)
    assert drawn == want
    assert drawn != [[int(bool(v)) for v in row] for row in segno.make_qr(link[:-1] + "N", error="m").matrix_iter(border=2)]


# ---------------------------------------------------------------- the pages (AppTest)


@pytest.fixture
def key_set(monkeypatch):
    """The server was started with a lecturer key (a fresh in-process classroom)."""
    from classroom import server

    monkeypatch.setenv("DECODE_LAB_LECTURER_KEY", KEY)
    monkeypatch.delenv("DECODE_LAB_REDIS_URL", raising=False)
    server.reset()
    yield server
    server.reset()


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def lecturer(clicks: int, sampled: bool = False):
    """The lecturer's page with a class started, prefilled and `clicks` Next tokens on (sampled: temperature 1.3,
    seed 7)."""
    from ui.apptest import app_test

    at = ok(app_test().run())
    if sampled:
        ok(at.sidebar.radio(key="side_mode").set_value("sample").run())
        ok(at.sidebar.slider(key="side_temperature").set_value(1.3).run())
        ok(at.sidebar.number_input(key="side_seed").set_value(7).run())
    at.sidebar.text_input(key="follow_key").input(KEY)
    ok(at.button(key="follow_start").click().run())
    assert at.session_state["follow_key"] == ""  # the key is not kept once the class has started
    ok(at.button(key="step_btn_prefill").click().run())
    for _ in range(clicks):
        ok(at.button(key="step_btn_next").click().run())
    return at


def follower(code: str, visited_first: bool = False):
    """A student's browser on ?follow=CODE (visited_first: it had its own step page open, cache off, before)."""
    from ui.apptest import app_test

    at = app_test()
    if visited_first:
        ok(at.run())
        at.sidebar.number_input(key="side_max_new").set_value(7)
        ok(at.run())
        ok(at.toggle(key="bar_cache").set_value(False).run())
    at.query_params["follow"] = code
    return ok(at.run())


def everything_shown(at) -> str:
    parts = [str(e.value) for kind in ("markdown", "caption", "code", "text", "error", "info", "warning")
             for e in getattr(at, kind)]
    parts += [h.proto.body for h in at.get("html")]
    return "\n".join(parts)


def live_view(at) -> dict:
    """What the follower's page gave its live view (classroom/follow.js): the class code and its own session id."""
    import json

    (view,) = at.get("bidi_component")
    return json.loads(view.proto.json)


@pytest.mark.slow
def test_a_follower_page_mounts_the_live_view_has_no_run_controls_and_never_the_key(key_set):
    from drawing.stage import stage_svg
    from drawing.views import VIEWS

    lect = lecturer(3)
    code = lect.session_state["follow_lead"].code
    assert all(KEY not in str(v) for v in lect.query_params.values())
    assert KEY not in everything_shown(lect)
    fol = follower(code)
    assert not fol.error
    data = live_view(fol)
    assert data == {"code": code, "who": fol.session_state["follow_who"]}  # the page's own random id, no key
    assert KEY not in everything_shown(fol) and KEY not in str(data)
    assert code in str(fol.query_params["follow"])
    keys = {b.key for b in fol.button}
    assert not {k for k in keys if k and k.startswith("step_btn")}  # no Prefill, Next token, Run to end, Reset
    assert not [t for t in fol.sidebar.text_input if t.key == "follow_key"]  # no key field on a follower page

    room, hub = key_set.classroom(), key_set.hub()
    assert room.is_follower(code, data["who"])
    live = room.live(code)
    s = lect.session_state["step_run"]
    frame = room.frame(code, live["frame"])
    assert (frame["kind"], frame["at"], frame["text"]) == ("step", 3, s.text)
    path = f"p/{frame['run']}/3/stage/{live['picks']['layer']}/{live['picks']['head']}"
    assert hub.part(code, path).decode() == stage_svg(s.records[3], s.pieces(), s.prompt_len)  # the step page's
    view = hub.part(code, f"p/{frame['run']}/3/view/{VIEWS.index('Attention')}/0")
    assert b'data-testid=\\"dl-follow-heads\\"' in view  # every head as a picture, not a chart
    assert hub.part(code, f"p/{frame['run']}/4/stage/0/0") is None  # a step not taken is not there

    version = live["version"]
    ok(fol.run())
    assert room.live(code)["version"] == version  # a follower's page run publishes nothing
    ok(lect.button(key="step_btn_next").click().run())
    assert room.live(code)["version"] == version + 1 and room.frame(code, room.live(code)["frame"])["at"] == 4


@pytest.mark.slow
def test_a_wrong_code_gets_a_plain_message_and_a_box_to_type_the_code(key_set):
    fol = follower("NOPE42")
    assert [e.value for e in fol.error] == [NO_CLASS.replace(":", "\\:").replace(".", "\\.")]
    assert fol.text_input(key="follow_typed")
    fol = follower("<b>x</b>](http://evil.example)")
    assert len(fol.error) == 1 and "evil" not in fol.error[0].value


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.slow
def test_fork_continues_with_the_lecturers_tokens_and_leaves_the_lecturers_run_alone(key_set, sampled):
    from tests.test_app import on_screen

    lect = lecturer(5, sampled)
    s = lect.session_state["step_run"]
    ok(lect.button(key="step_btn_back").click().run())
    ok(lect.button(key="step_btn_back").click().run())  # the lecturer shows step 3 of 5
    code = lect.session_state["follow_lead"].code
    lecturer_ids, lecturer_traces = s.ids.tolist(), list(s.records)
    step, tokens, text, stage = on_screen(lect)
    assert (step, tokens) == (3, 6)

    fol = follower(code, visited_first=True)
    run_id = key_set.classroom().read(code).run
    fol.session_state["follow_fork"] = {"run": run_id, "at": 3}  # what the live view's Fork sends (step 3)
    ok(fol.run())
    mine = fol.session_state["step_run"]
    assert (mine.use_cache, mine.max_new_tokens) == (s.use_cache, s.max_new_tokens)  # the lecturer's settings
    assert mine.sampling == s.sampling
    assert mine is not s and len(mine.records) == 4  # prefill + 3 steps, replayed in the student's session
    assert mine.ids.tolist() == [lecturer_ids[0][: mine.ids.shape[1]]]
    assert on_screen(fol) == (3, 4, text, stage)  # the step the lecturer showed: its text and its stage
    assert "follow_code" not in fol.session_state and "follow" not in fol.query_params
    for _ in range(2):
        ok(fol.button(key="step_btn_next").click().run())
    assert mine.ids.tolist() == [lecturer_ids[0][: mine.ids.shape[1]]]  # the lecturer's next tokens
    assert mine.generated_ids == s.generated_ids
    assert lect.session_state["step_run"] is s and s.ids.tolist() == lecturer_ids  # untouched
    assert s.records == lecturer_traces


# ---------------------------------------------------------------- a real browser: the acceptance run


def start_class(pg) -> str:
    """The lecturer, in the sidebar: the key, then Start a class; returns the follow link shown."""
    from playwright.sync_api import expect

    from tests.test_browser import idle

    idle(pg)  # the page drawn (a reloaded link replays its run first), as a lecturer waits for it
    pg.get_by_text("Lead a class").click()
    # The expander opens over ~400 ms; a box focused meanwhile is scrolled into view, and Start then slides back
    # down ~50 px. A hand cannot type the key that fast; `fill` can, and a click then could land beside a moving
    # Start (the class never started, no message had left the page: twice in about 20 full runs). So, as a
    # lecturer would, wait until Start has stood still for 300 ms. The key's box, focused, can scroll the sidebar
    # again, so Start stands still once more after it; and the hand reaches Start (its tooltip's hover) before it
    # presses, as a hand does. (Still lost once in about 10 CI runs with the first wait alone.)
    still = """() => {
      const b = [...document.querySelectorAll('[data-testid=stSidebar] button')].find((x) => x.innerText.includes('Start a class'));
      if (!b) return false;
      const at = b.getBoundingClientRect().y;
      if (window.dlStartAt !== at) { window.dlStartAt = at; window.dlStartSince = performance.now(); return false; }
      return performance.now() - window.dlStartSince > 300;
    }"""
    pg.wait_for_function(still, polling="raf")
    box = pg.get_by_label("lecturer key", exact=True)
    box.fill(KEY)
    start = pg.get_by_role("button", name="Start a class")
    start.hover()
    pg.wait_for_function(still, polling="raf")
    clicked = time.monotonic()
    start.click()  # one click: the key and Start are one form
    try:
        expect(pg.locator("[data-testid=stSidebar] [data-testid=dl-follow-qr]")).to_be_visible()
    except AssertionError as e:  # were it lost again: say what the click reached
        sent = [n for t, n in getattr(pg, "sent", []) if t >= clicked]
        state = pg.evaluate("() => document.querySelector('[data-testid=stApp]')?.getAttribute("
                            "'data-test-script-state')")
        state += f"; Start enabled: {start.is_enabled()}"
        shot = Path(tempfile.mkdtemp(prefix="dl-class-start-")) / "page.png"
        pg.screenshot(path=str(shot), full_page=True)
        raise AssertionError(f"no class after Start: {len(sent)} messages sent to the server since the click "
                             f"({sent}); the script's state {state!r}; key still in the box: "
                             f"{box.input_value() == KEY}; screenshot {shot}") from e
    pg.wait_for_function("() => { const i = document.querySelector('[data-testid=stSidebar] [data-testid=dl-follow-qr]');"
                         " return i && i.complete && i.naturalWidth > 0 }")  # the QR picture really shows
    link = re.compile(r"https?://[^\s<\"]+/\?follow=[A-Z2-9]{6}")
    # and the link as text: its code block is drawn by a part of Streamlit's page loaded on first use, which can
    # come after the QR picture (once in a CI run under load, the QR shown and no link in the page yet)
    expect(pg.get_by_test_id("stSidebar")).to_contain_text(link)
    return link.search(pg.get_by_test_id("stSidebar").inner_text()).group(0)


def wait_for_step(pages, step: int, timeout_s: float) -> list[float]:
    """Seconds until each page shows `step` on its stage (polled together, so one slow page waits for no other)."""
    t0, seen = time.time(), {}
    sel = f"[data-testid=dl-follow-stage][data-step='{step}']"
    while len(seen) < len(pages) and time.time() - t0 < timeout_s:
        for i, pg in enumerate(pages):
            if i not in seen and pg.locator(sel).count():
                seen[i] = time.time() - t0
        time.sleep(0.05)
    return [seen.get(i, float("inf")) for i in range(len(pages))]


def test_three_followers_show_the_lecturers_step_3_within_3_s(keyed_server, browser):
    from playwright.sync_api import expect

    from tests.test_browser import idle, open_page, status_text

    lect = open_page(browser, keyed_server, 1280, 720)
    expect(lect.get_by_role("button", name="Prefill")).to_be_enabled()
    link = start_class(lect)
    assert KEY not in link and KEY not in lect.url and KEY not in lect.content()
    followers = [open_page(browser, link, w, h) for w, h in ((1280, 720), (1440, 900), (390, 844))]
    for pg in followers:
        expect(pg.get_by_text(re.compile("has not pressed Prefill"))).to_be_visible()
    lect.keyboard.press("p")
    expect(lect.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    for i in range(1, 4):
        lect.keyboard.press("n")
        expect(lect.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    delays = wait_for_step(followers, 3, 3.0)  # from the moment the lecturer's page shows step 3
    assert max(delays) <= 3.0, delays

    for pg in followers:
        assert KEY not in pg.url and KEY not in pg.content() and "follow=" in pg.url
        buttons = [t.strip() for t in pg.locator("button[data-testid^=stBaseButton]").all_inner_texts()]
        assert not [b for b in buttons if re.match(r"(Prefill|Next token|Run to end|Reset|◀|▶)", b)], buttons
    # a follower clicks everything it has: views, a layer, the scrubber, and Fork
    pg = followers[1]
    for view in ("Next token", "KV cache", "Latency", "Tokens", "Attention"):
        pg.locator("[data-testid=dl-follow] [role=radio]").filter(has_text=view).first.click()
        expect(pg.locator("[data-testid=dl-follow] [role=radio][aria-checked=true]")).to_have_text(view)
    pg.locator("[data-testid=dl-follow] button[data-layer='2']").click()
    expect(pg.locator("[data-testid=dl-follow] button[data-layer='2']")).to_have_class(re.compile("dlf-on"))
    pg.get_by_test_id("dl-follow-back").click()  # the scrubber: one step back
    expect(pg.get_by_text(re.compile("looking back"))).to_be_visible()
    expect(pg.locator("[data-testid=dl-follow-stage][data-step='2']")).to_be_visible()
    pg.get_by_test_id("dl-follow-fork").click()
    expect(pg.get_by_text(re.compile(r"\(2 from decode steps\)"))).to_be_visible()  # its own run, at step 2
    idle(pg)
    pg.get_by_role("button", name=re.compile("^Next token")).click()
    expect(pg.get_by_text(re.compile(r"\(3 from decode steps\)"))).to_be_visible()
    lect.locator("[data-testid=stRadio] label").filter(has_text="Tokens").first.click()  # the lecturer's page redraws
    expect(lect.get_by_text(re.compile("Text in, tokens out"))).to_be_visible()  # its own run, as it was
    idle(lect)
    assert "(3 from decode steps)" in status_text(lect) and "step 3 of 3" in status_text(lect)
    assert pg.locator("[data-testid='stException']").count() == 0

    wrong = open_page(browser, link[: -6] + "ZZZZZ9", 1280, 720)
    expect(wrong.get_by_text(re.compile("No class is running with this code"))).to_be_visible()
    assert wrong.locator("[data-testid='stException']").count() == 0
    for p in [lect, wrong, *followers]:
        assert p.outside == []
        p.close()


def test_a_followers_table_names_its_index_in_the_one_header_row_as_the_lecturers_does(bundled_lm):
    """The Shapes view's table on a student's tab had a second header row holding only "tensor"; the lecturer's
    st.table names the index in the header row, beside the columns."""
    import re

    from classroom.frames import table_html
    from drawing.views import StepContext, view_blocks

    s = run(bundled_lm, 1)
    c = StepContext(records=tuple(s.records), ids=tuple(s.ids[0].tolist()), pieces=tuple(s.pieces()),
                    prompt_len=s.prompt_len, prompt="", spec=s.lm.spec, text="", layer=0)
    (table,) = [b.value for b in view_blocks("Shapes", c) if b.kind == "table"][:1]
    html = table_html(table)
    head = re.search(r"<thead>(.*?)</thead>", html, re.S).group(1)
    assert head.count("<tr") == 1, head
    names = re.findall(r"<th[^>]*>([^<]*)</th>", head)
    assert names == [table.index.name, *map(str, table.columns)], names
    assert html.count("<tr") == 1 + len(table)  # one row per tensor, as on the lecturer's page


@pytest.mark.slow
def test_a_server_without_a_lecturer_key_says_follow_is_off_instead_of_asking_for_a_code(monkeypatch):
    """With no lecturer key no class can start, so every code typed got "no class is running with this code":
    the Follow page says Follow is off, and asks for no code. With a key, the box to type the code is there."""
    from classroom import server

    monkeypatch.delenv("DECODE_LAB_LECTURER_KEY", raising=False)
    monkeypatch.delenv("DECODE_LAB_REDIS_URL", raising=False)
    server.reset()
    try:
        fol = follower("")
        assert any("Follow is off on this server" in i.value for i in fol.info)
        assert not [t for t in fol.text_input if t.key == "follow_typed"]
        monkeypatch.setenv("DECODE_LAB_LECTURER_KEY", KEY)
        server.reset()
        fol = follower("")
        assert not any("Follow is off" in i.value for i in fol.info)
        assert fol.text_input(key="follow_typed")
    finally:
        server.reset()
