"""A real browser, end to end: system Chromium driven by Playwright against `streamlit run app.py`.

Chromium comes from the system (`apt-get install chromium`, see the README), never a browser download.
The fixtures are in tests/conftest.py: `browser` (the system Chromium) and `server` (the app on a free
loopback port, one for the whole session); both put these tests in the `browser` tier.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import expect

ROOT = Path(__file__).resolve().parent.parent
expect.set_options(timeout=60_000)  # the first page view loads the model
LOCAL = ("http://127.0.0.1", "data:", "blob:", "about:")
# the fixtures `browser` (system Chromium) and `server` (`streamlit run app.py`) are in tests/conftest.py


def open_page(browser, url: str, width: int = 1400, height: int = 1000):
    pg = browser.new_page(viewport={"width": width, "height": height})
    pg.set_default_timeout(60_000)
    pg.outside = []  # every request that leaves this machine
    pg.on("request", lambda r: pg.outside.append(r.url) if not r.url.startswith(LOCAL) else None)
    pg.sent = []  # (time.monotonic(), bytes) of each message the page sent its server: what a lost click did
    pg.on("websocket", lambda ws: ws.on("framesent", lambda frame: pg.sent.append((time.monotonic(), len(frame)))))
    pg.goto(url, wait_until="networkidle")
    return pg


NOT_RUNNING = """() => {
  const app = document.querySelector('[data-testid=stApp]');
  return app && app.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-testid=stStatusWidget], [data-testid=stSpinner]');
}"""


def idle(pg) -> None:
    """Wait until the app has finished running. Streamlit marks its root with the script's state
    (`data-test-script-state`, what its own browser tests wait on); its 'running' widget only appears after
    500 ms of running, so waiting on that alone misses a run that has just begun (a spinner still on screen)."""
    pg.wait_for_timeout(250)
    pg.wait_for_function(NOT_RUNNING, timeout=60_000)
    pg.wait_for_timeout(250)


def status_text(pg) -> str:
    return pg.get_by_text(re.compile(r"from decode steps")).first.inner_text()


def inside(pg, locator) -> bool:
    """The element's whole box is on the first screen: nothing to scroll to see it."""
    box = locator.bounding_box()
    vp = pg.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= vp["height"] + 1


PAGE_TITLES = ["Step through", "Lessons", "Race: cache vs no cache", "Speculative decoding", "Serving: many requests",
               "Scale: KV memory and roofline", "KV cache on a budget", "Model"]


def sidebar_links(pg) -> list[str]:
    return [t.strip().split("\n")[-1] for t in pg.locator("[data-testid=stSidebar] a").all_inner_texts()]


def test_a_deep_link_as_the_servers_first_request_gets_the_whole_app(fresh_server, browser):
    """Streamlit serves a fresh server's first request in its old `pages/` folder mode; /lessons must still get
    app.py's frame, and the menu must never list a file name (checked while the first run is still going)."""
    pg = open_page(browser, f"{fresh_server}/lessons?seed=3")
    seen = set()
    for _ in range(40):  # the first run loads the model: watch the menu all along
        seen |= set(sidebar_links(pg))
        if pg.get_by_role("heading", name="Lessons: how a language model generates text").count():
            break
        pg.wait_for_timeout(250)
    expect(pg.get_by_role("heading", name="Lessons: how a language model generates text")).to_be_visible()
    expect(pg.get_by_role("link", name=re.compile("Step through"))).to_be_visible()  # app.py's links
    seen |= set(sidebar_links(pg))
    assert seen <= set(PAGE_TITLES), seen  # only pages, by their titles: never shared.py or a helper
    assert sidebar_links(pg) == PAGE_TITLES
    assert pg.locator("[data-testid='stException']").count() == 0
    assert "seed=3" in pg.url  # the link's settings survived
    pg.close()


@pytest.mark.parametrize("width, height, presenter", [(1280, 720, True), (1280, 720, False), (390, 844, False)],
                         ids=["projector-presenter", "projector", "phone"])
def test_after_p_and_n_the_stage_and_the_view_are_on_the_first_screen(server, browser, width, height, presenter):
    pg = open_page(browser, server + ("/?presenter=on" if presenter else ""), width, height)
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    pg.keyboard.press("p")
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    pg.keyboard.press("n")
    expect(pg.get_by_text(re.compile(r"\(1 from decode steps\)"))).to_be_visible()
    idle(pg)
    stage = pg.locator("[data-testid='dl-stage'] img:visible")  # the wide picture, or on a phone the phone's layout
    expect(stage).to_be_visible()
    view = pg.locator("[data-testid='stRadio']").filter(has_text="Attention")  # the view picker
    if width >= 1000:  # beside the stage: the picker whole, and the chosen view's chart starts on the first screen
        assert inside(pg, stage), stage.bounding_box()
        assert inside(pg, view), view.bounding_box()
        assert pg.locator("[data-testid='stPlotlyChart']").first.bounding_box()["y"] < height - 150
    else:  # a phone stacks the view under a stage drawn for its width (no word under 11 px): the stage starts on
        # the first screen (its title, layer buttons and newest column: tests/test_browser_way_through.py), the view
        # picker follows it
        assert stage.bounding_box()["y"] < height / 2, stage.bounding_box()
        assert view.bounding_box()["y"] > stage.bounding_box()["y"], view.bounding_box()
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()


def test_left_arrow_returns_to_the_previous_step_and_the_views_follow(server, browser):
    pg = open_page(browser, server, 1280, 720)
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    pg.keyboard.press("p")
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    for i in range(1, 4):
        pg.keyboard.press("n")
        expect(pg.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    idle(pg)
    stage_before = pg.locator("[data-testid='dl-stage'] img:visible").get_attribute("src")
    chart_before = pg.locator("[data-testid='stPlotlyChart']").first.inner_text()
    pg.keyboard.press("ArrowLeft")
    expect(pg.get_by_text(re.compile(r"step 2 of 3"))).to_be_visible()
    idle(pg)
    assert pg.locator("[data-testid='dl-stage'] img:visible").get_attribute("src") != stage_before  # the stage follows
    assert pg.locator("[data-testid='stPlotlyChart']").first.inner_text() != chart_before  # and so does the view
    assert "at=2" in pg.url
    pg.keyboard.press("ArrowRight")
    expect(pg.get_by_text(re.compile(r"step 3 of 3"))).to_be_visible()
    assert "(3 from decode steps)" in status_text(pg)  # going back and forth computed nothing new
    pg.close()


def new_steps(pg) -> int:
    return int(re.search(r"\((\d+) from decode steps\)", status_text(pg)).group(1))


def test_a_double_click_on_next_token_takes_one_step(server, browser):
    """A double click is one intention: one step, every time (it took one or two, by timing: its two clicks reach
    the server as one rerun, or as a second that interrupted the first before it drew its step)."""
    pg = open_page(browser, server, 1280, 720)
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    pg.keyboard.press("p")
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    idle(pg)
    for i in range(1, 6):
        pg.get_by_role("button", name="Next token").dblclick()
        expect(pg.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
        idle(pg)
        pg.wait_for_timeout(500)  # a second step, had one been taken, would be drawn by now
        idle(pg)
        assert new_steps(pg) == i, (i, status_text(pg))
    pg.get_by_role("button", name="Next token").click()  # and a single click after it still takes its step
    expect(pg.get_by_text(re.compile(r"\(6 from decode steps\)"))).to_be_visible()
    pg.close()


def test_e_runs_to_the_end_and_x_resets(server, browser):
    pg = open_page(browser, server + "/?max_new_tokens=12", 1280, 720)
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    pg.keyboard.press("p")
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    idle(pg)
    pg.keyboard.press("e")  # Run to end
    expect(pg.get_by_text(re.compile(r"^Finished"))).to_be_visible()
    idle(pg)
    assert "12 new tokens" in status_text(pg) and "step 11 of 11" in status_text(pg)
    expect(pg.get_by_role("button", name="Next token")).to_be_disabled()
    pg.keyboard.press("x")  # Reset
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    expect(pg.get_by_text(re.compile("from decode steps"))).to_have_count(0)
    expect(pg.get_by_role("button", name="Next token")).to_be_disabled()
    assert "steps=" not in pg.url  # the link no longer replays a run
    pg.close()


def test_prefill_five_tokens_cache_toggle_and_every_page(server, browser):
    pg = open_page(browser, server)
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    expect(pg.get_by_role("button", name="Next token")).to_be_disabled()
    pg.get_by_role("button", name="Prefill").click()
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    for i in range(1, 6):
        pg.get_by_role("button", name="Next token").click()
        expect(pg.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    text = status_text(pg)
    assert re.search(r"6 new tokens", text)
    assert int(re.search(r"KV cache ([\d,]+) bytes", text).group(1).replace(",", "")) > 0

    pg.locator("[data-testid='stCheckbox'] label").filter(has_text="KV cache").first.click()  # the bar's switch
    expect(pg.get_by_text(re.compile(r"KV cache \(now off\).*made again"))).to_be_visible()  # said, not silent
    idle(pg)
    assert re.search(r"6 new tokens", status_text(pg)) and "KV cache 0 bytes" in status_text(pg)  # the same run
    pg.get_by_role("button", name="Next token").click()
    expect(pg.get_by_text(re.compile(r"\(6 from decode steps\)"))).to_be_visible()
    assert "KV cache 0 bytes" in status_text(pg)
    assert pg.locator("[data-testid='stException']").count() == 0

    for title in ("Lessons", "Race: cache vs no cache", "Speculative decoding", "Scale: KV memory and roofline", "Model"):
        pg.get_by_role("link", name=title).click()
        pg.wait_for_load_state("networkidle")
        expect(pg.get_by_role("heading").first).to_be_visible()
        idle(pg)
        assert pg.locator("[data-testid='stException']").count() == 0, title
        assert pg.locator("[data-testid='stAlertContentError']").count() == 0, title
    assert pg.outside == []  # no font, icon or script fetched from anywhere but this server
    pg.close()


def test_every_scenario_picked_under_more_runs_its_steps_and_keeps_them_after_next_token_a_view_and_a_reload(
        server, browser):
    """The lecturer's walk-through: a scenario picked in the step page's fragment showed an empty page; then 5 of 9
    lost their prompt (and their run) on the very next click."""
    pg = open_page(browser, server + "/?presenter=on", width=1280, height=720)
    for scenario in json.loads((ROOT / "assets" / "scenarios.json").read_text()):
        link, title = scenario["link"], scenario["title"]

        def pick() -> None:  # one click each, as a lecturer makes them: no click may be lost (see step/page.py)
            pg.get_by_role("button", name="More").first.click()
            pg.get_by_label("scenario").click()
            pg.get_by_role("option", name=title).click()
            # fold the popover away, as a lecturer would: it folds, the pick stays. Where the fragment's rerun lands
            # while the list closes, the focused box reopens its list (seen 1 run in 3 on a 2-core VM, the pick
            # already made): the first Escape then closes the list, and a lecturer presses it again
            box = pg.get_by_role("combobox", name="scenario")
            for _ in range(3):
                pg.keyboard.press("Escape")
                try:
                    expect(box).to_be_hidden(timeout=5_000)
                    break
                except AssertionError:
                    continue
            expect(box).to_be_hidden()

        def replayed(url: str) -> bool:  # this scenario's run is on screen: every setting and its steps in the link
            # (prompt and cache alone also match the scenario before: "MHA" and "Stop at the first full stop" share
            # them, and a link read between the fragment's rerun and the app's then had no prompt yet)
            q = parse_qs(urlparse(url).query)
            return all(q.get(k) == [v] for k, v in link.items() if k not in ("steps", "at")) and "steps" in q

        pick()
        start = time.monotonic()
        while not replayed(pg.url):
            assert time.monotonic() - start < 120, f"{title}: not replayed in 2 minutes; the link is {pg.url}"
            pg.wait_for_timeout(250)
        idle(pg)
        query = parse_qs(urlparse(pg.url).query)
        assert query.get("prompt") == [link["prompt"]] and query.get("cache") == [link["cache"]], title
        assert query.get("presenter") == ["on"], title  # presenter mode kept: the sidebar stays folded away
        assert pg.locator("[data-testid=stSidebar][aria-expanded=true]").count() == 0, title
        if "stop" in link:
            assert query.get("stop") == [link["stop"]], title
        elif not scenario.get("expect_stop"):
            assert re.search(rf"\b{int(link['steps']) + 1} new tokens?", status_text(pg)), (title, status_text(pg))
            assert query.get("steps") == [link["steps"]], title  # the link reproduces the run on screen
        assert pg.locator("[data-testid='stException']").count() == 0, title
        kept_after(pg, scenario)
    pg.close()


def kept_after(pg, scenario: dict) -> None:
    """The click after the pick: Next token, a view, then a reload of the page's own link each keep the scenario's
    prompt, settings and steps (a scenario's prompt reverted to the old preset's on the very next click)."""
    link, title = scenario["link"], scenario["title"]

    def query() -> dict:
        return {k: v[0] for k, v in parse_qs(urlparse(pg.url).query).items()}

    def holds(after: str, steps: int) -> None:
        # the click's rerun writes the link as it ends: on a loaded machine idle() can return before the rerun shows
        # (its status widget not up yet), so wait for the link to name the steps; a lost run never gets there
        expect(pg).to_have_url(re.compile(rf"[?&]steps={steps}(&|$)"), timeout=60_000)
        idle(pg)
        q = query()
        for key, value in link.items():
            if key not in ("steps", "at"):
                assert q.get(key) == value, (title, after, key, q.get(key), value)
        assert q.get("steps") == str(steps), (title, after, q.get("steps"), steps)
        # presenter mode too, after each click: the next scenario's pick once found it gone (1 run in several, under
        # load), and this says which click lost it
        assert q.get("presenter") == "on", (title, after, "presenter mode kept")
        box = pg.get_by_placeholder("Type a prompt, then Prefill (P)")
        assert box.input_value() == link["prompt"], (title, after, box.input_value())
        assert re.search(rf"\b{steps + 1} new tokens?", status_text(pg)), (title, after, status_text(pg))

    steps = int(query()["steps"])
    head = query().get("head")
    nxt = pg.get_by_role("button", name="Next token")
    if nxt.is_enabled():  # a run that stopped (end-of-text, a stop string) has no next token to take
        nxt.click()
        idle(pg)
        steps += 1
    holds("Next token", steps)
    assert query().get("head") == head, (title, "Next token keeps the head on the stage")
    view = "Matmuls" if scenario.get("view") != "Matmuls" else "Tokens"
    pg.locator("[data-testid='stRadio'] label").filter(has_text=re.compile(f"^{view}$")).first.click()
    idle(pg)
    holds(f"the {view} view", steps)
    assert query().get("view") == view, title
    pg.reload(wait_until="networkidle")
    expect(pg.get_by_text(re.compile(r"from decode steps")).first).to_be_visible(timeout=120_000)
    idle(pg)
    holds("a reload", steps)
    assert query().get("view") == view and query().get("head") == head, (title, "a reload keeps the view and head")


def test_a_200_token_race_plays_back_with_the_cached_run_finishing_first(server, browser, tmp_path):
    pg = open_page(browser, f"{server}/race", 1400, 1000)
    expect(pg.get_by_role("button", name="Start race")).to_be_visible()
    tokens = pg.get_by_label("tokens", exact=True)
    tokens.fill("200")
    tokens.press("Enter")
    idle(pg)
    pg.get_by_role("button", name="Start race").click()
    cache = pg.get_by_test_id("race-progress-cache")
    cache.wait_for(timeout=300_000)  # both runs are measured first, then played back
    seen = None
    deadline = time.time() + 120
    while time.time() < deadline:
        a, b = pg.evaluate("() => [document.querySelector('[data-testid=race-progress-cache]')?.innerText,"
                           " document.querySelector('[data-testid=race-progress-nocache]')?.innerText]")
        if a and b and "finished" in a and "finished" not in b:
            seen = (a, b)
            break
        if a and b and "finished" in b:
            break
        time.sleep(0.03)
    assert seen, "the cached run never finished while the other was still running"
    idle(pg)
    proof = pg.locator("[data-testid=stAlert]").filter(has_text=re.compile("Identical tokens|The runs differ")).first
    assert "Identical tokens: both runs chose the same 200 tokens" in proof.inner_text(), proof.inner_text()
    with pg.expect_download() as dl:
        pg.get_by_role("button", name=re.compile("Download the race as CSV")).click()
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    parse = re.compile(r"(\d+) / (\d+) tokens · ([\d.]+) s")
    done_nc, total_nc, clock = (float(x) for x in parse.search(seen[1]).groups())
    cum = [float(r["cumulative_ms"]) for r in rows if r["mode"] == "nocache"]
    expected = sum(c <= clock * 1000 for c in cum)
    # the run without the cache shows exactly the tokens it had made by then (±2 for the clock's rounding)
    assert abs(done_nc - expected) <= 2 and done_nc < total_nc
    cache_total = max(float(r["cumulative_ms"]) for r in rows if r["mode"] == "cache")
    # the cached run had finished by then. The two boxes are redrawn one after the other every 50 ms plus the time a
    # redraw takes, so the box without the cache may still show the frame before: on a loaded 2-core machine a frame
    # has taken up to ~200 ms, and a run that finished later than that shows as wrong here
    assert clock * 1000 >= cache_total - 300
    pg.close()


def test_a_hostile_link_shows_as_inert_text(server, browser):
    evil = ("/?model=%5BSession%20expired%20-%20sign%20in%20again%5D(http%3A%2F%2Fevil.example%2Flogin)"
            "&prompt=!%5Bx%5D(http%3A%2F%2Fevil.example%2Ftrack.png)%3Cimg%20src%3Dhttp%3A%2F%2Fevil.example%2Fi.png%3E")
    pg = open_page(browser, server + evil)
    expect(pg.get_by_role("button", name="Prefill")).to_be_enabled()
    expect(pg.get_by_text(re.compile("not offered by this server")).first).to_be_visible()
    pg.keyboard.press("p")
    expect(pg.get_by_text(re.compile(r"0 from decode steps"))).to_be_visible()
    idle(pg)
    assert pg.locator("a[href*='evil.example']").count() == 0  # no clickable link
    assert pg.locator("img[src*='evil.example']").count() == 0  # no image fetched
    assert pg.outside == []
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()
