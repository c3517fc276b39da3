"""The class takes part: votes (hostile ones refused), versions and frames, the news that wakes every server,
the reload that gives a lecturer the same class, the routes a follower's page uses, and other pages published.

Engine units on both stores (this process, and a real redis-server on loopback: the system tier).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from classroom import Classroom, Limits, MemoryKV, Refused, wire
from classroom.http import TOO_LONG, ClassRoutes
from classroom.hub import END, Hub
from classroom.lectures import MAX_FRAMES
from classroom.poll import Refused as VoteRefused
from classroom.poll import next_token_question, shape_question
from classroom.publisher import Publisher
from drawing.stage import stage_svg
from engine import Stepper
from tests import test_follow
from tests.test_follow import KEY, classroom, ok

room_of = classroom  # a Classroom on the test's store, with these limits
key_set = test_follow.key_set  # the fixture: a server started with a lecturer key


def run(lm, steps: int = 2) -> Stepper:
    s = Stepper(lm, "Once upon a time there was a girl named Lily.", max_new_tokens=20)
    s.prefill()
    for _ in range(steps):
        s.decode()
    return s


@pytest.fixture
def asked(bundled_lm, store):
    """A class with two followers and an open question about the next token (held back, as the page does)."""
    room = room_of(store, max_followers=3)
    lecture = room.start(KEY, "lect")
    s = run(bundled_lm)
    Publisher(room, lecture).update(s, 2, "Attention", 0, 0, {})
    held = s.step()
    q = next_token_question(held, "Once upon a time")
    qid = room.polls.ask(lecture, q)
    for who in ("aaaa0000aaaa0000", "bbbb1111bbbb1111"):
        room.join(lecture.code, who)
    return room, lecture, qid, q, held


# ---------------------------------------------------------------- votes


def test_a_question_offers_the_models_top_candidates_shuffled_and_hides_the_answer_until_the_reveal(asked):
    room, lecture, qid, q, held = asked
    assert set(q["choices"]) <= {c.token.replace(" ", "·") for c in held.top} and len(q["choices"]) == 5
    assert q["answer"] in q["choices"] and q["answer"] == held.token.replace(" ", "·")
    assert q["model"][q["answer"]] == pytest.approx(max(c.p_after for c in held.top), abs=1e-3)
    public = room.polls.public(lecture.code)
    assert "answer" not in public and "model" not in public and public["choices"] == q["choices"]
    assert room.live(lecture.code) is None or "answer" not in json.dumps(room.live(lecture.code))
    orders = {tuple(next_token_question(held, "")["choices"]) for _ in range(30)}
    assert len(orders) > 1  # shuffled: the most likely is not always first


def test_a_question_carries_the_step_it_is_about_to_the_followers_open_and_revealed(asked):
    """A follower looking back shows the question only at its own step (classroom/follow.js): the step must reach
    the follower with the question, before the reveal and after it."""
    room, lecture, _, q, held = asked
    room.polls.ask(lecture, {**q, "at": held.step})
    assert room.polls.public(lecture.code)["at"] == held.step and "answer" not in room.polls.public(lecture.code)
    room.polls.reveal(lecture)
    assert room.polls.public(lecture.code)["at"] == held.step


def test_one_vote_per_follower_counted_anonymously_and_a_typed_word_matching_a_choice_counts_for_it(asked):
    room, lecture, qid, q, _ = asked
    choice = q["choices"][1]
    assert "vote is in" in room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, choice=choice)
    with pytest.raises(VoteRefused, match="voted on this question already"):
        room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, choice=q["choices"][0])
    room.polls.vote(lecture.code, "bbbb1111bbbb1111", qid, word=choice.strip("·").upper())
    tally = room.polls.tally(lecture.code)
    assert tally["counts"][choice] == 2 and tally["total"] == 2 and tally["words"] == []
    assert "aaaa0000" not in json.dumps(tally)  # nobody's id in what is shown


def test_the_projectors_reveal_lists_the_words_typed_and_the_votes_a_students_reveal_does(asked):
    """After the reveal the lecturer's one-line chips showed only the choices' votes: a class that typed "banana"
    saw it on every phone and not on the projector, and "the class (1 votes)" said one vote in the plural."""
    from html import unescape
    from re import sub

    from classroom.poll_draw import compact_html, poll_html

    room, lecture, qid, q, _ = asked
    room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, choice=q["choices"][0])
    room.polls.vote(lecture.code, "bbbb1111bbbb1111", qid, word="banana")
    revealed = room.polls.reveal(lecture)
    tally = room.polls.tally(lecture.code)

    def text(html):
        return unescape(sub(r"<[^>]+>", "", html))

    student, projector = text(poll_html(revealed, tally, revealed=True)), text(compact_html(revealed, tally))
    for words in ("Typed: banana (1)", "the class (2 votes)"):
        assert words in student and words in projector, (words, projector)
    one = text(compact_html(revealed, {**tally, "total": 1, "words": []}))
    assert "the class (1 vote)" in one and "Typed" not in one


@pytest.mark.parametrize("payload, said", [
    ({"word": "<b>bold</b>"}, "plain word"),
    ({"word": "<script>alert(1)</script>"}, "plain word"),
    ({"word": "x" * 10_000}, "too long"),
    ({"choice": "<img src=x onerror=alert(1)>"}, "not one of the choices"),
    ({"choice": "x" * 10_000}, "not one of the choices"),
    ({"word": "two words"}, "plain word"),
    ({}, "Pick one of the choices"),
])
def test_hostile_votes_are_refused_with_a_plain_message_and_never_stored(asked, payload, said):
    room, lecture, qid, _, _ = asked
    with pytest.raises(VoteRefused, match=said) as e:
        room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, **payload)
    assert "<" not in str(e.value) and len(str(e.value)) < 200
    assert room.polls.tally(lecture.code)["total"] == 0


def test_a_vote_after_the_reveal_for_an_ended_class_or_from_a_stranger_is_refused(asked):
    room, lecture, qid, q, _ = asked
    with pytest.raises(VoteRefused, match="link again"):
        room.polls.vote(lecture.code, "cccc2222cccc2222", qid, choice=q["choices"][0])  # never joined
    with pytest.raises(VoteRefused, match="no longer open"):
        room.polls.vote(lecture.code, "aaaa0000aaaa0000", "deadbeef", choice=q["choices"][0])
    room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, choice=q["choices"][0])
    done = room.polls.reveal(lecture)
    assert done["answer"] == q["answer"] and done["total"] == 1 and "model" in room.polls.public(lecture.code)
    assert "model " in done["html"] and "✓" in done["html"]  # the model's probabilities beside the votes
    with pytest.raises(VoteRefused, match="revealed"):
        room.polls.vote(lecture.code, "bbbb1111bbbb1111", qid, choice=q["choices"][0])
    room.end(lecture)
    with pytest.raises(VoteRefused, match="ended"):
        room.polls.vote(lecture.code, "bbbb1111bbbb1111", qid, choice=q["choices"][0])


def test_votes_are_capped_at_the_class_size_and_rate_limited_like_codes(asked):
    from classroom.poll import VOTES_PER_MINUTE

    room, lecture, qid, q, _ = asked  # a class of at most 3
    room.join(lecture.code, "cccc2222cccc2222")
    for who in ("aaaa0000aaaa0000", "bbbb1111bbbb1111", "cccc2222cccc2222"):
        room.polls.vote(lecture.code, who, qid, choice=q["choices"][0])
    room.seen(lecture.code, "eeee4444eeee4444")  # a fourth seat, past the cap (join refuses it: the class is full)
    with pytest.raises(VoteRefused, match="all the votes it can take"):
        room.polls.vote(lecture.code, "eeee4444eeee4444", qid, choice=q["choices"][0])
    said = []
    for _ in range(VOTES_PER_MINUTE + 2):  # a follower hammering: every try counts, right or wrong
        with pytest.raises(VoteRefused) as e:
            room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, word="<b>")
        said.append(str(e.value))
    assert said.index("Too many votes from here: wait a minute.") == VOTES_PER_MINUTE - 1  # its 10 a minute spent
    room.clock.now += 61
    with pytest.raises(VoteRefused, match="plain word"):  # a minute later it is heard again
        room.polls.vote(lecture.code, "aaaa0000aaaa0000", qid, word="<b>")


def test_the_shape_question_is_answered_from_the_trace(bundled_lm):
    s = run(bundled_lm)
    before = s.records[-1]
    held = s.step()
    q = shape_question(held, before)
    batch, kv_heads, pos, head_dim = held.layers[0].shapes["kv.keys"]
    assert q["answer"] == f"[{batch}, {kv_heads}, {pos}, {head_dim}]" and pos == before.kv_len + 1
    assert q["answer"] in q["choices"] and len(set(q["choices"])) == len(q["choices"]) >= 4
    assert not q["typed"]


# ---------------------------------------------------------------- versions, frames, the timeline


def test_each_publish_is_one_version_and_a_new_frame_joins_the_timeline_once(store):
    room = room_of(store)
    lecture = room.start(KEY, "lect")
    heard = []
    from classroom.store import subscribe

    if store[2] == "memory":
        subscribe(room.kv, room.channel, heard.append)
    v1 = room.publish(lecture, frame={"id": "a", "kind": "page", "label": "A", "nodes": []}, picks={})
    v2 = room.publish(lecture, frame={"id": "b", "kind": "page", "label": "B", "nodes": []}, picks={})
    v3 = room.publish(lecture, frame={"id": "a", "kind": "page", "label": "A", "nodes": []}, picks={})
    v4 = room.publish(lecture)  # the same screen again (a question asked)
    assert [v1, v2, v3, v4] == [1, 2, 3, 4] and room.version(lecture.code) == 4
    assert room.timeline(lecture.code) == [["a", "A"], ["b", "B"]]
    assert room.live(lecture.code)["frame"] == "a" and room.frame(lecture.code, "b")["label"] == "B"
    room.publish(lecture, frame={"id": "waiting", "kind": "waiting", "timeline": False})
    assert len(room.timeline(lecture.code)) == 2
    if store[2] == "memory":
        assert [json.loads(m)["v"] for m in heard] == [1, 2, 3, 4, 5]  # one message per version, at once
    for i in range(MAX_FRAMES + 5):
        room.publish(lecture, frame={"id": f"f{i}", "kind": "page", "label": str(i), "nodes": []})
    timeline = room.timeline(lecture.code)
    assert len(timeline) == MAX_FRAMES and timeline[-1][0] == f"f{MAX_FRAMES + 4}"
    assert room.frame(lecture.code, "a") is None  # an old frame falls out with its place in the timeline


def test_a_new_run_takes_the_old_runs_steps_out_of_every_timeline_and_keeps_the_other_pages(store, bundled_lm):
    """After a Reset (a new prompt, a reload) the old run's traces are dropped, but its steps stayed in the
    timeline: a student looking back found "This step's picture is not available" under labels that named no run.
    Each step left in the timeline now draws; a lesson's screen stays; the first event of the new run carries the
    whole timeline, so a tab already following loses the old steps too."""
    from classroom.hub import Hub

    room = room_of(store)
    lecture = room.start(KEY, "lect")
    code, pub, hub = lecture.code, Publisher(room, lecture), Hub(room)
    first = run(bundled_lm, steps=2)
    for at in range(3):
        pub.update(first, at, "Attention", 0, 0, {})
    room.publish(lecture, frame={"id": "lesson-1", "kind": "page", "label": "Lesson 1", "nodes": []}, picks={})
    second = Stepper(bundled_lm, "Tom had a red ball.", max_new_tokens=5)
    second.prefill()
    pub.update(second, 0, "Attention", 0, 0, {})
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    assert event["timeline"] == room.timeline(code)  # a following tab's timeline is replaced
    second.decode()
    pub.update(second, 1, "Attention", 0, 0, {})
    timeline = room.timeline(code)
    assert [label for _, label in timeline] == ["Lesson 1", "step 0 (prefill)", "step 1 (decode)"]
    for fid, _ in timeline[1:]:
        frame = room.frame(code, fid)
        assert "Tom had a red ball." in frame["text"]
        assert hub.part(code, f"p/{frame['run']}/{frame['at']}/stage/0/0") is not None  # it draws


def test_a_step_the_lecturer_scrubs_back_to_takes_its_place_in_the_timeline_of_the_store_and_of_each_tab(
        store, bundled_lm):
    """A lecturer who ran on to step 4 and scrubbed back to step 2 left the class's timeline reading step 0,
    step 4, step 2: a student's ‹ walked forward in time. The step goes in its place, and a following tab, sent
    only new entries to append at the end, is sent the whole timeline instead."""
    from classroom.hub import Hub

    room = room_of(store)
    lecture = room.start(KEY, "lect")
    code, pub, hub = lecture.code, Publisher(room, lecture), Hub(room)
    s = run(bundled_lm, steps=4)
    for at in (0, 4):
        pub.update(s, at, "Attention", 0, 0, {})
        hub.refresh(code)
    pub.update(s, 2, "Attention", 0, 0, {})
    labels = [label for _, label in room.timeline(code)]
    assert [int(label.split()[1]) for label in labels] == [0, 2, 4], labels
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    assert event["timeline"] == room.timeline(code) and "entry" not in event  # the tab's own list, in order
    pub.update(s, 3, "Attention", 0, 0, {})
    assert [int(label.split()[1]) for _, label in room.timeline(code)] == [0, 2, 3, 4]
    room.publish(lecture, frame={"id": "lesson-1", "kind": "page", "label": "Lesson 1", "nodes": []}, picks={})
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    assert event["entry"] == ["lesson-1", "Lesson 1"] and "timeline" not in event  # a new screen: appended


# ---------------------------------------------------------------- a reload gives the lecturer the same class


def test_the_key_again_resumes_the_newest_class_and_the_old_page_no_longer_leads_it(store):
    room = room_of(store)
    first = room.start(KEY, "tab1")
    room.join(first.code, "aaaa0000aaaa0000")
    again = room.start(KEY, "tab2")  # the lecturer reloaded and typed the key once more
    assert again.code == first.code and again.resumed and again.token != first.token
    assert room.is_follower(first.code, "aaaa0000aaaa0000")  # the students are still there
    assert room.publish(again, frame={"id": "x", "kind": "page", "label": "x", "nodes": []}) >= 1
    with pytest.raises(Refused, match="does not lead"):
        room.publish(first)  # the page that was reloaded away drives nothing
    with pytest.raises(Refused, match="not the lecturer key"):
        room.start("wrong key", "tab3")
    store[1].now += 60
    other = room.start(KEY, "tab2", new=True)
    assert other.code != first.code and not other.resumed
    latest = room.start(KEY, "tab4")
    assert latest.code == other.code  # the newest one
    room.end(latest)
    assert room.start(KEY, "tab5").code == first.code  # an ended class is never resumed


# ---------------------------------------------------------------- the news wakes every server


def test_a_server_hears_each_version_by_publish_subscribe_and_never_asks_on_a_timer(store, bundled_lm):
    room = room_of(store)
    hub = Hub(room)
    lecture = room.start(KEY, "lect")
    room.join(lecture.code, "aaaa0000aaaa0000")
    kv = room.kv
    if store[2] == "redis":
        time.sleep(0.3)  # the subscription is made by its thread
        idle_before = kv.info("stats")["total_commands_processed"]
        time.sleep(2.0)  # nothing happens: a server that asked on a timer would send commands now
        idle_after = kv.info("stats")["total_commands_processed"]
        assert idle_after - idle_before <= 2, idle_after - idle_before  # (the two INFO calls themselves)
    heard = hub.heard
    t0 = time.monotonic()
    room.publish(lecture, frame={"id": "x", "kind": "page", "label": "x", "nodes": []})
    while hub.heard == heard and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    assert hub.heard == heard + 1 and time.monotonic() - t0 < 1.0


def test_a_stream_starts_with_the_whole_state_then_gets_each_version_pushed(bundled_lm):
    """The first event holds the whole state and the pictures of the lecturer's picks (layer 2, head 5, Attention),
    each drawn from the lecturer's own run; the next version, with new picks (layer 3, head 1, Matmuls), pushes
    those; the end of the class ends the stream."""
    from classroom.frames import blocks_json
    from drawing.views import VIEWS, StepContext, view_blocks

    room = Classroom(MemoryKV(), key=KEY)
    hub = Hub(room)
    lecture = room.start(KEY, "lect")
    room.join(lecture.code, "aaaa0000aaaa0000")
    pub = Publisher(room, lecture)
    s = run(bundled_lm, 1)
    pub.update(s, 1, "Attention", 2, 5, {})

    def lecturers(step: int, view: str, layer: int, head: int) -> tuple[str, str]:
        """The stage and the view the lecturer's own run draws for these picks (a follower's: pictures for charts)."""
        t = s.records[step]
        c = StepContext(records=tuple(s.records[: step + 1]), ids=tuple(s.tokens), pieces=tuple(s.pieces()),
                        prompt_len=s.prompt_len, prompt=s.prompt, spec=bundled_lm.spec, text="", layer=layer,
                        head=head, pictures=True)
        return stage_svg(t, s.pieces(), s.prompt_len, layer, head), blocks_json(view_blocks(view, c)).decode()

    async def follow():
        stream = hub.events(lecture.code, "aaaa0000aaaa0000")
        first = await stream.__anext__()
        assert room.followers(lecture.code) == 1
        s.decode()
        await asyncio.get_running_loop().run_in_executor(None, pub.update, s, 2, "Matmuls", 3, 1, {})
        second = await asyncio.wait_for(stream.__anext__(), 5)
        room.end(lecture)
        third = await asyncio.wait_for(stream.__anext__(), 5)
        await stream.aclose()
        return first, second, third

    first, second, third = asyncio.run(follow())
    one = json.loads(first.split(b"data: ", 1)[1])
    assert one["frame"]["at"] == 1 and one["timeline"] == [[f"{pub._run}:1", "step 1 (decode)"]]
    assert one["picks"] == {"view": "Attention", "layer": 2, "head": 5}
    stage, view = f"p/{pub._run}/1/stage/2/5", f"p/{pub._run}/1/view/{VIEWS.index('Attention')}/2"
    assert set(one["parts"]) == {stage, view}  # built here, once, for the lecturer's picks
    assert (one["parts"][stage], one["parts"][view]) == lecturers(1, "Attention", 2, 5)
    assert one["parts"][stage] != lecturers(1, "Attention", 0, 0)[0]  # not what layer 0, head 0 would draw
    two = json.loads(second.split(b"data: ", 1)[1])
    assert two["v"] == one["v"] + 1 and two["frame"]["at"] == 2 and two["entry"][0] == f"{pub._run}:2"
    stage, view = f"p/{pub._run}/2/stage/3/1", f"p/{pub._run}/2/view/{VIEWS.index('Matmuls')}/3"
    assert set(two["parts"]) == {stage, view}
    assert (two["parts"][stage], two["parts"][view]) == lecturers(2, "Matmuls", 3, 1)
    assert third == END


def test_a_picture_asked_for_by_many_followers_at_once_is_built_once(bundled_lm, monkeypatch):
    """Thirty followers ask for layer 2, head 3's stage at once (not the lecturer's picks): one build, the same bytes
    for all, and they are that layer and head's picture of the lecturer's step."""
    import classroom.hub as hub_module

    room = Classroom(MemoryKV(), key=KEY)
    hub = Hub(room)
    lecture = room.start(KEY, "lect")
    pub = Publisher(room, lecture)
    s = run(bundled_lm, 1)
    pub.update(s, 1, "Attention", 1, 6, {})
    built = []
    real = hub_module.stage_part
    monkeypatch.setattr(hub_module, "stage_part", lambda *a, **k: built.append(a) or (time.sleep(0.2), real(*a, **k))[1])
    path = f"p/{pub._run}/1/stage/2/3"
    got = []
    threads = [threading.Thread(target=lambda: got.append(hub.part(lecture.code, path))) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and len(got) == 30 and len(set(got)) == 1
    assert got[0].decode() == stage_svg(s.records[1], s.pieces(), s.prompt_len, 2, 3)  # that layer and head
    assert 'data-layer="2" data-open="1"' in got[0].decode() and "head 3 (reads kv_head 0)" in got[0].decode()


# ---------------------------------------------------------------- the routes a follower's page uses


def call(routes, method: str, path: str, body: bytes = b"", query: bytes = b""):
    """One request to the ASGI routes; (status, headers, body)."""
    sent = []
    chunks = [body[i:i + 1024] for i in range(0, len(body), 1024)] or [b""]

    async def receive():
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)} if chunks else \
            {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": []}
    asyncio.run(routes(scope, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_the_routes_refuse_plainly_and_pass_the_rest_to_streamlit(bundled_lm):
    room = Classroom(MemoryKV(), key=KEY)
    hub = Hub(room)
    passed = []

    async def streamlit(scope, receive, send):
        passed.append(scope["path"])

    routes = ClassRoutes(streamlit, lambda: hub)
    lecture = room.start(KEY, "lect")
    room.join(lecture.code, "aaaa0000aaaa0000")
    s = run(bundled_lm, 1)
    pub = Publisher(room, lecture)
    pub.update(s, 1, "Attention", 0, 0, {})
    held = s.step()
    qid = room.polls.ask(lecture, next_token_question(held, ""))

    asyncio.run(routes({"type": "http", "path": "/", "method": "GET"}, None, None))
    assert passed == ["/"]
    status, headers, body = call(routes, "POST", f"/class/{lecture.code}/vote", json.dumps(
        {"who": "aaaa0000aaaa0000", "qid": qid, "word": "x" * 10_000}).encode())
    assert status == 413 and json.loads(body) == {"ok": False, "message": TOO_LONG}
    status, _, body = call(routes, "POST", f"/class/{lecture.code}/vote", b"<html>not json")
    assert json.loads(body)["message"] == "That is not a vote."
    status, _, body = call(routes, "POST", f"/class/{lecture.code}/vote",
                           json.dumps({"who": "aaaa0000aaaa0000", "qid": qid, "word": "<i>x</i>"}).encode())
    assert status == 200 and not json.loads(body)["ok"] and "plain word" in json.loads(body)["message"]
    status, _, body = call(routes, "POST", f"/class/{lecture.code}/vote",
                           json.dumps({"who": "aaaa0000aaaa0000", "qid": qid, "word": "park"}).encode())
    assert json.loads(body) == {"ok": True, "message": "Your vote is in. Watch the projector for the reveal."}
    status, headers, body = call(routes, "GET", f"/class/{lecture.code}/events", query=b"who=ffff0000ffff0000")
    assert status == 403 and headers[b"content-type"].startswith(b"text/plain") and b"link again" in body
    status, headers, body = call(routes, "GET", f"/class/{lecture.code}/p/{pub._run}/1/stage/0/0")
    assert status == 200 and headers[b"content-type"] == b"image/svg+xml" and body.startswith(b"<svg")
    status, _, _ = call(routes, "GET", f"/class/{lecture.code}/p/{pub._run}/2/stage/0/0")
    assert status == 404  # the held step is not published: no picture of it to fetch before the reveal
    status, _, body = call(routes, "GET", "/class/<script>/events")
    assert status == 404 and b"<" not in body
    status, headers, body = call(routes, "GET", "/class/static/plotly.min.js")
    assert status == 200 and b"plotly" in body[:200]


# ---------------------------------------------------------------- every page followed (AppTest)


def lecturer_at_prefill():
    """A lecturer's session (AppTest) leading a class, its first Prefill taken: (the session, the class's code)."""
    from ui.apptest import app_test

    at = ok(app_test().run())
    at.sidebar.text_input(key="follow_key").input(KEY)
    ok(at.button(key="follow_start").click().run())
    ok(at.button(key="step_btn_prefill").click().run())
    return at, at.session_state["follow_lead"].code


@pytest.mark.slow
def test_a_lesson_the_lecturer_opens_is_published_with_its_slider_and_the_step_page_publishes_itself():
    from classroom import server
    from ui.apptest import page

    server.reset()
    import os

    os.environ["DECODE_LAB_LECTURER_KEY"] = KEY
    try:
        at, code = lecturer_at_prefill()
        room = server.classroom()
        assert room.frame(code, room.live(code)["frame"])["kind"] == "step"
        ok(at.switch_page(page("lessons")).run())
        at.session_state["lesson_pick"] = "4. The KV cache"
        ok(at.run())
        ok(at.slider(key="lesson4_steps").set_value(12).run())
        frame = room.frame(code, room.live(code)["frame"])
        assert (frame["kind"], frame["page"], frame["label"]) == ("page", "Lessons", "4. The KV cache")
        shown = json.dumps(frame["nodes"])
        assert "decode steps: <b>12</b>" in shown and "After prefill and 12 decode steps" in shown
        assert any(n.get("kind") == "figure" for n in _flat(frame["nodes"]))  # the lesson's chart, as plotly JSON
        assert [f for f, _ in room.timeline(code)][-1] == frame["id"]
    finally:
        os.environ.pop("DECODE_LAB_LECTURER_KEY", None)
        server.reset()


@pytest.mark.slow
def test_a_revealed_question_leaves_every_students_screen_when_the_lecturer_opens_another_page(key_set):
    """Ask the class, Reveal: the question is in what every follower is sent (classroom.live: the poll its page
    shows). Open Lessons: it is gone from what they are sent, and back on Step through the lecturer may ask again."""
    from ui.apptest import page

    at, code = lecturer_at_prefill()
    room = key_set.classroom()
    ok(at.button(key="follow_ask_next").click().run())
    ok(at.button(key="follow_reveal").click().run())
    sent = room.live(code)["poll"]
    assert sent is not None and not sent["open"] and "answer" in sent  # the revealed vote panel, on every screen
    ok(at.switch_page(page("lessons")).run())
    assert room.live(code)["poll"] is None and room.live(code)["frame"].startswith("page:")
    ok(at.switch_page(page("step_through")).run())
    assert room.live(code)["poll"] is None  # the step page does not bring it back
    assert not [b for b in at.button if b.key == "follow_reveal"]
    assert [b for b in at.button if b.key == "follow_ask_next"]  # a new question can be asked
    assert not [c for c in at.get("container") if getattr(c, "key", None) == "follow_poll_panel"]
def key_number(at, name: str) -> str:
    """The figure a student must see on the class's copy of each page, read off the lecturer's own page."""
    import re

    if name == "race":
        return f"tokens: <b>{at.number_input(key='race_steps').value}</b>"  # how long a race the lecturer set
    if name == "serving":  # the pool the run has
        return re.search(r"\d+ blocks", next(c.value for c in at.caption if " blocks" in c.value)).group()
    if name == "speculative":
        return f"k: <b>{at.session_state['speculative_k']}</b>"  # proposals a round
    if name == "scale":
        return at.code[0].value  # the KV formula with its total, as the lecturer shows it
    if name == "budget":  # the bytes the chosen policy's cache holds, measured
        said = next(m.value for m in at.markdown if m.value.startswith("Holds "))
        return re.search(r"Holds \*\*([^*]+)\*\*", said).group(1)
    if name == "model_info":  # the parameter count from the model's table
        table = at.table[0].value
        return next(str(v) for i, v in table["value"].items() if "param" in str(i))
    raise ValueError(name)


@pytest.mark.parametrize("name, title", [("race", "Race: cache vs no cache"), ("serving", "Serving: many requests"),
                                         ("speculative", "Speculative decoding"),
                                         ("scale", "Scale: KV memory and roofline"), ("model_info", "Model"),
                                         ("budget", "KV cache on a budget")])
@pytest.mark.slow
def test_every_page_the_lecturer_opens_becomes_the_classs_frame_with_its_figures(key_set, name, title):
    import html

    from ui.apptest import app_test, page

    at = ok(app_test().run())
    at.sidebar.text_input(key="follow_key").input(KEY)
    ok(at.button(key="follow_start").click().run())
    code = at.session_state["follow_lead"].code
    ok(at.switch_page(page(name)).run())
    room = key_set.classroom()
    frame = room.frame(code, room.live(code)["frame"])
    assert (frame["kind"], frame["page"]) == ("page", title) and frame["nodes"]
    assert KEY not in json.dumps(frame)
    number = key_number(at, name)
    copied = html.unescape(json.dumps(frame["nodes"], ensure_ascii=False))
    assert number and html.unescape(number) in copied, (name, number)


def lecturer_leading_on(name: str):
    """A lecturer's session (AppTest) leading a class, on page `name`: (the session, the class's code)."""
    from ui.apptest import app_test, page

    at = ok(app_test().run())
    at.sidebar.text_input(key="follow_key").input(KEY)
    ok(at.button(key="follow_start").click().run())
    ok(at.switch_page(page(name)).run())
    return at, at.session_state["follow_lead"].code


@pytest.mark.slow
def test_the_speculative_pages_prefill_is_called_the_prefill_and_a_round_scrubbed_back_to_takes_its_place(key_set):
    """A student looking back read "round 0" for the target's first pass, which drafts nothing; the step page
    calls its first screen "step 0 (prefill)", and so does this one: "round 0 (prefill)", then "round 1". A round
    the lecturer scrubs back to after running to the end goes before the last round, not after it."""
    at, code = lecturer_leading_on("speculative")
    ok(at.button(key="speculative_btn_prefill").click().run())
    ok(at.button(key="speculative_btn_next").click().run())
    labels = [label for _, label in key_set.classroom().timeline(code)]
    assert labels[-2:] == ["round 0 (prefill)", "round 1"], labels
    ok(at.button(key="speculative_btn_run").click().run())  # on to the last round, then back to round 2
    last = int(key_set.classroom().timeline(code)[-1][1].split()[1])
    at.slider(key="speculative_at").set_value(2)
    ok(at.run())
    labels = [label for _, label in key_set.classroom().timeline(code)]
    assert labels == ["Speculative decoding", "round 0 (prefill)", "round 1", "round 2", f"round {last}"], labels
    assert last > 2  # (and Run to end's progress bar, a screen on the way to the last round, is no frame)


@pytest.mark.slow
def test_serving_engine_steps_scrubbed_back_to_take_their_place_in_the_classs_timeline(key_set):
    """Run to end, then the lecturer scrubs back to engine steps 1 and 3: a student's ‹ walks 3, 1 ... forward in
    time no more; the steps go in order before the last, and the progress bar on the way is no frame."""
    at, code = lecturer_leading_on("serving")
    ok(at.button(key="serve_btn_run").click().run())
    last = int(key_set.classroom().timeline(code)[-1][1].split()[-1])
    for step in (3, 1):
        at.slider(key="serve_at").set_value(step)
        ok(at.run())
    labels = [label for _, label in key_set.classroom().timeline(code)]
    assert labels[-3:] == ["engine step 1", "engine step 3", f"engine step {last}"] and last > 3, labels
    assert all(label.startswith("engine step") for label in labels[1:]), labels
    from classroom.http import FRAME_RE

    assert all(FRAME_RE.match(fid) for fid, _ in key_set.classroom().timeline(code))  # a tab's ‹ can fetch each


@pytest.mark.slow
def test_a_followers_copy_says_each_control_as_the_lecturer_sees_it_never_its_key(key_set):
    """A phone following the Scale page read 'picture: per_token': a control is copied with the option as its
    picker shows it ('ms per token'), and a switch as on or off."""
    import html

    from ui.apptest import app_test, page

    at = ok(app_test().run())
    at.sidebar.text_input(key="follow_key").input(KEY)
    ok(at.button(key="follow_start").click().run())
    code = at.session_state["follow_lead"].code
    ok(at.switch_page(page("scale")).run())
    room = key_set.classroom()
    copied = html.unescape(json.dumps(room.frame(code, room.live(code)["frame"])["nodes"], ensure_ascii=False))
    assert "picture: <b>ms per token</b>" in copied and "per_token" not in copied
    assert "CPU and GPU side by side: <b>off</b>" in copied


def test_a_page_run_cut_short_or_overtaken_by_a_newer_run_is_never_the_classs_frame(monkeypatch):
    """Streamlit's fast reruns stop a run when the lecturer moves on (a slider moved again, Next clicked again) and
    start the next one at once, in another thread: the stopped run publishes nothing, and a run that ends after a
    newer one began leaves the newer one's screen to it (classroom/page_copy.py)."""
    from types import SimpleNamespace

    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    import classroom.page_copy as cap

    sent = []

    class Pub:  # the lecturer's Publisher: what it is asked to publish
        def page(self, frame: dict) -> None:
            sent.append(frame["nodes"][0]["html"])

    pub = Pub()
    now = SimpleNamespace(ctx=None)
    monkeypatch.setattr(cap, "st", SimpleNamespace(session_state={"follow_pub": pub}))
    monkeypatch.setattr(cap, "script_context", lambda: now.ctx)

    def begin(ctx):
        now.ctx = ctx
        run = cap.published("Lessons")
        run.__enter__()
        return run

    def draw(ctx, text: str) -> None:
        msg = ForwardMsg()
        msg.metadata.delta_path[:] = [0, 0]
        msg.delta.new_element.markdown.body = text
        ctx.enqueue(msg)

    old, new = SimpleNamespace(enqueue=lambda m: None), SimpleNamespace(enqueue=lambda m: None)
    older = begin(old)
    draw(old, "After prefill and 9 decode steps")
    newer = begin(new)  # the lecturer moved the slider again: the next run has begun
    draw(new, "After prefill and 12 decode steps")
    newer.__exit__(None, None, None)
    older.__exit__(None, None, None)  # the old run reaches its end only now
    assert len(sent) == 1 and "After prefill and 12 decode steps" in sent[0]

    now.ctx = old
    with pytest.raises(StopException), cap.published("Lessons"):
        draw(old, "After prefill and 13 decode steps")
        raise StopException()  # stopped by the runner at a yield point (the slider moved again), not by st.stop()
    assert len(sent) == 1


def _flat(nodes):
    for n in nodes:
        if n["kind"] in ("row",):
            for c in n["cols"]:
                yield from _flat(c["nodes"])
        elif n["kind"] == "group":
            yield from _flat(n["nodes"])
        else:
            yield n


# ---------------------------------------------------------------- End class and a new class, for every student at once


class Streams:
    """Followers' event streams (Hub.events), read in one event loop of their own, as the ASGI server reads them."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.got: dict[str, list[bytes]] = {}
        self._jobs = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def open(self, name: str, hub, code: str, who: str) -> None:
        self.got[name] = []

        async def read():
            async for event in hub.events(code, who):
                self.got[name].append(event)

        self._jobs.append(asyncio.run_coroutine_threadsafe(read(), self.loop))

    def wait(self, done, timeout: float = 5.0) -> float:
        """Seconds until done(got) holds (fails after `timeout`)."""
        t0 = time.monotonic()
        while not done(self.got):
            assert time.monotonic() - t0 < timeout, {k: [e[:60] for e in v] for k, v in self.got.items()}
            time.sleep(0.01)
        return time.monotonic() - t0

    def close(self) -> None:
        for job in self._jobs:
            job.cancel()
        for job in self._jobs:  # each stream's own clean-up runs before the loop stops
            try:
                job.result(5)
            except BaseException:  # noqa: BLE001 - cancelled, or ended by the class's end
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())  # close every stream's generator here
        self.loop.close()


def live_versions(events: list[bytes]) -> list[int]:
    return [json.loads(e.split(b"data: ", 1)[1])["v"] for e in events if b"event: live" in e]


@pytest.mark.parametrize("within_s", [None, pytest.param(1.0, marks=pytest.mark.perf)])
def test_end_class_reaches_every_follower_on_every_replica_at_once(store, within_s):
    """Five followers on two replicas (two hubs on one store): a version reaches all five, then End ends all five
    streams (in the perf tier: within a second); the class's code stops working."""
    room = room_of(store)
    replica = Classroom(room.kv, key=KEY, clock=room.clock)  # another server process on the same store
    hubs = [Hub(room), Hub(replica)]
    lecture = room.start(KEY, "lect")
    room.publish(lecture, frame={"id": "waiting", "kind": "waiting", "timeline": False})  # as a class bar does
    whos = [f"{i:04x}" * 4 for i in range(5)]
    for who in whos:
        room.join(lecture.code, who)
    streams = Streams()
    try:
        for i, who in enumerate(whos):
            streams.open(who, hubs[i % 2], lecture.code, who)
        streams.wait(lambda got: all(got.get(w) for w in whos))  # each has the whole state
        time.sleep(0.3 if store[2] == "redis" else 0)  # the replicas' subscriptions are made by their threads
        v = room.publish(lecture, frame={"id": "x", "kind": "page", "label": "x", "nodes": []})
        streams.wait(lambda got: all(v in live_versions(got[w]) for w in whos))
        room.end(lecture)
        took = streams.wait(lambda got: all(got[w][-1] == END for w in whos))
        assert within_s is None or took < within_s
    finally:
        streams.close()
    assert room.version(lecture.code) is None and replica.version(lecture.code) is None
    with pytest.raises(Refused):
        room.join(lecture.code, "ffff0000ffff0000")


def test_a_new_class_leaves_the_old_one_running_for_its_students_and_gets_its_own(store):
    """'Start a new class' (new=True, after a reload gave the lecturer the running class back): a new code; the
    students of the old class keep it (no end, nothing of the new one), those who open the new link get the new one."""
    room = room_of(store)
    hub = Hub(room)
    old = room.start(KEY, "tab1")
    room.publish(old, frame={"id": "waiting", "kind": "waiting", "timeline": False})
    room.join(old.code, "aaaa0000aaaa0000")
    streams = Streams()
    try:
        streams.open("old", hub, old.code, "aaaa0000aaaa0000")
        streams.wait(lambda got: got["old"])
        again = room.start(KEY, "tab2")
        assert again.resumed and again.code == old.code
        new = room.start(KEY, "tab2", new=True)
        assert new.code != old.code and not new.resumed
        room.publish(new, frame={"id": "waiting", "kind": "waiting", "timeline": False})
        room.join(new.code, "bbbb1111bbbb1111")
        streams.open("new", hub, new.code, "bbbb1111bbbb1111")
        streams.wait(lambda got: got["new"])
        time.sleep(0.3 if store[2] == "redis" else 0)
        v = room.publish(new, frame={"id": "n", "kind": "page", "label": "new", "nodes": []})
        streams.wait(lambda got: v in live_versions(got["new"]))
        time.sleep(0.2)
        assert END not in streams.got["old"] and live_versions(streams.got["old"]) == [1]
        assert room.version(old.code) == 1  # the old class runs on until it idles out
    finally:
        streams.close()


def test_news_of_a_version_a_stream_already_shows_does_not_show_it_twice(store):
    """Redis delivers a version's news late, by the subscriber's thread: a stream that opened in between already
    has that version in its first event, and a student would see the same step twice if the news were pushed."""
    room = room_of(store)
    hub = Hub(room)
    lecture = room.start(KEY, "lect")
    v1 = room.publish(lecture, frame={"id": "a", "kind": "page", "label": "a", "nodes": []})
    room.join(lecture.code, "aaaa0000aaaa0000")
    streams = Streams()
    try:
        streams.open("s", hub, lecture.code, "aaaa0000aaaa0000")
        streams.wait(lambda got: got["s"])
        hub.on_news(wire.dumps({"code": lecture.code, "v": v1}))  # the late news, as Classroom publishes it
        v2 = room.publish(lecture, frame={"id": "b", "kind": "page", "label": "b", "nodes": []})
        streams.wait(lambda got: v2 in live_versions(got["s"]))
        time.sleep(0.1)
        assert live_versions(streams.got["s"]) == [v1, v2]
    finally:
        streams.close()


# ---------------------------------------------------------------- a class's limits, as the server was started


def test_the_servers_settings_set_a_classs_limits_and_a_bad_number_keeps_the_default(monkeypatch):
    monkeypatch.setattr("classroom.lectures.connect", lambda url: MemoryKV())
    env = {"DECODE_LAB_LECTURER_KEY": "from-the-environment-key", "DECODE_LAB_MAX_CLASSES": "2",
           "DECODE_LAB_MAX_FOLLOWERS": "3", "DECODE_LAB_CLASS_IDLE_HOURS": "0.5"}
    room = Classroom.from_settings([], env)
    assert (room.limits.max_classes, room.limits.max_followers, room.limits.idle_s) == (2, 3, 1800)
    assert room.start("from-the-environment-key", "s1").code
    flagged = Classroom.from_settings(["--lecturer-key", "from-the-command-line"], env)  # the flag wins
    with pytest.raises(Refused, match="not the lecturer key"):
        flagged.start("from-the-environment-key", "s1")
    assert flagged.start("from-the-command-line", "s1").code
    odd = Classroom.from_settings([], {**env, "DECODE_LAB_MAX_CLASSES": "many", "DECODE_LAB_MAX_FOLLOWERS": ""})
    assert (odd.limits.max_classes, odd.limits.max_followers) == (Limits().max_classes, Limits().max_followers)
    assert not Classroom.from_settings([], {}).enabled  # no key: follow is off


def test_a_page_starts_at_most_three_classes_a_minute(store):
    room = room_of(store, max_classes=10)
    for _ in range(3):
        room.start(KEY, "tab", new=True)
    with pytest.raises(Refused, match="started from this page too often"):
        room.start(KEY, "tab", new=True)
    assert room.start(KEY, "another tab", new=True).code  # the limit is the page's, not the server's
    store[1].now += 61
    assert room.start(KEY, "tab", new=True).code


def test_a_class_takes_at_most_120_vote_tries_a_minute_however_many_followers_try(asked):
    """Each follower may try 10 times a minute; the class as a whole max(120, 3 x its size) (here a class of 3)."""
    room, lecture, qid, q, _ = asked
    whos = [f"{i:016x}" for i in range(13)]
    for who in whos:
        room.seen(lecture.code, who)
    said = []
    for who in whos[:12]:  # 12 followers x 10 tries: the class's 120
        for _ in range(10):
            with pytest.raises(VoteRefused) as e:
                room.polls.vote(lecture.code, who, qid, word="<b>")
            said.append(str(e.value))
    assert "Too many votes" not in " ".join(said)
    with pytest.raises(VoteRefused, match="Too many votes from here"):  # a 13th follower's first try
        room.polls.vote(lecture.code, whos[12], qid, choice=q["choices"][0])
    room.clock.now += 61
    assert "vote is in" in room.polls.vote(lecture.code, whos[12], qid, choice=q["choices"][0])


# ---------------------------------------------------------------- the poll on the lecturer's page (AppTest)


@pytest.mark.parametrize("move", ["▶ onto the held step", "Next token", "Reset"])
def test_an_open_question_is_revealed_by_moving_onto_its_step_and_dropped_by_moving_past_it(key_set, move):
    """Ask holds the next step back (the lecturer's screen and the class stay on the step before). ▶ onto the held
    step reveals it; Next token past it, or Reset, drops the question: it leaves every student's screen."""
    from tests.test_follow import lecturer

    lect = lecturer(2)
    code = lect.session_state["follow_lead"].code
    room = key_set.classroom()
    ok(lect.button(key="follow_ask_next").click().run())
    steps = lect.session_state["step_run"]
    assert len(steps.records) == 4 and lect.session_state["step_at"] == 2  # step 3 taken, step 2 on screen
    question = room.polls.current(code)
    assert question["open"] and room.frame(code, room.live(code)["frame"])["at"] == 2  # the class sees step 2
    assert room.polls.public(code)["choices"] == question["choices"] and "answer" not in room.polls.public(code)
    button = {"▶ onto the held step": "step_btn_forward", "Next token": "step_btn_next", "Reset": "step_btn_reset"}
    ok(lect.button(key=button[move]).click().run())
    now = room.polls.current(code)
    if move == "▶ onto the held step":
        assert lect.session_state["step_at"] == 3 and len(steps.records) == 4  # shown, not computed again
        assert not now["open"] and now["answer"] == question["answer"]  # revealed
        assert room.frame(code, room.live(code)["frame"])["at"] == 3 and "model" in room.polls.public(code)
        assert any("✓" in h.proto.body for h in lect.get("html"))  # the answer beside the votes, on the projector
    else:
        assert now is None and room.polls.public(code) is None  # dropped: gone from every student's screen
        assert "follow_q" not in lect.session_state
        assert room.live(code)["poll"] is None


def test_the_lecturers_end_class_button_ends_every_students_stream(key_set):
    from tests.test_follow import lecturer

    lect = lecturer(1)
    code = lect.session_state["follow_lead"].code
    room, hub = key_set.classroom(), key_set.hub()
    whos = [f"{i:016x}" for i in range(3)]
    for who in whos:
        room.join(code, who)
    streams = Streams()
    try:
        for who in whos:
            streams.open(who, hub, code, who)
        streams.wait(lambda got: all(got.get(w) for w in whos))
        ok(lect.button(key="follow_end").click().run())
        assert streams.wait(lambda got: all(got[w][-1] == END for w in whos)) < 1.0
    finally:
        streams.close()
    assert "follow_lead" not in lect.session_state and room.version(code) is None
    assert lect.button(key="follow_start")  # the panel offers a new class again


# ---------------------------------------------------------------- a fork finds its way back to the class


def forked_student(room, lecture, lm, at: int = 1):
    """A student who opened the class's link and pressed Fork on step `at` of the lecturer's run (AppTest), the run
    published as the lecturer's step page publishes it: (the student's session, the lecturer's run)."""
    from tests.test_follow import follower
    from ui import model
    from ui.link_codec import make_link

    s = run(lm, at)
    fork = {**make_link({"model": model.POLICY.offered[0], "rule": "greedy", "max_new_tokens": 20, "cache": "on"}),
            "prompt": s.prompt, "device": "auto", "dtype": "auto"}
    Publisher(room, lecture).update(s, at, "Attention", 0, 0, fork)
    student = follower(lecture.code)
    student.session_state["follow_fork"] = {"run": room.read(lecture.code).run, "at": at}  # the live view's Fork
    return ok(student.run()), s


def back_links(at) -> list:
    """The page's links back to the class: (label, the page they open, their query string)."""
    links = [e.proto for e in at.get("page_link")]
    return [(p.label, p.page, p.query_string) for p in links if "Back to the class" in p.label]


def test_a_forked_page_links_back_to_the_lecturers_live_step_until_the_class_ends(key_set, bundled_lm):
    """A student who forked carried on alone for good: no way back but typing the code again. Every page they open
    now says "Back to the class" and opens the class's follow link (the live view, at the lecturer's newest step);
    once they are back, or the class has ended, the link is gone."""
    from urllib.parse import parse_qs

    from tests.test_follow import live_view
    from ui.apptest import app_test, page

    room = key_set.classroom()
    lecture = room.start(KEY, "lect")
    student, _ = forked_student(room, lecture, bundled_lm)
    assert "step_run" in student.session_state  # forked: the step page, the student's own run
    (label, target, query), = back_links(student)
    assert label.startswith(f"Back to the class {lecture.code}") and target == "follow"
    assert parse_qs(query) == {"follow": [lecture.code]}
    ok(student.switch_page(page("lessons")).run())  # on any page the student opens
    assert [q for _, _, q in back_links(student)] == [query]

    copied = app_test()  # the link, opened (a click, or copied into another tab): the class's live view
    copied.query_params.update({k: v[0] for k, v in parse_qs(query).items()})
    ok(copied.run())
    assert live_view(copied)["code"] == lecture.code and not back_links(copied)

    student.query_params.update({k: v[0] for k, v in parse_qs(query).items()})  # the student clicks it
    ok(student.switch_page(page("follow")).run())
    assert live_view(student)["code"] == lecture.code and room.is_follower(lecture.code, live_view(student)["who"])
    ok(student.switch_page(page("step_through")).run())
    assert back_links(student) == []  # back with the class: nothing to go back to


def test_a_forked_page_has_no_way_back_to_a_class_that_has_ended(key_set, bundled_lm):
    room = key_set.classroom()
    lecture = room.start(KEY, "lect")
    student, _ = forked_student(room, lecture, bundled_lm)
    assert back_links(student)
    room.end(lecture)
    ok(student.run())
    assert back_links(student) == []


# ---------------------------------------------------------------- the class's link: the address the lecturer used


@pytest.mark.parametrize("headers, browser, public, base, link", [
    ({"Host": "10.0.0.5:8501"}, "http://10.0.0.5:8501/", "", "", "http://10.0.0.5:8501"),
    ({}, "http://lab.example.edu/decode/lessons", "", "decode", "http://lab.example.edu/decode"),  # no headers: the bar
    ({"Host": "127.0.0.1:8501", "X-Forwarded-Host": "lab.example.edu", "X-Forwarded-Proto": "https"},
     "https://lab.example.edu/", "", "/decode/", "https://lab.example.edu/decode"),  # behind a proxy that says so
    ({"Host": "127.0.0.1:8501"}, "https://lab.example.edu/", "", "", "https://lab.example.edu"),  # one that does not
    ({"Host": "localhost:8501"}, "http://localhost:8501/", "http://10.0.0.5:8501/", "", "http://10.0.0.5:8501"),
    ({"Host": "localhost:8501"}, "http://localhost:8501/", "", "", "http://localhost:8501"),
    ({"Host": 'x"><script>'}, None, "", "", ""),  # not a host: no address at all rather than markup
    ({}, None, "", "", ""),
])
def test_the_class_address_is_the_public_setting_else_the_host_the_lecturers_request_named(headers, browser, public,
                                                                                           base, link):
    from classroom.page import class_address

    assert class_address(public, headers, browser, base) == link


def lecturer_link(monkeypatch, url: str | None, public: str | None = None, base: str = ""):
    """The sidebar of a lecturer whose browser shows `url`, once a class is started: (the link, its captions)."""
    from streamlit import config

    from ui.apptest import app_test

    monkeypatch.setenv("DECODE_LAB_LECTURER_KEY", KEY)
    if public is None:
        monkeypatch.delenv("DECODE_LAB_PUBLIC_URL", raising=False)
    else:
        monkeypatch.setenv("DECODE_LAB_PUBLIC_URL", public)
    old = config.get_option("server.baseUrlPath")
    config.set_option("server.baseUrlPath", base)
    try:
        at = app_test()
        if url:
            at.context = {"url": url}
        ok(at.run())
        at.sidebar.text_input(key="follow_key").input(KEY)
        ok(at.button(key="follow_start").click().run())
    finally:
        config.set_option("server.baseUrlPath", old)
    code = at.session_state["follow_lead"].code
    (link,) = [c.value for c in at.sidebar.code if f"follow={code}" in c.value]
    return link, code, " ".join(c.value for c in at.sidebar.caption)


def test_a_lecturer_behind_a_path_gets_a_class_link_that_keeps_it_and_no_warning(key_set, monkeypatch):
    """The link kept the host and dropped the server's path (http://lab.example.edu/?follow=...: not the app)."""
    link, code, said = lecturer_link(monkeypatch, "http://lab.example.edu/decode/", base="decode")
    assert link == f"http://lab.example.edu/decode/?follow={code}"
    assert "only works on this machine" not in said


def test_the_class_link_says_localhost_only_with_a_warning_and_the_setting_replaces_it(key_set, monkeypatch):
    link, code, said = lecturer_link(monkeypatch, "http://localhost:8501/")
    assert link == f"http://localhost:8501/?follow={code}" and "only works on this machine" in said
    key_set.reset()
    link, code, said = lecturer_link(monkeypatch, "http://localhost:8501/", public="http://10.0.0.5:8501")
    assert link == f"http://10.0.0.5:8501/?follow={code}" and "only works on this machine" not in said
    key_set.reset()
    link, code, said = lecturer_link(monkeypatch, None)  # no address known at all: never a bare path without a word
    assert link == f"/?follow={code}" and "only works on this machine" in said


# ---------------------------------------------------------------- the class's pictures are the lecturer's own


def lecturer_on(layer: int, head: int, view: str = "Attention"):
    """A lecturer's step page (AppTest) leading a class, prefilled and one Next token on, showing `layer`, `head` and
    `view`: (the session, the class's code)."""
    at, code = lecturer_at_prefill()
    at.session_state["step_layer"], at.session_state["step_head"], at.session_state["step_view"] = layer, head, view
    ok(at.button(key="step_btn_next").click().run())
    return at, code


def lecturers_stage(at) -> tuple[str, str]:
    """The stage on the lecturer's own page: (the wide picture's SVG, the phone's), as the <img>s hold them."""
    import base64
    import re as re_

    body = next(h.proto.body for h in at.get("html") if 'data-testid="dl-stage"' in h.proto.body)
    wide, phone = re_.findall(r"base64,([A-Za-z0-9+/=]+)", body)
    return base64.b64decode(wide).decode(), base64.b64decode(phone).decode()


def printed_weights(svg: str) -> list[float]:
    import re as re_

    return [float("0" + v) for v in re_.findall(r">(\.\d\d|1\.00)</text>", svg)]


def test_a_followers_pictures_are_the_lecturers_own_at_the_layer_and_head_the_lecturer_picked(key_set):
    """Publishing was tested at layer 0 and head 0 only, where a picture built for the wrong layer or head looks
    right. The lecturer shows layer 2, head 5: the stage a follower is pushed (and the phone's, fetched) is the
    lecturer's own picture, byte for byte, and the attention view prints the weights of the lecturer's own chart."""
    import base64
    import re as re_

    from drawing.views import VIEWS

    at, code = lecturer_on(2, 5)
    wide, phone = lecturers_stage(at)
    assert 'data-layer="2" data-open="1"' in wide and "head 5 (reads kv_head 1)" in wide  # what the lecturer sees
    room, hub = key_set.classroom(), key_set.hub()
    room.join(code, "aaaa0000aaaa0000")
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])  # what every follower's stream is sent
    run_id, step = event["frame"]["run"], event["frame"]["at"]
    stage_path, view_path = f"p/{run_id}/{step}/stage/2/5", f"p/{run_id}/{step}/view/{VIEWS.index('Attention')}/2"
    assert set(event["parts"]) == {stage_path, view_path}
    assert event["parts"][stage_path] == wide  # the lecturer's own stage
    assert hub.part(code, f"p/{run_id}/{step}/phone/2/5").decode() == phone  # a phone's, fetched: the lecturer's too
    import numpy as np

    def values(z) -> np.ndarray:  # plotly's typed array, or a list
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]) if isinstance(z, dict) else \
            np.asarray(z, dtype=float).flatten()

    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "heatmap" in c.proto.spec)
    assert chart["layout"]["title"]["text"].startswith("layer 2, every head")  # the lecturer's chart, layer 2
    lecturers = [float(w) for tr in chart["data"] if tr["type"] == "heatmap" for w in values(tr["z"])
                 if not np.isnan(w)]  # every head's weight for the newest query (the masked layer is all NaN)
    view = json.loads(event["parts"][view_path])["blocks"][0]["html"]
    heads = base64.b64decode(re_.search(r"base64,([A-Za-z0-9+/=]+)", view).group(1)).decode()
    assert "layer 2, every head" in heads
    assert printed_weights(heads) == pytest.approx(lecturers, abs=0.006)
    import html as html_

    named = [html_.unescape(n) for n in re_.findall(r'text-anchor="end"[^>]*>([^<]*)</text>', heads)]
    heatmap = next(tr for tr in chart["data"] if tr["type"] == "heatmap" and tr.get("y"))
    assert any(" · " in y for y in heatmap["y"]), heatmap["y"]  # the lecturer's rows name what each head does
    assert len(named) == len(heatmap["y"]) and all(  # and so do the tab's: the same words, cut where seen to be
        want == got or (got.endswith("…") and want.startswith(got[:-1])) for want, got in zip(heatmap["y"], named)), \
        (heatmap["y"], named)


def test_a_lecturers_every_query_row_is_what_the_class_is_sent_and_a_layerless_view_is_the_path_a_tab_asks(key_set):
    """With "every query row (one panel per head)" on at a prefill, the lecturer's chart drew every row of every
    head and each student's the newest row only: the toggle was never published. And a view that draws no one layer
    (Next token) was pushed at the lecturer's layer, a path no tab asks for (follow.js asks for layer 0)."""
    import base64
    import re as re_

    from drawing.views import VIEWS

    at, code = lecturer_at_prefill()
    at.session_state["step_layer"] = 1
    ok(at.run())
    at.toggle(key="step_att_every").set_value(True)
    ok(at.run())
    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "heatmap" in c.proto.spec)
    title = chart["layout"]["title"]["text"]
    assert title.startswith("layer 1: every head"), title  # the lecturer's: every row, one panel per head
    hub = key_set.hub()
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    run_id, step = event["frame"]["run"], event["frame"]["at"]
    rows = f"p/{run_id}/{step}/rows/{VIEWS.index('Attention')}/1"
    assert event["picks"].get("every") is True and rows in event["parts"], list(event["parts"])
    (sent,) = [b for b in json.loads(event["parts"][rows])["blocks"] if b["kind"] == "figure"]
    figure = sent["spec"]
    assert figure["layout"]["title"]["text"] == title  # the lecturer's chart, every row, drawn by the tab
    assert len([d for d in figure["data"] if d["type"] == "heatmap"]) == len(
        [d for d in chart["data"] if d["type"] == "heatmap"])
    newest = json.loads(hub.part(code, f"p/{run_id}/{step}/view/{VIEWS.index('Attention')}/1"))["blocks"][0]["html"]
    drawn = base64.b64decode(re_.search(r"base64,([A-Za-z0-9+/=]+)", newest).group(1)).decode()
    assert "layer 1, every head · query_pos" in drawn  # the newest row alone, for a tab that asks for it

    at.session_state["step_view"] = "Next token"
    ok(at.run())
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    assert f"p/{run_id}/{step}/view/{VIEWS.index('Next token')}/0" in event["parts"], list(event["parts"])


def test_a_lecturers_one_head_every_step_so_far_is_sent_to_the_class_as_the_lecturer_draws_it(key_set):
    """The lecturer's "one head, every step so far" drew the prefill's square plus a row per decode step under the
    Attention view; the students' tabs drew the view alone, for the switch was never published."""
    at, code = lecturer_at_prefill()
    for _ in range(2):
        ok(at.button(key="step_btn_next").click().run())
    at.session_state["step_layer"] = 1
    at.session_state["step_head"] = 2
    ok(at.run())
    at.toggle(key="step_att_assembled").set_value(True)
    ok(at.run())
    (chart,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if json.loads(c.proto.spec)["layout"]["title"]["text"].startswith("layer 1, head 2")]
    hub = key_set.hub()
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    path = f"p/{event['frame']['run']}/{event['frame']['at']}/steps/1/2"
    assert event["picks"].get("steps") is True and path in event["parts"], list(event["parts"])
    said, sent = json.loads(event["parts"][path])["blocks"]
    assert "One head, every step so far" in said["html"]  # named, as the lecturer's switch names it
    assert sent["spec"]["layout"]["title"]["text"] == chart["layout"]["title"]["text"]
    kv_len = at.session_state["step_run"].records[-1].kv_len  # the prefill's rows and one per decode step
    assert [t["z"]["shape"] for t in chart["data"]] == [f"{kv_len}, {kv_len}"] * len(chart["data"])
    assert sent["spec"]["data"] == chart["data"]  # the same weights, cell for cell
    at.toggle(key="step_att_assembled").set_value(False)  # the click after: off again, and the class is told
    ok(at.run())
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    assert not event["picks"].get("steps") and not [p for p in event["parts"] if "/steps/" in p]


def test_the_lecturers_latency_claim_is_under_the_classs_latency_view_too(key_set):
    """The lecturer's Latency view ends with what the ladder measured at a size where the hardware sets the time
    (the bundled model's own figures are mostly Python's); each student's tab drew the view without it."""
    from drawing.views import VIEWS

    at, code = lecturer_at_prefill()
    ok(at.button(key="step_btn_next").click().run())
    hub = key_set.hub()
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    path = f"p/{event['frame']['run']}/{event['frame']['at']}/view/{VIEWS.index('Latency')}/0"
    asked = hub.part(code, path)  # a student looks at Latency first, while the lecturer shows Attention
    at.session_state["step_view"] = "Latency"
    ok(at.run())
    claims = [c.value for c in at.caption if "parameters (random weights" in c.value]
    assert claims, [c.value for c in at.caption]  # the lecturer's page says it (a recording ships for this CPU)
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    assert event["parts"][path] == asked.decode()  # one picture per step, built once, whoever asked first
    blocks = json.loads(event["parts"][path])["blocks"]
    sent = [b["html"] for b in blocks if b["kind"] == "caption"]
    assert any(claims[-1][:60] in html for html in sent), sent  # the lecturer's sentence, under the class's chart
    at.session_state["step_view"] = "Tokens"  # the click after: another view, and no claim goes with it
    ok(at.run())
    event = json.loads(hub.refresh(code).split(b"data: ", 1)[1])
    (tokens,) = [p for p in event["parts"] if "/view/" in p]
    assert claims[-1][:60] not in event["parts"][tokens]


def test_a_sampled_steps_reveal_gives_the_odds_it_chose_from_never_a_token_top_k_left_out(bundled_lm):
    """The reveal's "model 58%" was the softmax before the sampling settings: with top-k 2, a third candidate still
    showed odds the step could never have drawn. The figure is now the distribution the step chose from."""
    import torch

    from engine import Sampling

    s = Stepper(bundled_lm, "Once upon a time there was a girl named Lily.", max_new_tokens=5,
                sampling=Sampling(greedy=False, temperature=1.0, top_k=2, seed=3))
    s.prefill()
    held = s.step()
    q = next_token_question(held, "")
    logits = torch.tensor([c.logit for c in held.top])  # the raw logits, warped here by hand: the top 2 renormalised
    top2 = torch.topk(logits, 2).indices.tolist()
    kept = torch.softmax(logits[top2], 0)
    for i, c in enumerate(held.top):
        shown = c.token.replace(" ", "·")
        if shown in q["model"]:
            want = float(kept[top2.index(i)]) if i in top2 else 0.0
            assert q["model"][shown] == pytest.approx(want, abs=2e-3), (shown, q["model"])
    assert sum(1 for v in q["model"].values() if v == 0.0) >= len(q["choices"]) - 2


def test_a_resumed_class_says_how_many_students_follow_it_not_that_they_all_still_do(key_set):
    """'You lead it again, and your students are still connected' was printed on every resume, followers or none.
    It now gives the count the class holds."""
    from ui.apptest import app_test

    def lead():
        at = ok(app_test().run())
        at.sidebar.text_input(key="follow_key").input(KEY)
        return ok(at.button(key="follow_start").click().run())

    first = lead()
    code = first.session_state["follow_lead"].code
    again = " ".join(c.value for c in lead().sidebar.caption)
    assert f"Class {code} was running: you lead it again, and no student follows it now." in again
    room = key_set.classroom()
    room.join(code, "aaaa0000aaaa0000")
    room.join(code, "bbbb1111bbbb1111")
    again = " ".join(c.value for c in lead().sidebar.caption)
    assert f"Class {code} was running: you lead it again, and 2 students still follow it." in again


def test_a_reveal_gives_a_token_sampled_from_past_the_choices_its_own_odds_not_zero(bundled_lm):
    """A token sampled from outside the five candidates offered replaces the last of them; the reveal read "model 0%"
    for it, the token the model had just drawn. Its figure is now its probability at the sampling temperature,
    against transformers' own copy of the model over the same context."""
    import torch

    from classroom.poll import CHOICES
    from engine import Sampling
    from engine.load.load import DEFAULT_MODEL, MODELS_DIR
    from tests import reference

    found = None
    for seed in range(40):  # a step whose drawn token ranks past the choices offered (seed 0 finds one by step 12)
        s = Stepper(bundled_lm, "Once upon a time there was a girl named Lily.", max_new_tokens=30,
                    sampling=Sampling(greedy=False, temperature=1.5, seed=seed))
        s.prefill()
        while not s.done and found is None:
            held = s.step()
            if [c.token_id for c in held.top].index(held.token_id) >= CHOICES:
                found = held, s.ids[:, :-1]
        if found:
            break
    held, context = found
    q = next_token_question(held, "")
    with torch.no_grad():
        logits = reference.model(str(MODELS_DIR / DEFAULT_MODEL))(context).logits[0, -1]
    want = float(torch.softmax(logits / 1.5, -1)[held.token_id])
    assert q["answer"] in q["choices"] and len(q["choices"]) == CHOICES
    assert q["model"][q["answer"]] == pytest.approx(want, abs=1e-5), (q["model"], want)
    from html import unescape

    from classroom.poll_draw import compact_html, poll_html

    for html in (poll_html(q, {}, revealed=True), compact_html(q, {})):  # a student's reveal, the projector's
        row = unescape(html.split(f'data-choice="{q["answer"]}"')[1].split('data-choice=')[0])  # as read
        assert "model 0%" not in row and ("model <1%" in row if want < 0.005 else f"model {want:.0%}" in row), row


@pytest.mark.parametrize("revealed", [False, True], ids=["asked", "revealed"])
def test_a_lecturer_who_reloads_leaves_no_question_of_the_old_page_over_the_new_run(key_set, revealed):
    """The lecturer's page reloaded (the key typed again: the same class) kept the old page's question in the class:
    its answer "·there" over the new prompt's stage, or a question open for votes that nobody could reveal."""
    from ui.apptest import app_test

    def lead():
        at = ok(app_test().run())
        at.sidebar.text_input(key="follow_key").input(KEY)
        return ok(at.button(key="follow_start").click().run())

    first = lead()
    ok(first.button(key="step_btn_prefill").click().run())
    ok(first.button(key="follow_ask_next").click().run())
    if revealed:
        ok(first.button(key="follow_reveal").click().run())
    code, room = first.session_state["follow_lead"].code, key_set.classroom()
    assert room.live(code)["poll"] is not None  # the class has the question

    again = lead()
    assert again.session_state["follow_lead"].code == code
    assert room.live(code)["poll"] is None or room.polls.current(code) is None
    again.text_input(key="step_prompt").input("Tom had a red ball.")
    ok(again.run())
    ok(again.button(key="step_btn_prefill").click().run())
    live = room.live(code)
    assert "Tom had a red ball." in room.frame(code, live["frame"])["text"]
    assert live["poll"] is None and room.polls.current(code) is None, live["poll"]


def test_while_a_question_holds_a_step_the_projectors_status_counts_what_the_class_sees(key_set):
    """Asking takes the next step and holds it back from the class, but the lecturer's status line (on the
    projector, in front of the class) counted it: "4 new tokens · step 2 of 3", and "Finished" when the held step
    was the last, while every student's screen said "3 new tokens · step 2"."""
    import re

    from ui.apptest import app_test

    at = ok(app_test().run())
    at.sidebar.number_input(key="side_max_new").set_value(3)
    ok(at.run())
    at.sidebar.text_input(key="follow_key").input(KEY)
    ok(at.button(key="follow_start").click().run())
    ok(at.button(key="step_btn_prefill").click().run())
    ok(at.button(key="step_btn_next").click().run())
    ok(at.button(key="follow_ask_next").click().run())  # takes step 2, the last of 3 tokens, and holds it
    code, room = at.session_state["follow_lead"].code, key_set.classroom()
    frame = room.frame(code, room.live(code)["frame"])
    lecturers = " ".join(m.value for m in at.markdown)
    tokens = int(re.search(r"\*\*(\d+) new tokens?\*\*", lecturers).group(1))
    assert tokens == int(re.search(r"<b>(\d+) new tokens?</b>", frame["status"]).group(1)) == 2, (lecturers, frame)
    assert "step **1** of 1 (decode, newest)" in lecturers and "Finished" not in lecturers and not frame["done"]
    ok(at.button(key="follow_reveal").click().run())
    lecturers = " ".join(m.value for m in at.markdown)
    assert "**3 new tokens**" in lecturers and "step **2** of 2" in lecturers and "**Finished**" in lecturers
