"""The Serving page in a real browser, on a projector: after a few engine steps the block pool and the timeline
are on the first screen at 1280x720 in presenter mode, stepped with the keyboard as a lecturer would."""

from __future__ import annotations

import pytest

from tests.test_browser import idle, inside, open_page


@pytest.mark.parametrize("scenario, steps", [("2. A shared system prompt", 8), ("4. A pool too small: preemption", 14)])
def test_pool_and_timeline_fit_the_first_screen_of_a_projector(server, browser, scenario, steps):
    pg = open_page(browser, f"{server}/serving?presenter=on", 1280, 720)
    forward = pg.get_by_role("button", name="▶ step")
    forward.wait_for()
    idle(pg)
    pg.locator("[data-testid=stMain] [data-testid=stSelectbox]").first.click()
    pg.get_by_role("option", name=scenario).click()
    idle(pg)
    pg.get_by_text("Serving many requests", exact=True).click()  # focus leaves the scenario box, as a person's would
    for _ in range(steps):  # the → key, once the buttons are there
        pg.keyboard.press("ArrowRight")
        idle(pg)
    pool, timeline = pg.locator("[data-testid=dl-pool] img"), pg.locator("[data-testid=dl-timeline] img")
    assert f"after step {steps - 1}" in pool.get_attribute("alt")
    assert inside(pg, pool) and inside(pg, timeline), (pool.bounding_box(), timeline.bounding_box())
    assert pg.locator("[data-testid=dl-pass] img").get_attribute("alt").startswith(f"step {steps - 1}: one forward pass")
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside
    pg.close()


def test_after_picking_a_scenario_the_keys_are_shortcuts_and_run_to_end_finishes_it(server, browser):
    """Pick a scenario with the mouse, then press E at once: the focus has left the box, so E is Run to end (not an
    "e" typed into the box), and the run starts and finishes without an error; → then does not type either."""
    pg = open_page(browser, f"{server}/serving?presenter=on", 1280, 720)
    pg.get_by_role("button", name="▶ step").wait_for()
    idle(pg)
    box = pg.locator("[data-testid=stMain] [data-testid=stSelectbox]").first
    box.click()
    pg.get_by_role("option", name="2. A shared system prompt").click()
    idle(pg)
    pg.wait_for_function("document.activeElement === document.body || !document.activeElement.closest("
                         "'[data-testid=stSelectbox]')", timeout=10_000)
    pg.keyboard.press("e")
    idle(pg)
    pg.get_by_text("Finished", exact=False).first.wait_for(timeout=60_000)
    assert box.locator("input").input_value() == "2. A shared system prompt"  # the pick, no "e" typed to search
    assert pg.get_by_role("option").count() == 0  # and its list stayed shut
    assert "4/4 requests done" in pg.locator("[data-testid=stMain]").inner_text()
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside
    pg.close()


READABLE = """() => [...document.querySelectorAll('.dl-serve')].map(div => {
  const img = div.querySelector('img');
  const bytes = Uint8Array.from(atob(img.src.split('base64,')[1]), c => c.charCodeAt(0));
  const svg = new DOMParser().parseFromString(new TextDecoder().decode(bytes), 'image/svg+xml');
  const sizes = [...svg.querySelectorAll('text')].map(t => parseFloat(t.getAttribute('font-size')));
  const title = svg.querySelector('text').textContent;
  const view = parseFloat(svg.documentElement.getAttribute('viewBox').split(' ')[2]);
  const box = img.getBoundingClientRect();
  const head = div.querySelector('.dl-stage-head');
  const frame = div.querySelector('.dl-stage');
  const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth; };
  return {id: div.dataset.testid, smallest_px: Math.min(...sizes) * box.width / view, title,
          // where its title is: written above it (a picture that opens at its right end), or in it, at its left edge
          head: head ? head.innerText : null, head_shown: head ? shown(head) : null,
          head_px: head ? parseFloat(getComputedStyle(head).fontSize) : null,
          opens_at_left: frame.scrollLeft === 0 && Math.abs(box.left - frame.getBoundingClientRect().left) < 2};
})"""


@pytest.mark.parametrize("scenario", ["3. A long prompt: chunked prefill", "5. A system prompt over time: the prefix cache",
                                      "6. A queue: more requests than batch slots"])
def test_a_phone_shows_each_serving_pictures_title_and_no_text_under_11_px(server, browser, scenario):
    """Issue 42 item 11: on a 390x844 phone the serving pictures carried ~6 px text. Each picture now keeps its
    smallest text at 11 px or more (it scrolls sideways instead of shrinking), its title is written whole above it,
    and the page itself does not scroll sideways."""
    pg = open_page(browser, f"{server}/serving", 390, 844)
    pg.get_by_role("button", name="▶ step").wait_for()
    idle(pg)
    pg.locator("[data-testid=stMain] [data-testid=stSelectbox]").first.click()
    pg.get_by_role("option", name=scenario).click()
    idle(pg)
    for _ in range(7):
        pg.get_by_role("button", name="▶ step").click()
        idle(pg)
    pg.locator("[data-testid=dl-timeline] img").wait_for()
    found = pg.evaluate(READABLE)
    assert {f["id"] for f in found} == {"dl-pool", "dl-pass", "dl-timeline"}, found
    for f in found:
        assert f["smallest_px"] >= 11, f
        if f["id"] == "dl-timeline":  # it opens at its newest step, so its title is written above it
            assert f["head_shown"] and f["head"].startswith(f["title"]) and f["head_px"] >= 11, f
        else:  # it opens at its left edge, its title in view
            assert f["head"] is None and f["opens_at_left"], f
    assert pg.evaluate("document.documentElement.scrollWidth") == 390
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside
    pg.close()
