"""The class in real browsers (system Chromium): followers follow every page, a student's ‹ and Live answer at
once, a lecturer who reloads gets the same class back, and the class's votes reach the projector.

One app server with a lecturer key for the module; a lecturer page and three follower pages per test.
"""

from __future__ import annotations

import re
import time

from playwright.sync_api import expect

from tests.test_browser import idle, open_page
from tests.test_follow import start_class, wait_for_step


def lecture(browser, url: str, steps: int = 0):
    """A lecturer's page (1280x720) leading a class, `steps` Next tokens after Prefill; (page, follow link)."""
    lect = open_page(browser, url, 1280, 720)
    expect(lect.get_by_role("button", name="Prefill")).to_be_enabled()
    link = start_class(lect)
    lect.keyboard.press("p")
    expect(lect.get_by_text(re.compile(r"\(0 from decode steps\)"))).to_be_visible()
    for i in range(1, steps + 1):
        lect.keyboard.press("n")
        expect(lect.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    return lect, link


def lecturer_moves_on(lect, step: int) -> None:
    """The lecturer presses N and sees step `step` on their own screen, as a lecturer does before talking on.

    The follower's latency is counted from there: on a loaded machine the lecturer's own rerun can take seconds,
    and that is the lecturer's page, not the class."""
    lect.keyboard.press("n")
    expect(lect.get_by_text(re.compile(rf"\({step} from decode steps\)"))).to_be_visible(timeout=30_000)


def follow(browser, link: str, sizes=((1280, 800), (390, 844), (1440, 900))):
    return [open_page(browser, link, w, h) for w, h in sizes]


def where(pg) -> str:
    return pg.get_by_test_id("dl-follow-where").inner_text()


def shown_page(pages, text: str, timeout_s: float = 10) -> None:
    """Every follower's live view names `text` (a page and its frame) within the time."""
    for pg in pages:
        expect(pg.get_by_test_id("dl-follow-where")).to_contain_text(text, timeout=timeout_s * 1000)


def sidebar_page(pg, title: str) -> None:
    pg.locator("[data-testid=stSidebar] a").filter(has_text=title).first.click()
    idle(pg)


def test_three_followers_follow_the_lecturer_across_step_through_lessons_and_serving(keyed_server, browser):
    lect, link = lecture(browser, keyed_server, steps=2)
    followers = follow(browser, link)
    assert max(wait_for_step(followers, 2, 5)) < 5

    sidebar_page(lect, "Lessons")  # the lecturer opens lesson 4 and moves its slider
    for n in (2, 3, 4):  # as a lecturer does: the next press once the new lesson is on screen
        lect.get_by_role("button", name="Next").click()
        expect(lect.get_by_role("heading", level=2).filter(has_text=re.compile(rf"^{n}\. "))).to_be_visible()
        idle(lect)
    shown_page(followers, "Lessons · 4. The KV cache")
    for pg in followers:
        expect(pg.get_by_test_id("dl-follow-page")).to_contain_text("try it: decode steps: 8")
        fold = pg.locator("details.dlf-group").filter(has_text="The numbers, in full")  # folded, as the lecturer's
        expect(fold.get_by_text("Checked on this run")).to_be_hidden()
        fold.locator("summary").click()  # a student opens it, and it stays open when the lecturer moves on
        expect(fold.get_by_text("Checked on this run")).to_be_visible()
    thumb = lect.get_by_role("slider", name=re.compile("decode steps"))
    thumb.focus()
    for _ in range(4):
        lect.keyboard.press("ArrowRight")
    idle(lect)
    expect(lect.get_by_text(re.compile("After prefill and 12 decode steps"))).to_be_visible()
    for pg in followers:
        expect(pg.get_by_test_id("dl-follow-page")).to_contain_text("try it: decode steps: 12", timeout=10_000)
        expect(pg.get_by_test_id("dl-follow-page")).to_contain_text("After prefill and 12 decode steps")
        expect(pg.locator("details.dlf-group[open]").filter(has_text="The numbers, in full")).to_have_count(1)

    sidebar_page(lect, "Serving")  # then Serving, three engine steps in
    for _ in range(4):
        lect.get_by_role("button", name=re.compile("▶ step")).click()
        idle(lect)
    shown_page(followers, "Serving: many requests · engine step 3")
    for pg in followers:  # the step's pass, as drawn for the lecturer
        expect(pg.locator("[data-testid=dl-follow-page] [data-testid=dl-pass] img:visible")).to_have_attribute(
            "alt", re.compile(r"^step 3: one forward pass"))

    sidebar_page(lect, "Step through")  # and back: the step run is published again, at the step on screen
    expect(lect.get_by_text(re.compile(r"\(2 from decode steps\)"))).to_be_visible()
    at = int(re.search(r"step (\d+) of 2", lect.get_by_text(re.compile("from decode steps")).first.inner_text()).group(1))
    assert max(wait_for_step(followers, at, 10)) < 10
    for pg in [lect, *followers]:
        assert pg.locator("[data-testid='stException']").count() == 0 and pg.outside == []
        pg.close()


def test_a_students_back_and_live_act_within_a_second_every_time(keyed_server, browser):
    lect, link = lecture(browser, keyed_server, steps=3)
    (pg,) = follow(browser, link, sizes=((1280, 800),))
    expect(pg.locator("[data-testid=dl-follow-stage][data-step='3']")).to_be_visible()
    for i in range(5):  # every time, and while the follower waits for the lecturer
        t0 = time.monotonic()
        pg.get_by_test_id("dl-follow-back").click()
        expect(pg.locator(f"[data-testid=dl-follow-stage][data-step='{2 + i}']")).to_be_visible(timeout=1000)
        assert "looking back" in where(pg)
        back_s = time.monotonic() - t0
        t0 = time.monotonic()
        pg.get_by_test_id("dl-follow-live").click()
        expect(pg.locator(f"[data-testid=dl-follow-stage][data-step='{3 + i}']")).to_be_visible(timeout=1000)
        assert "live" in where(pg) and back_s < 1.0 and time.monotonic() - t0 < 1.0
        lecturer_moves_on(lect, 4 + i)  # the student is live, and sees it
        expect(pg.locator(f"[data-testid=dl-follow-stage][data-step='{4 + i}']")).to_be_visible(timeout=5000)
    pg.get_by_test_id("dl-follow-back").click()
    lecturer_moves_on(lect, 9)  # looking back stays where it is when the lecturer moves...
    expect(pg.get_by_test_id("dl-follow-where")).to_contain_text("the lecturer is at Step through · step 9")
    expect(pg.locator("[data-testid=dl-follow-stage][data-step='7']")).to_be_visible()
    pg.get_by_test_id("dl-follow-live").click()  # ...until Live
    expect(pg.locator("[data-testid=dl-follow-stage][data-step='9']")).to_be_visible(timeout=1000)
    for p in (lect, pg):
        p.close()


def test_a_lecturer_who_reloads_and_types_the_key_again_gets_the_same_class_with_its_students(keyed_server, browser):
    lect, link = lecture(browser, keyed_server, steps=1)
    code = link[-6:]
    followers = follow(browser, link, sizes=((1280, 800), (390, 844)))
    assert max(wait_for_step(followers, 1, 5)) < 5
    lect.reload(wait_until="networkidle")  # the lecturer's page forgets it led a class (a new session)
    expect(lect.get_by_text(re.compile(r"\(1 from decode steps\)"))).to_be_visible()  # its link replays the run
    again = start_class(lect)
    assert again == link  # the same code
    expect(lect.get_by_test_id("stSidebar")).to_contain_text(f"Class {code} was running")
    expect(lect.get_by_test_id("dl-class-following")).to_contain_text(" following")
    following = int(re.search(r"(\d+) following", lect.get_by_test_id("dl-class-following").inner_text()).group(1))
    assert following >= 2  # the students are still there (and any who left in the last 20 s)
    lect.keyboard.press("n")
    expect(lect.get_by_text(re.compile(r"\(2 from decode steps\)"))).to_be_visible()
    assert max(wait_for_step(followers, 2, 5)) < 5  # and follow the resumed page without reloading theirs
    for pg in [lect, *followers]:
        pg.close()


def test_three_followers_vote_the_projector_counts_them_and_reveal_puts_the_models_odds_beside(keyed_server,
                                                                                               browser):
    lect, link = lecture(browser, keyed_server, steps=1)
    followers = follow(browser, link)
    assert max(wait_for_step(followers, 1, 5)) < 5
    lect.get_by_role("button", name="Ask the class").click()
    lect.get_by_role("button", name="What comes next?").click()
    idle(lect)
    expect(lect.get_by_test_id("dl-poll")).to_be_visible()
    for pg in followers:
        expect(pg.locator("[data-testid=dl-follow-poll] .dlf-choice")).to_have_count(5)
    choices = followers[0].locator(".dlf-choice").all_inner_texts()
    assert all("%" not in c for c in choices)  # no probabilities before the reveal
    assert len({tuple(pg.locator(".dlf-choice").all_inner_texts()) for pg in followers}) == 1
    followers[0].locator(".dlf-choice").nth(0).click()
    followers[1].locator(".dlf-choice").nth(1).click()
    followers[2].get_by_label("your word").fill("<img src=x onerror=alert(1)>")
    followers[2].get_by_role("button", name="Send").click()
    expect(followers[2].get_by_test_id("dl-follow-vote-said")).to_contain_text("plain word")  # refused, plainly
    followers[2].get_by_label("your word").fill(choices[0].strip("·"))
    followers[2].get_by_role("button", name="Send").click()
    for pg in followers:
        expect(pg.get_by_test_id("dl-follow-vote-said")).to_contain_text("Your vote is in")
    followers[0].locator(".dlf-choice").nth(2).click()  # a second vote
    expect(followers[0].get_by_test_id("dl-follow-vote-said")).to_contain_text("voted on this question already")
    expect(lect.locator("[data-testid=dl-poll][data-votes='3']")).to_be_visible(timeout=10_000)  # live, no click
    expect(lect.locator(f"[data-testid=dl-poll-row][data-choice='{choices[0]}']")).to_contain_text("2 votes")
    assert "model" not in lect.get_by_test_id("dl-poll").inner_text()

    lect.get_by_role("button", name="Reveal").click()
    idle(lect)
    expect(lect.get_by_test_id("dl-poll")).to_contain_text(re.compile(r"model \d+%"))
    expect(lect.get_by_text(re.compile(r"step 2 of 2"))).to_be_visible()  # the held step is shown now
    assert max(wait_for_step(followers, 2, 5)) < 5
    for pg in followers:  # the class sees the answer and the model's odds beside its votes
        expect(pg.get_by_test_id("dl-follow-poll")).to_contain_text(re.compile(r"model \d+%"))
        expect(pg.get_by_test_id("dl-follow-poll")).to_contain_text("✓")
        assert pg.locator("img[src='x']").count() == 0  # a typed word is never markup
    for pg in [lect, *followers]:
        assert pg.locator("[data-testid='stException']").count() == 0
        pg.close()


def test_a_prompt_written_as_markup_reaches_the_followers_stage_as_text_and_nothing_in_it_runs(keyed_server, browser):
    """The follower's tab places the stage's SVG in its page (classroom/follow.js): a prompt that is markup must arrive
    as the words it is, with no element or handler of its own, and nothing may run."""
    from urllib.parse import quote

    hostile = 'Tom <img src=x onerror=alert(1)><svg onload=alert(2)> ran "home"'
    lect, link = lecture(browser, f"{keyed_server}/?prompt={quote(hostile)}", steps=1)
    (pg,) = follow(browser, link, sizes=((1280, 800),))
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    stage = pg.locator("[data-testid=dl-follow-stage][data-step='1']")
    expect(stage).to_be_visible()
    expect(stage.locator("svg[data-role=stage]")).to_have_count(1)  # the stage itself, drawn
    expect(pg.get_by_test_id("dl-text")).to_contain_text("<img src=x onerror=alert(1)><svg onload=alert(2)>")
    inside = pg.evaluate("""() => {
      const s = document.querySelector('[data-testid=dl-follow-stage]');
      return { imgs: s.querySelectorAll('img').length, svgs: s.querySelectorAll('svg').length,
               handlers: [...s.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length };
    }""")
    assert inside == {"imgs": 0, "svgs": 1, "handlers": 0}, inside
    pg.wait_for_timeout(500)
    assert dialogs == []
    for p in (lect, pg):
        p.close()


def test_a_follower_looking_back_after_two_polls_sees_no_question_about_another_step(keyed_server, browser):
    """Two polls, then a follower goes back two steps: the step-2 stage sat under the step-4 question ('the model had
    seen 8 positions… [1, 2, 9, 32] ✓'). A question stays with its step; Live brings both back."""
    lect, link = lecture(browser, keyed_server, steps=2)
    (pg,) = follow(browser, link, sizes=((1280, 800),))
    assert max(wait_for_step([pg], 2, 10)) < 10
    for held in (3, 4):
        lect.get_by_role("button", name="Ask the class").click()
        lect.get_by_role("button", name="K's shape after this step?").click()
        idle(lect)
        expect(pg.get_by_test_id("dl-follow-poll")).to_contain_text("K's shape")
        lect.get_by_role("button", name="Reveal").click()
        idle(lect)
        assert max(wait_for_step([pg], held, 10)) < 10
        expect(pg.get_by_test_id("dl-follow-poll")).to_contain_text("✓")
    for _ in range(2):
        pg.get_by_test_id("dl-follow-back").click()
    expect(pg.locator("[data-testid=dl-follow-stage][data-step='2']")).to_be_visible()
    poll = pg.get_by_test_id("dl-follow-poll")
    expect(poll).to_contain_text("about step 4")
    assert "K's shape" not in poll.inner_text() and "✓" not in poll.inner_text()
    pg.get_by_test_id("dl-follow-forward").click()
    pg.get_by_test_id("dl-follow-forward").click()
    expect(pg.locator("[data-testid=dl-follow-stage][data-step='4']")).to_be_visible()
    expect(poll).to_contain_text("✓")  # at its own step the question and its answer are back
    for p in (lect, pg):
        assert p.locator("[data-testid='stException']").count() == 0
        p.close()


def test_after_the_reveal_the_lecturers_stage_stays_on_the_projectors_first_screen(keyed_server, browser):
    """After a poll's reveal its bars stood above the stage and pushed the stage below the fold at 1280x720: the
    revealed answer is one line of chips, and the stage's picture still starts on the first screen."""
    lect, link = lecture(browser, keyed_server, steps=1)
    (pg,) = follow(browser, link, sizes=((1280, 800),))
    assert max(wait_for_step([pg], 1, 10)) < 10
    lect.get_by_role("button", name="Ask the class").click()
    lect.get_by_role("button", name="What comes next?").click()
    idle(lect)
    lect.get_by_role("button", name="Reveal").click()
    idle(lect)
    poll = lect.get_by_test_id("dl-poll")
    expect(poll).to_contain_text("✓")
    expect(poll).to_contain_text(re.compile(r"model \d+%"))
    assert poll.bounding_box()["height"] <= 90, poll.bounding_box()  # a line or two, not a row a choice
    stage = lect.locator("[data-testid=dl-stage] img:visible").first
    assert stage.bounding_box()["y"] + 200 <= 720, stage.bounding_box()  # its first 200 px on the first screen
    for p in (lect, pg):
        assert p.locator("[data-testid='stException']").count() == 0
        p.close()


HEATMAPS = """() => [...document.querySelectorAll('.dlf-figure.js-plotly-plot')].map(f => ({
  title: (f.querySelector('.gtitle') || {}).textContent || '',
  heatmaps: f.data.filter(t => t.type === 'heatmap').length,
  zerolines: f.querySelectorAll('.zerolinelayer path').length,
  right: f.getBoundingClientRect().right}))"""


def test_a_lecturers_every_query_row_toggle_is_drawn_on_each_followers_screen_and_turned_off_again(keyed_server,
                                                                                                  browser):
    """The lecturer's "every query row (one panel per head)" at a prefill: each follower draws the same chart (one
    heatmap panel per head, every row), whole on a phone, without a line across its first row (plotly's zero line,
    which the lecturer's theme does not draw); turned off, each follower is back to the newest row's picture."""
    lect, link = lecture(browser, keyed_server, steps=0)
    followers = follow(browser, link, sizes=((1280, 800), (390, 844)))
    for pg in followers:
        expect(pg.get_by_test_id("dl-follow-heads")).to_be_visible(timeout=30_000)  # the newest row, each head
    lect.get_by_text("every query row (one panel per head)").click()
    idle(lect)
    lecturers = lect.evaluate("""() => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')]
      .map(f => f.data.filter(t => t.type === 'heatmap').length).filter(n => n > 0)""")
    assert lecturers and lecturers[0] > 1, lecturers
    for pg, width in zip(followers, (1280, 390)):
        pg.locator(".dlf-figure.js-plotly-plot").first.wait_for(state="attached", timeout=30_000)
        pg.wait_for_function("() => document.querySelector('.dlf-figure.js-plotly-plot .gtitle') !== null")
        (chart,) = pg.evaluate(HEATMAPS)
        assert chart["title"].startswith("layer 0: every head") and chart["heatmaps"] == lecturers[0], chart
        assert chart["zerolines"] == 0 and chart["right"] <= width, chart
    lect.get_by_text("every query row (one panel per head)").click()  # the click after: off again
    idle(lect)
    for pg in followers:
        expect(pg.get_by_test_id("dl-follow-heads")).to_be_visible(timeout=30_000)
        assert pg.evaluate(HEATMAPS) == []


def test_a_follower_walks_engine_steps_in_time_order_after_the_lecturer_runs_to_the_end_and_steps_back(
        keyed_server, browser):
    """Serving's Run to end shows the class the last engine step; the lecturer's ◀ then shows the one before it.
    A student's › from there is the last step, drawn (its frame fetched by the id the timeline gives); before, the
    step stepped back to was put after the last one, and › went nowhere."""
    lect, link = lecture(browser, keyed_server, steps=0)
    (pg,) = follow(browser, link, sizes=((1280, 800),))
    sidebar_page(lect, "Serving")
    lect.get_by_role("button", name="Run to end").click()
    idle(lect)
    expect(pg.get_by_test_id("dl-follow-where")).to_contain_text("engine step", timeout=30_000)
    last = int(re.search(r"engine step (\d+)", where(pg)).group(1))
    lect.get_by_role("button", name="◀").click()
    idle(lect)
    expect(pg.get_by_test_id("dl-follow-where")).to_contain_text(f"engine step {last - 1}", timeout=10_000)
    pg.get_by_test_id("dl-follow-forward").click()
    expect(pg.get_by_test_id("dl-follow-where")).to_contain_text("looking back", timeout=5_000)
    expect(pg.locator("[data-testid=dl-follow-page] [data-testid=dl-pass] img:visible")).to_have_attribute(
        "alt", re.compile(rf"^step {last}: one forward pass"))
    assert f"engine step {last}" in where(pg) and "not part of this class" not in pg.content()
    for p in (lect, pg):
        assert p.locator("[data-testid='stException']").count() == 0 and p.outside == []
        p.close()


def test_a_lecturers_one_head_every_step_so_far_appears_under_each_followers_view_and_goes_again(keyed_server,
                                                                                                  browser):
    """The lecturer's "one head, every step so far", two decode steps in: each follower draws it under the view,
    the prefill's rows and one per decode step, whole on a phone; switched off, it goes from every screen."""
    lect, link = lecture(browser, keyed_server, steps=2)
    followers = follow(browser, link, sizes=((1280, 800), (390, 844)))
    for pg in followers:
        expect(pg.get_by_test_id("dl-follow-heads")).to_be_visible(timeout=30_000)
    lect.get_by_text("one head, every step so far").click()
    idle(lect)
    for pg, width in zip(followers, (1280, 390)):
        pg.wait_for_function("""() => [...document.querySelectorAll('.dlf-figure.js-plotly-plot .gtitle')]
          .some(t => t.textContent.startsWith('layer 0, head 0'))""", timeout=30_000)
        (chart,) = [c for c in pg.evaluate(HEATMAPS) if c["title"].startswith("layer 0, head 0")]
        assert chart["zerolines"] == 0 and chart["right"] <= width, chart
        expect(pg.get_by_test_id("dl-follow-heads")).to_be_visible()  # the view stays above it
    lect.get_by_text("one head, every step so far").click()  # the click after: off again
    idle(lect)
    for pg in followers:
        pg.wait_for_function("() => document.querySelectorAll('.dlf-figure.js-plotly-plot').length === 0",
                             timeout=30_000)
    for p in [lect, *followers]:
        assert p.locator("[data-testid='stException']").count() == 0 and p.outside == []
        p.close()


COLUMNS = """() => [...document.querySelectorAll('[data-testid=dl-follow-page] .dlf-row')].map(r => ({
  row: r.getBoundingClientRect().width,
  cols: [...r.children].map(c => ({ width: c.getBoundingClientRect().width, top: c.getBoundingClientRect().top }))}))"""


def test_a_lessons_columns_sit_side_by_side_on_a_projector_and_each_fills_a_phones_width(keyed_server, browser):
    """Lesson 2 lays its stage, mask and reason in three columns. A follower at 1280 sees them in one line; a
    follower on a phone sees each on its own line the phone's width, not squeezed to the narrowest column's share."""
    lect, link = lecture(browser, keyed_server, steps=0)
    followers = follow(browser, link, sizes=((1280, 800), (390, 844)))
    sidebar_page(lect, "Lessons")
    lect.get_by_role("button", name="Next").click()
    expect(lect.get_by_role("heading", level=2).filter(has_text=re.compile(r"^2\. "))).to_be_visible()
    shown_page(followers, "Lessons · 2.", timeout_s=30)
    wide, phone = followers
    for pg in followers:
        pg.wait_for_function("() => document.querySelectorAll('[data-testid=dl-follow-page] .dlf-row').length > 0")
    rows = [r for r in wide.evaluate(COLUMNS) if len(r["cols"]) == 3]
    assert rows, wide.evaluate(COLUMNS)
    for r in rows:  # one line: the three share a top, and the widest is under half the row
        assert len({round(c["top"]) for c in r["cols"]}) == 1 and max(c["width"] for c in r["cols"]) < r["row"] / 2, r
    phone_rows = phone.evaluate(COLUMNS)
    assert any(len(r["cols"]) == 3 for r in phone_rows), phone_rows
    for r in phone_rows:  # stacked, each the row's width
        assert r["row"] > 300 and all(c["width"] >= 0.97 * r["row"] for c in r["cols"]), r
    for pg in [lect, *followers]:
        assert pg.locator("[data-testid='stException']").count() == 0 and pg.outside == []
        pg.close()


def test_a_server_stopped_with_ctrl_c_exits_and_its_followers_say_they_are_reconnecting(browser, tmp_path):
    """Ctrl-C on a server a phone followed: the server stopped listening but never exited (it waited for the
    follower's stream, which never ends), and the phone went on saying 'live' for good. Now the stream ends with the
    server: the process exits and the phone says it is reconnecting."""
    import signal

    from tests.appserver import KEY, free_port, start_app, stop

    port = free_port()
    proc = start_app(port, log=open(tmp_path / "streamlit.log", "w"), DECODE_LAB_LECTURER_KEY=KEY)
    try:
        lect, link = lecture(browser, f"http://127.0.0.1:{port}")
        (phone,) = follow(browser, link, sizes=((390, 844),))
        assert wait_for_step([phone], 0, 30)[0] < 30
        expect(phone.get_by_test_id("dl-follow-where")).to_contain_text("live")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)  # raises if the server is still waiting for its followers
        expect(phone.get_by_test_id("dl-follow-where")).to_contain_text("reconnecting", timeout=10_000)
        phone.close()
        lect.close()
    finally:
        stop(proc)


def test_a_phone_following_a_projector_on_the_scale_page_keeps_every_charts_words_inside_and_apart(
        keyed_server, browser):
    """The lecturer's charts are drawn for a projector (text ×1.35); a phone following drew them with that text, so
    a subtitle ran off both sides, a note off the right and the rung names over each other. A phone now brings
    every text back to its own size (never under 11 px): each chart's words inside it, none over another."""
    from tests.test_browser_way_through import APART, SMALL_WORDS

    lect = open_page(browser, keyed_server + "/?presenter=on", 1280, 720)
    expect(lect.get_by_role("button", name="Prefill")).to_be_enabled(timeout=120_000)
    lect.get_by_test_id("stExpandSidebarButton").click()  # presenter mode folds the sidebar away
    link = start_class(lect)
    sidebar_page(lect, "Scale")
    expect(lect.locator(".js-plotly-plot").first).to_be_visible(timeout=120_000)
    idle(lect)
    (phone,) = follow(browser, link, sizes=((390, 844),))
    shown_page([phone], "Scale", timeout_s=30)
    plots = phone.locator(".dlf-figure.js-plotly-plot")
    expect(plots.first).to_be_visible(timeout=30_000)
    phone.wait_for_timeout(1500)  # every chart drawn (each once its box is on the page)
    assert plots.count() >= 4
    for i in range(plots.count()):
        plot = plots.nth(i)
        title = plot.evaluate("p => (p.querySelector('.gtitle') || {}).textContent")
        assert plot.evaluate(APART) == [], title
        assert plot.evaluate(SMALL_WORDS) == [], title
    assert phone.evaluate("document.documentElement.scrollWidth") == 390
    phone.close()
    lect.close()


def test_the_lecturers_count_of_followers_grows_as_a_phone_joins_without_a_click(keyed_server, browser):
    """The projector said '0 following' after a phone joined, until the lecturer's next click: the count is read
    again every few seconds."""
    lect, link = lecture(browser, keyed_server)
    count = lect.get_by_test_id("dl-class-following")
    expect(count).to_have_text(re.compile(r"^\d+ following$"))
    before = int(count.inner_text().split()[0])
    (phone,) = follow(browser, link, sizes=((390, 844),))
    assert wait_for_step([phone], 0, 30)[0] < 30
    expect(count).to_have_text(f"{before + 1} following", timeout=12_000)  # no click on the lecturer's page
    phone.close()
    lect.close()


def test_a_phone_tapping_a_layer_box_on_the_stage_opens_that_layer(keyed_server, browser):
    """The stage's layer boxes look like buttons, and on a follower's phone a tap on one did nothing: it now opens
    that layer, as the picker above the stage does (the picker shows it picked)."""
    lect, link = lecture(browser, keyed_server, steps=1)
    (phone,) = follow(browser, link, sizes=((390, 844),))
    assert wait_for_step([phone], 1, 30)[0] < 30
    stage = phone.get_by_test_id("dl-follow-stage")
    expect(stage.locator("[data-role=layer][data-layer='0']")).to_have_attribute("data-open", "1")
    stage.locator("[data-role=layer][data-layer='2']").click()
    expect(stage.locator("[data-role=layer][data-layer='2']")).to_have_attribute("data-open", "1", timeout=10_000)
    expect(phone.locator(".dlf-btn.dlf-on[data-layer='2']")).to_be_visible()
    lect.keyboard.press("n")  # the lecturer moves on: the student's own layer stays
    assert wait_for_step([phone], 2, 30)[0] < 30
    expect(stage.locator("[data-role=layer][data-layer='2']")).to_have_attribute("data-open", "1")
    phone.close()
    lect.close()
