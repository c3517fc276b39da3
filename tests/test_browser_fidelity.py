"""The back row and the phone, in a real browser: nothing clips, the figures start on the first screen, the big
numbers are big, the newest column is on a phone's screen, and a lesson keeps what it made once.

System Chromium via Playwright against `streamlit run app.py`, as in tests/test_browser.py (fixtures in
tests/conftest.py).
"""

from __future__ import annotations

import base64
import re
import time

import pytest
from playwright.sync_api import expect

from drawing.views import VIEWS  # the step page's seven views, default first: defined once
from engine.timing import now
from tests.test_browser import NOT_RUNNING, idle, open_page

PRESENTER = (1280, 720)
PHONE = (390, 844)


def stepped(pg, steps: int = 1, prompt: str | None = None) -> None:
    """Prefill (and `steps` Next tokens) from the control bar, as a lecturer would."""
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    if prompt:
        box = pg.get_by_placeholder("Type a prompt, then Prefill (P)")
        box.fill(prompt)
        box.press("Enter")
        idle(pg)
    pg.get_by_role("button", name="Prefill").click()
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    for i in range(steps):
        pg.get_by_role("button", name="Next token").click()
        expect(pg.get_by_text(re.compile(rf"\({i + 1} from decode steps\)"))).to_be_visible()
    idle(pg)


def pick(pg, view: str) -> None:
    pg.locator("[data-testid='stRadio'] label").filter(has_text=re.compile(f"^{re.escape(view)}$")).first.click()
    idle(pg)


def views_column(pg):
    """The column beside the stage that holds the view picker and the chosen view."""
    return pg.locator("[data-testid='stColumn']").filter(has=pg.locator("[data-testid='stRadio']")).first


CLIPPED = """(col) => {
  const box = col.getBoundingClientRect();
  const bad = [];
  const skip = (el) => el.closest('.katex-mathml, .modebar-container, [data-testid=stElementToolbar], [role=tooltip]');
  for (const el of col.querySelectorAll('*')) {
    if (skip(el)) continue;
    const style = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    if (style.display === 'none' || style.visibility === 'hidden' || r.width <= 1 || r.height <= 1) continue;  // and a
    if (el instanceof SVGElement && el.tagName.toLowerCase() !== 'svg') continue;  // screen reader's 1 px text; a chart's
    // inner parts are checked below by their words (its invisible drag handles reach past its edge by design)
    const name = el.tagName + '.' + (el.getAttribute('data-testid') || el.getAttribute('class') || '');
    const blank = !(el.textContent || '').trim() && !['IMG', 'CANVAS', 'svg'].includes(el.tagName) &&
      ['rgba(0, 0, 0, 0)', 'transparent'].includes(style.backgroundColor) && style.borderRightStyle === 'none';
    // an invisible handle (a table's resize corner) may reach past the edge; nothing one can see may
    if (!blank && (r.right > box.right + 1 || r.left < box.left - 1))
      bad.push(['outside', name, (el.textContent || '').slice(0, 40)]);
    if (!(el instanceof SVGElement) && el.scrollWidth > el.clientWidth + 3 && el.clientWidth > 0 &&  // sub-pixel slack
        ['auto', 'scroll', 'hidden', 'clip'].includes(style.overflowX))
      bad.push(['scrolls or clips', name, (el.textContent || '').slice(0, 40)]);
  }
  for (const t of col.querySelectorAll('svg.main-svg text')) {  // a chart's own words: inside its picture
    const svg = t.closest('svg').getBoundingClientRect(), r = t.getBoundingClientRect();
    if (r.width && (r.right > svg.right + 1 || r.left < svg.left - 1)) bad.push(['chart text', t.textContent]);
  }
  return bad;
}"""




@pytest.fixture(scope="module")
def projector(server, browser):
    """One lecturer's page at 1280x720 in presenter mode, a prefill and 3 Next tokens in (as a lecturer would click
    them); each test below picks its view on it, as the lecturer does, instead of opening and stepping a page again."""
    pg = open_page(browser, server + "/?presenter=on", *PRESENTER)
    stepped(pg, 3)
    yield pg
    pg.close()


@pytest.mark.parametrize("view", VIEWS)
def test_nothing_in_the_view_clips_or_scrolls_sideways_at_1280x720_presenter(projector, view):
    """The Matmuls table and the KV-cache formula first among them."""
    pg = projector
    pick(pg, view)
    pg.wait_for_timeout(1000)  # the view before it is gone, not only dimmed
    idle(pg)
    column = views_column(pg)
    assert column.evaluate(CLIPPED) == []


@pytest.mark.parametrize("view, main", [
    ("Attention", "[data-testid='stPlotlyChart']"), ("Next token", "[data-testid='stPlotlyChart']"),
    ("Matmuls", "[data-testid='stPlotlyChart']"), ("Shapes", "[data-testid='stTable']"),
    ("KV cache", "[data-testid='stTable']"), ("Latency", "[data-testid='stPlotlyChart']"),
])
def test_the_chosen_views_main_figure_starts_on_the_first_screen_and_its_title_is_whole(projector, view, main):
    pg = projector
    pg.evaluate("window.scrollTo(0, 0)")
    pick(pg, view)
    pg.wait_for_timeout(600)  # the view before it is gone, not only dimmed
    column = views_column(pg)
    figure = column.locator(main).first
    top = figure.bounding_box()["y"]
    assert top < PRESENTER[1] - 100, (view, top)  # at least 100 px of it on the first screen
    for title in column.locator(".gtitle").all():  # a chart's title is never cut ("the most likel")
        svg = title.evaluate("t => t.closest('svg').getBoundingClientRect().right")
        box = title.bounding_box()
        assert box["x"] + box["width"] <= svg + 1, title.inner_text()


def test_presenter_mode_grows_the_metric_values_with_the_rest(server, browser):
    pg = open_page(browser, server + "/?presenter=on", *PRESENTER)
    stepped(pg, 2)
    pick(pg, "Latency")
    value = views_column(pg).locator("[data-testid='stMetricValue']").first
    expect(value).to_be_visible()
    metric = value.evaluate("e => parseFloat(getComputedStyle(e.querySelector('*') || e).fontSize)")
    body = pg.get_by_text(re.compile(r"from decode steps")).first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    assert metric >= 1.3 * body, (metric, body)
    pg.close()


def test_lesson_9_draws_its_lookahead_figure(server, browser):
    pg = open_page(browser, server + "/lessons?lesson=9&presenter=on", *PRESENTER)
    pg.get_by_text("Next idea: lookahead decoding").first.click()  # it folds under the lesson's first screen
    picture = pg.locator("[data-testid='dl-lookahead'] img")
    expect(picture).to_be_visible()
    picture.scroll_into_view_if_needed()
    box = picture.bounding_box()
    assert box["height"] > 150 and box["width"] > 600  # drawn, not a 0 px box
    assert picture.evaluate("img => img.complete && img.naturalHeight > 0")
    pg.close()


def _stage_svg(pg) -> str:
    """The stage picture the browser shows (on a phone, the phone's layout of it)."""
    src = pg.locator("[data-testid='dl-stage'] img:visible").get_attribute("src")
    return base64.b64decode(src.split("base64,", 1)[1]).decode()


def test_on_a_phone_the_new_kv_column_and_the_next_token_are_on_screen_and_no_toolbar_covers_a_title(server, browser):
    pg = open_page(browser, server, *PHONE)
    stepped(pg, 2)
    img = pg.locator("[data-testid='dl-stage'] img:visible")
    box = img.bounding_box()
    svg = _stage_svg(pg)
    width = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))

    def on_screen(x: float, w: float) -> bool:
        left = box["x"] + x / width * box["width"]
        return left >= -1 and left + w / width * box["width"] <= PHONE[0] + 1

    new = re.search(r'data-role="k-col" data-pos="\d+" data-kind="\w+" data-new="1"><rect x="([\d.]+)" y="[\d.]+" '
                    r'width="([\d.]+)"', svg)
    assert on_screen(float(new.group(1)), float(new.group(2))), box
    chip = re.search(r'data-role="chosen-chip"><rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    assert on_screen(float(chip.group(1)), float(chip.group(2))), box
    chart = pg.locator("[data-testid='stPlotlyChart']").first
    chart.scroll_into_view_if_needed()
    chart.hover()
    pg.wait_for_timeout(300)
    shown = pg.evaluate("() => [...document.querySelectorAll('.modebar-container, [data-testid=stElementToolbar]')]"
                        ".filter(e => getComputedStyle(e).display !== 'none' && e.getBoundingClientRect().height > 0)"
                        ".length")
    assert shown == 0
    pg.close()


@pytest.mark.parametrize("presenter", [True, False], ids=["presenter", "plain"])
def test_a_pages_title_is_larger_than_its_section_headers(server, browser, presenter):
    pg = open_page(browser, server + "/scale" + ("?presenter=on" if presenter else ""), *PRESENTER)
    expect(pg.get_by_role("heading", name="Roofline", exact=True)).to_be_visible()
    size = {tag: pg.locator(f"[data-testid='stMain'] {tag}").first.evaluate(
        "e => parseFloat(getComputedStyle(e).fontSize)") for tag in ("h1", "h2", "h3")}
    assert size["h1"] > size["h2"] > size["h3"], size
    pg.close()


def test_lesson_6_keeps_its_story_when_the_seed_changes(server, browser):
    """A new seed draws anew at once and the story below is the one already made: the page never generates it again
    (its bar never shows). What a seed costs is timed by `python -m engine bench` (lesson 6, target <= 1 s)."""
    pg = open_page(browser, server + "/lessons?lesson=6", *PRESENTER)
    expect(pg.get_by_text(re.compile(r"reason: eos"))).to_be_visible(timeout=120_000)  # made once, with a bar
    idle(pg)
    story = pg.locator("[data-testid='stMain'] [data-testid='stText']").last.inner_text()
    seed = pg.locator("[data-testid='stMain'] [data-testid='stNumberInput']").filter(has_text="seed")
    for n in (1, 2):  # each new seed: the page reruns with the story kept, and shows the new seed's draw
        t0 = now()
        seed.get_by_role("button", name=re.compile("increment", re.I)).click()
        shown = False
        while now() - t0 < 30:  # until this seed's draw is on screen and the app has stopped running
            main = pg.evaluate("() => document.querySelector('[data-testid=stMain]').innerText")
            assert "Generating a story" not in main, f"seed {n}: the story was generated again"
            if f", seed {n})" in main and pg.evaluate(NOT_RUNNING):
                shown = True
                break
            time.sleep(0.03)
        assert shown, f"seed {n}'s draw never showed: the click was lost"
        idle(pg)
        assert pg.locator("[data-testid='stMain'] [data-testid='stText']").last.inner_text() == story
    expect(pg.get_by_text(re.compile(r"reason: eos"))).to_be_visible()
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()
