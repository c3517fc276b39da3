"""The click after, in a real browser: each control that sets what the step page shows (a preset prompt, the layer,
the head, the scrubber) keeps it through the next action (Next token, a view, a reload of the page's own link).
A value set by code once reached the browser only in part and came back with the next click (step/page.py)."""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qs, urlparse

from playwright.sync_api import expect

from tests.test_browser import idle, open_page, status_text
from tests.test_browser_walkthrough import pick as view  # a view picked as a person clicks it

PRESENTER = (1280, 720)
BOX = "Type a prompt, then Prefill (P)"


def query(pg) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(pg.url).query).items()}


def next_token(pg, steps: int) -> None:
    pg.get_by_role("button", name="Next token").click()
    expect(pg.get_by_text(re.compile(rf"\({steps} from decode steps\)"))).to_be_visible()
    idle(pg)


def reload(pg, steps: int) -> None:
    pg.reload(wait_until="networkidle")
    expect(pg.get_by_text(re.compile(rf"\({steps} from decode steps\)"))).to_be_visible(timeout=120_000)
    idle(pg)


def more(pg):
    pg.get_by_role("button", name="More").first.click()
    return pg.get_by_test_id("stPopoverBody")


def fold(pg) -> None:
    for _ in range(3):  # a box focused in the popover may reopen its list: Escape until the popover folds
        pg.keyboard.press("Escape")
        pg.wait_for_timeout(300)
        if not pg.get_by_test_id("stPopoverBody").is_visible():
            return


def test_a_preset_prompt_is_kept_after_prefill_next_token_a_view_and_a_reload(server, browser):
    pg = open_page(browser, server + "/?presenter=on", *PRESENTER)
    idle(pg)
    more(pg).get_by_label("preset prompt").click()
    pg.get_by_role("option", name="A girl and her dog").click()
    fold(pg)
    idle(pg)
    prompt = "One day, a little girl named Lily went to the park with her dog."
    assert pg.get_by_placeholder(BOX).input_value() == prompt
    pg.get_by_role("button", name="Prefill").click()
    expect(pg.get_by_text(re.compile(r"\(0 from decode steps\)"))).to_be_visible()
    idle(pg)
    next_token(pg, 1)
    view(pg, "Shapes")
    reload(pg, 1)
    for where in ("after a reload", ):
        assert pg.get_by_placeholder(BOX).input_value() == prompt, where
        assert query(pg)["prompt"] == prompt and query(pg)["view"] == "Shapes", where
    pg.close()


def test_the_layer_and_the_head_picked_are_kept_after_next_token_a_view_and_a_reload(server, browser):
    pg = open_page(browser, server + "/?presenter=on&steps=2", *PRESENTER)
    expect(pg.get_by_text(re.compile(r"\(2 from decode steps\)"))).to_be_visible(timeout=120_000)
    idle(pg)
    pg.locator("[data-testid=stButtonGroup] button").filter(has_text="layer 2").first.click()
    idle(pg)
    head = more(pg).get_by_role("spinbutton", name="head drawn on the stage")
    head.fill("3")
    head.press("Enter")
    idle(pg)
    fold(pg)

    def kept(after: str) -> None:
        q = query(pg)
        assert (q.get("layer"), q.get("head")) == ("2", "3"), (after, q)
        src = pg.locator("[data-testid=dl-stage] img.dl-stage-wide").first.get_attribute("src")
        stage = base64.b64decode(src.split("base64,", 1)[1]).decode()  # the stage as drawn
        assert 'data-layer="2" data-open="1"' in stage and "head 3 (reads kv_head" in stage, after

    kept("the pick")
    next_token(pg, 3)
    kept("Next token")
    view(pg, "KV cache")
    kept("a view")
    reload(pg, 3)
    kept("a reload")
    pg.close()


def test_a_step_scrubbed_back_to_is_kept_after_a_view_and_a_reload(server, browser):
    pg = open_page(browser, server + "/?presenter=on&steps=4", *PRESENTER)
    expect(pg.get_by_text(re.compile(r"\(4 from decode steps\)"))).to_be_visible(timeout=120_000)
    idle(pg)
    for _ in range(3):
        pg.get_by_role("button", name="◀").click()
        idle(pg)

    def kept(after: str) -> None:
        assert query(pg).get("at") == "1" and query(pg).get("steps") == "4", (after, pg.url)
        said = status_text(pg)  # the step shown, and how it stands to the run: 3 steps newer, 2 tokens by it
        assert "step 1 of 4" in said and "3 newer recorded; 2 new tokens by this step" in said, (after, said)

    kept("◀ three times")
    view(pg, "Matmuls")
    kept("a view")
    reload(pg, 4)
    kept("a reload")
    pg.close()


def test_a_serving_link_at_an_earlier_step_of_a_finished_run_keeps_it_through_a_click_and_a_reload(server, browser):
    """Serving, `at=` an earlier step of a finished run: the status said '0/5 requests done' above 'Finished: every
    request has finished'. The step shown, its status and the link hold through ◀, ▶ and a reload."""
    pg = open_page(browser, f"{server}/serving?presenter=on&scenario=queue&steps=200&at=5", *PRESENTER)
    status = pg.get_by_text(re.compile(r"^step \d+ of 0–\d+ · \d+/\d+ requests done"))
    expect(status.first).to_be_visible(timeout=120_000)
    idle(pg)
    latest = int(query(pg)["steps"])  # the run stops at its own last step, fewer than the link asked for

    def kept(at: int, after: str) -> None:
        said = status.first.inner_text()
        assert said.startswith(f"step {at} of 0–{latest}"), (after, said)
        assert int(re.search(r"(\d+)/\d+ requests done", said).group(1)) < 12, (after, said)  # not drained yet
        assert pg.get_by_text(re.compile(r"^Finished")).count() == 0, after
        assert pg.get_by_text(re.compile(f"went on to step {latest}")).count() == 1, after
        assert query(pg).get("at") == str(at), (after, pg.url)

    kept(5, "the link")
    pg.get_by_role("button", name="◀").click()
    expect(status.first).to_contain_text(f"step 4 of 0–{latest}")  # the click's run reached the screen
    idle(pg)
    kept(4, "◀")
    pg.reload(wait_until="networkidle")
    expect(status.first).to_be_visible(timeout=120_000)
    idle(pg)
    kept(4, "a reload")
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()


def test_the_budget_pages_policy_is_kept_after_a_reload_of_its_link(server, browser):
    pg = open_page(browser, f"{server}/budget?presenter=on", *PRESENTER)
    box = pg.get_by_role("combobox", name="policy")
    expect(box).to_be_visible(timeout=120_000)
    idle(pg)
    box.click()
    pg.get_by_role("option", name="window", exact=True).click()
    idle(pg)
    assert query(pg).get("policy") == "window", pg.url
    pg.reload(wait_until="networkidle")
    expect(pg.get_by_role("combobox", name="policy")).to_be_visible(timeout=120_000)
    idle(pg)
    assert query(pg).get("policy") == "window", pg.url
    chosen = pg.get_by_role("combobox", name="policy")
    shown = chosen.input_value() if chosen.evaluate("e => e.tagName") == "INPUT" else chosen.inner_text()
    assert shown == "window" or "window" in chosen.evaluate("e => e.closest('[data-testid=stSelectbox]').innerText"), shown
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()


def _checked(pg, key: str) -> list[str]:
    """The labels of the checked options of the radio with this widget key."""
    return pg.locator(f".st-key-{key}").evaluate(
        "e => [...e.querySelectorAll('input[type=radio]')].filter(i => i.checked).map(i => i.closest('label').innerText)")


def test_a_lessons_choice_is_kept_after_next_and_previous_in_a_browser(server, browser):
    """Lesson 11's cache picked heavy-avg, then Next and Previous showed fp8 again; lesson 12's prediction was
    cleared the same way. Each pick, then the click after it (Next, Previous, Next), in a real browser."""
    pg = open_page(browser, server + "/lessons?lesson=11&presenter=on", *PRESENTER)
    idle(pg)
    pg.locator(".st-key-lesson11_policy").get_by_text("heavy-avg", exact=True).click()
    idle(pg)
    assert _checked(pg, "lesson11_policy") == ["heavy-avg"]
    pg.get_by_role("button", name=re.compile("Next")).first.click()
    idle(pg)
    pg.locator(".st-key-lesson12_guess").get_by_text("both faster", exact=True).click()
    idle(pg)
    expect(pg.get_by_text("Predicted: both faster")).to_be_visible()
    said = pg.get_by_text("Predicted: both faster").bounding_box()  # the answer on the projector's first
    assert said["y"] + said["height"] <= PRESENTER[1], said  # screen, above its chart (it was under it, scrolled to)
    pg.get_by_role("button", name=re.compile("Previous")).first.click()
    idle(pg)
    assert "lesson=11" in pg.url and _checked(pg, "lesson11_policy") == ["heavy-avg"]
    pg.get_by_role("button", name=re.compile("Next")).first.click()
    idle(pg)
    assert "lesson=12" in pg.url and _checked(pg, "lesson12_guess") == ["both faster"]
    expect(pg.get_by_text("Predicted: both faster")).to_be_visible()


def test_the_budget_scenarios_tip_stays_through_the_switch_it_asks_for_with_both_agreements(server, browser):
    """'Two heavy scores' asks the class to switch the policy to heavy-avg and compare: after that switch the tip is
    still there, giving both policies' agreement, and the one on screen is the figure the page measures below it."""
    pg = open_page(browser, f"{server}/budget?presenter=on", *PRESENTER)
    box = pg.get_by_role("combobox", name="policy")
    expect(box).to_be_visible(timeout=120_000)
    idle(pg)
    pg.get_by_role("button", name="two heavy scores").click()
    idle(pg)
    tip = pg.get_by_text(re.compile("Switch the policy to heavy-avg"))
    expect(tip).to_be_visible(timeout=120_000)
    assert query(pg).get("policy") == "heavy" and query(pg).get("budget") == "64", pg.url
    pg.get_by_role("combobox", name="policy").click()
    pg.get_by_role("option", name="heavy-avg", exact=True).click()
    idle(pg)
    assert query(pg).get("policy") == "heavy-avg", pg.url
    expect(tip).to_be_visible(timeout=120_000)  # the comparison it asked for is under way: the tip stays
    said = re.search(r"heavy ([\d.]+)%, heavy-avg ([\d.]+)%", tip.inner_text())
    assert said, tip.inner_text()
    below = pg.get_by_text(re.compile(r"top-1 agreement [\d.]+%")).first.inner_text()
    assert f"top-1 agreement {said.group(2)}%" in below, (said.group(0), below)
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()
