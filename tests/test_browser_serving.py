"""The Serving page in a real browser, on a projector: after a few engine steps the block pool and the timeline
are on the first screen at 1280x720 in presenter mode, stepped with the keyboard as a lecturer would. On a phone:
tests/test_browser_phone.py."""

from __future__ import annotations

import base64
import re

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
    pool, timeline = pg.locator("[data-testid=dl-pool] img:visible"), pg.locator("[data-testid=dl-timeline] img:visible")
    assert f"after step {steps - 1}" in pool.get_attribute("alt")
    assert inside(pg, pool) and inside(pg, timeline), (pool.bounding_box(), timeline.bounding_box())
    assert pg.locator("[data-testid=dl-pass] img:visible").get_attribute("alt").startswith(f"step {steps - 1}: one forward pass")
    for picture in ("dl-pool", "dl-pass", "dl-timeline"):  # read from the back of a room: no word under 13 px
        assert smallest_px(pg.locator(f"[data-testid={picture}] img:visible")) >= 13, picture
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside
    pg.close()


def smallest_px(img) -> float:
    """The smallest font size an <img>'s SVG draws, in screen pixels at the width it is shown."""
    svg = base64.b64decode(img.get_attribute("src").split("base64,", 1)[1]).decode()
    units = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    return min(float(f) for f in re.findall(r'font-size="([\d.]+)"', svg)) * img.bounding_box()["width"] / units


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


def test_a_sizing_knob_changed_in_more_sizes_the_next_run_and_the_next_pick_brings_its_own(server, browser):
    """More's blocks box, changed by hand: the summary line and the pool of the next step use it at once (the
    "use these settings" switch turns itself on); switching it off gives the scenario its own sizing back. The next
    scenario picked brings its own sizing (its story is told on it: scenario 4's 14 blocks, kept by hand, left
    scenario 3's long prompt no pool to run in), and the click after it steps on that sizing."""
    from topics.serving.scenarios import SCENARIOS

    pg = open_page(browser, f"{server}/serving?presenter=on", 1280, 720)
    pg.get_by_role("button", name="▶ step").wait_for()
    idle(pg)
    summary = pg.get_by_text("Serving many requests", exact=True).locator("xpath=..")
    assert "48 blocks of 8 positions" in summary.inner_text()  # scenario 1's sizing
    custom = pg.get_by_role("switch", name="use these settings instead of the scenario's")
    pg.get_by_role("button", name="More").click()
    blocks = pg.get_by_label("blocks", exact=True)
    assert blocks.input_value() == "48"  # the box shows the sizing in use
    blocks.fill("24")
    blocks.press("Enter")
    idle(pg)
    assert custom.is_checked()
    pg.keyboard.press("Escape")
    idle(pg)
    assert "24 blocks of 8 positions" in summary.inner_text()
    pg.get_by_role("button", name="▶ step").click()
    idle(pg)
    pool = pg.locator("[data-testid=dl-pool] img:visible")
    assert pool.get_attribute("alt").startswith("block pool after step 0:") and " of 24 blocks used" in pool.get_attribute("alt")
    pg.get_by_role("button", name="More").click()
    pg.get_by_text("use these settings instead of the scenario's").click()  # the scenario's own sizing again
    idle(pg)
    assert not custom.is_checked() and pg.get_by_label("blocks", exact=True).input_value() == "48"
    blocks = pg.get_by_label("blocks", exact=True)
    blocks.fill("24")
    blocks.press("Enter")
    idle(pg)
    pg.keyboard.press("Escape")
    idle(pg)
    assert "24 blocks of" in summary.inner_text()
    pg.locator("[data-testid=stMain] [data-testid=stSelectbox]").first.click()  # the click after: another scenario
    pg.get_by_role("option", name=SCENARIOS["long_prompt"]["title"]).click()
    idle(pg)
    own = SCENARIOS["long_prompt"]["sizing"]["num_blocks"]
    assert f"{own} blocks of" in summary.inner_text()
    pg.get_by_role("button", name="▶ step").click()
    idle(pg)
    assert f" of {own} blocks used" in pg.locator("[data-testid=dl-pool] img:visible").get_attribute("alt")
    pg.get_by_role("button", name="More").click()
    assert not custom.is_checked() and pg.get_by_label("blocks", exact=True).input_value() == str(own)
    pg.keyboard.press("Escape")
    idle(pg)
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside
    pg.close()
