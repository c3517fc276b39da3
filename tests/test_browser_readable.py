"""Readable on a projector (1280x720, presenter mode) and on a phone (390x844), in a real browser:
the stage opens whole on a phone with its first line in it, a follower's charts keep their ticks and titles apart, a chart's hover
toolbar leaves its title alone, captions are drawn whole, lessons 2, 5 and 9 show their key picture on the first
projector screen, and lesson 12 its answer once a prediction is picked. What the record can say without a browser is
in tests/test_readable.py.

One app server with a lecturer key for the module (the follower needs a class; every other test uses it as any app).
"""

from __future__ import annotations

import math
import re

import pytest
from playwright.sync_api import expect

from tests.test_browser import idle, open_page
from tests.test_follow import start_class

PRESENTER, PHONE = (1280, 720), (390, 844)


def settled(pg, selector: str):
    """Wait for a selector, then for Streamlit to finish running (a lesson's first run takes a while)."""
    pg.locator(selector).first.wait_for(timeout=120_000)
    pg.wait_for_function("() => !document.querySelector('[data-testid=stSpinner]')", timeout=120_000)
    idle(pg)
    return pg.locator(selector).first


def overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def test_a_phone_opens_the_stage_whole_with_its_first_line_in_it_and_nothing_scrolls_sideways(keyed_server, browser):
    """It opened scrolled right with its first line cut ('ase) · step 3'), then at its right end with the line
    repeated above it in words, its layer buttons off screen. A phone now gets the stage laid out for its width
    (drawing/stage_phone.py): not scrolled at all, its first line inside the picture, wrapped, whole."""
    import base64

    pg = open_page(browser, keyed_server + "/?steps=3", *PHONE)
    stage = settled(pg, "[data-testid=dl-stage] img:visible")
    box, frame = stage.bounding_box(), pg.locator("[data-testid=dl-stage]").first.bounding_box()
    assert pg.evaluate("document.documentElement.scrollWidth") == PHONE[0]
    assert pg.locator("[data-testid=dl-stage]").first.evaluate("e => e.scrollLeft") == 0
    assert box["x"] >= frame["x"] - 1 and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1  # no scroll
    svg = base64.b64decode(stage.get_attribute("src").split("base64,", 1)[1]).decode()
    words = re.findall(r'font-weight="bold"[^>]*>([^<]*)</text>', svg)
    assert " ".join(words[:2]) == "Decode (generation phase) · step 3 · cache on"  # whole, in two lines
    assert stage.get_attribute("alt").startswith("this pass")
    assert pg.locator(".dl-stage-head:visible").count() == 0  # no line repeated above it
    pg.close()


def test_a_followers_charts_on_a_phone_keep_ticks_and_axis_titles_apart(keyed_server, browser):
    """Drawn by plotly.js without Streamlit's theme, a follower's y ticks were cut and axis titles lay on them."""
    lect = open_page(browser, keyed_server, *PRESENTER)
    expect(lect.get_by_role("button", name="Prefill")).to_be_enabled()
    link = start_class(lect)
    lect.keyboard.press("p")
    expect(lect.get_by_text(re.compile(r"\(0 from decode steps\)"))).to_be_visible()
    for i in range(1, 4):
        lect.keyboard.press("n")
        expect(lect.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    phone = open_page(browser, link, *PHONE)
    phone.locator("[data-testid=dl-follow-stage][data-step='3']").wait_for(timeout=30_000)
    for view in ("Next token", "KV cache", "Latency"):
        phone.locator(".dlf-btn", has_text=view).first.click()
        chart = phone.locator(".dlf-view .dlf-figure .main-svg").first
        chart.wait_for(timeout=30_000)
        phone.wait_for_timeout(800)
        found = phone.evaluate("""() => {
          const out = [];
          for (const fig of document.querySelectorAll('.dlf-view .dlf-figure')) {
            const box = fig.getBoundingClientRect();
            const ticks = [...fig.querySelectorAll('.ytick text, .xtick text')].map(t => t.getBoundingClientRect())
              .filter(r => r.width);
            for (const r of ticks) if (r.left < box.left - 1 || r.right > box.right + 1) out.push('tick cut');
            for (const t of fig.querySelectorAll('.g-ytitle text, .g-xtitle text, .g-y2title text')) {
              const r = t.getBoundingClientRect();
              if (!r.width) continue;
              if (r.left < box.left - 1 || r.right > box.right + 1) out.push('axis title cut: ' + t.textContent);
              for (const k of ticks) if (r.left < k.right && k.left < r.right && r.top < k.bottom && k.top < r.bottom)
                { out.push('axis title on a tick: ' + t.textContent); break; }
            }
            const title = fig.querySelector('.gtitle');
            if (title) { const r = title.getBoundingClientRect();
              if (r.width && (r.left < box.left - 1 || r.right > box.right + 1)) out.push('title cut'); }
          }
          return out;
        }""")
        assert not found, (view, found)
        assert phone.evaluate("document.documentElement.scrollWidth") == PHONE[0], view
    phone.close()
    lect.close()


def test_a_charts_hover_toolbar_leaves_its_title_alone_and_captions_are_drawn_whole(keyed_server, browser):
    pg = open_page(browser, keyed_server + "/?presenter=on&steps=6&view=KV%20cache", *PRESENTER)
    settled(pg, "[data-testid=stPlotlyChart] .gtitle")
    for i in range(pg.locator("[data-testid=stPlotlyChart]").count()):
        chart = pg.locator("[data-testid=stPlotlyChart]").nth(i)
        chart.scroll_into_view_if_needed()
        chart.hover()
        pg.wait_for_timeout(500)
        title = chart.locator(".gtitle").first.bounding_box()
        for bar in chart.locator(".modebar").all():
            box = bar.bounding_box()
            assert box is None or not overlap(title, box), (chart.locator(".gtitle").first.text_content(), box)
    caption = pg.locator("[data-testid=stCaptionContainer]").filter(has_text="Per layer").first
    assert caption.evaluate("e => [getComputedStyle(e).opacity, getComputedStyle(e).color]") == ["1", "rgb(51, 51, 51)"]
    pg.close()


LESSON_PICTURES = {  # the key picture(s) of a lesson, each whole on the first 1280x720 screen
    2: ["[data-testid=dl-stage] img", ".st-key-lesson2_att, [data-testid=stPlotlyChart]"],
    5: ["[data-testid=dl-stage] img"],
    9: ["[data-testid=dl-stage] img"],
}


@pytest.mark.parametrize("number", sorted(LESSON_PICTURES))
def test_a_lessons_key_picture_and_claim_fit_the_first_projector_screen(keyed_server, browser, number):
    """Lessons 2, 5 and 9 ran three to four screens, their pictures a screen or more down."""
    pg = open_page(browser, keyed_server + f"/lessons?presenter=on&lesson={number}", *PRESENTER)
    settled(pg, "[data-testid=dl-stage] img")
    for selector in LESSON_PICTURES[number]:
        box = pg.locator(selector).first.bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= PRESENTER[1] + 1, (number, selector, box)
    claim = pg.locator("[data-testid=stMarkdownContainer]").filter(has_text=re.compile("Prefill|cache|Speculative")) \
        .first.bounding_box()
    assert claim["y"] + claim["height"] <= PRESENTER[1]
    assert pg.locator("[data-testid=stExpander]").count() >= 1  # the rest folds
    if number == 2:  # the causal mask's why, beside the masked picture
        why = pg.get_by_text(re.compile("Why a mask")).first.bounding_box()
        assert why["y"] < PRESENTER[1]
    pg.close()


MARKERS = """key => [...document.querySelectorAll(`.st-key-${key} .scatterlayer .points path.point`)].map(p => {
  const r = p.getBoundingClientRect(); return {fill: getComputedStyle(p).fill, bottom: r.bottom, height: r.height};
})"""


def test_lesson_12s_answer_and_its_decode_points_are_on_the_first_projector_screen_after_the_guess(keyed_server,
                                                                                                     browser):
    """Lesson 12 put its measurement under the prediction: a lecturer who picked one had the answer's sentence at the
    foot of the screen and the decode points (the claim: fewer bytes, faster decode) a screen below."""
    from drawing.palette import DECODE

    pg = open_page(browser, keyed_server + "/lessons?presenter=on&lesson=12", *PRESENTER)
    settled(pg, ".st-key-lesson12_guess")
    pg.locator(".st-key-lesson12_guess").get_by_text("decode faster, prefill about the same", exact=True).click()
    settled(pg, ".st-key-lesson12_storage .scatterlayer .points path.point")
    said = pg.get_by_text(re.compile(r"^Predicted: decode faster")).first.bounding_box()
    assert said["y"] + said["height"] <= PRESENTER[1], said
    rgb = "rgb({}, {}, {})".format(*(int(DECODE[i:i + 2], 16) for i in (1, 3, 5)))
    decode = [m for m in pg.evaluate(MARKERS, "lesson12_storage") if m["fill"] == rgb and m["height"] > 0]
    assert len(decode) >= 2 and all(m["bottom"] <= PRESENTER[1] for m in decode), decode
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()


def test_lesson_5s_right_axis_reads_round_milliseconds_not_the_left_axis_grid_rescaled(keyed_server, browser):
    """Streamlit's chart theme syncs a right axis's ticks to the left axis's grid: lesson 5's 'ms a decode step'
    read 0, 1.41, 2.83, 4.24. Each tick a whole 1, 2 or 5 times a power of ten, as an axis a class reads."""
    pg = open_page(browser, keyed_server + "/lessons?presenter=on&lesson=5", *PRESENTER)
    settled(pg, ".st-key-lesson5_work .y2tick text")
    ticks = pg.locator(".st-key-lesson5_work .y2tick text").evaluate_all("ts => ts.map(t => t.textContent)")
    values = [float(t.replace(",", "")) for t in ticks]
    steps = {round(b - a, 9) for a, b in zip(values, values[1:])}
    assert len(values) >= 3 and len(steps) == 1, ticks  # evenly spaced
    step = steps.pop()
    assert round(step / 10 ** math.floor(math.log10(step)), 6) in (1, 2, 5), ticks
    pg.close()


def test_lesson_2s_prompt_picker_shows_every_prompts_title_whole_on_a_projector(keyed_server, browser):
    """The picker beside lesson 2's claim showed "Repeated name (watch attention jum…" on a projector: the choice a
    lecturer reads out was cut. Every preset's title, set in the picker's own font, fits the box it is shown in."""
    import json
    from pathlib import Path

    titles = [p["title"] for p in json.loads((Path(__file__).parents[1] / "assets" / "prompts.json").read_text())]
    pg = open_page(browser, keyed_server + "/lessons?presenter=on&lesson=2", *PRESENTER)
    settled(pg, "[data-testid=dl-stage] img")
    shown = pg.locator(".st-key-lesson2_prompt input[role=combobox]").first
    fits = shown.evaluate("""(e, titles) => {
      const style = getComputedStyle(e);
      const room = e.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      const ctx = document.createElement('canvas').getContext('2d');
      ctx.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
      return {room, shown: e.value, wide: titles.filter(t => ctx.measureText(t).width > room)};
    }""", titles)
    assert fits["shown"] == titles[2], fits  # the lesson's own default, Tom's repeated name
    assert fits["wide"] == [], fits
    pg.close()


@pytest.mark.parametrize("size", [PRESENTER, PHONE], ids=["projector-presenter", "phone"])
def test_lesson_11s_cache_picture_is_read_whole_at_its_own_size(keyed_server, browser, size):
    """On a phone the cache per layer scrolled sideways under a "swipe" hint, its legend and axis cut; in half a
    projector's width its words were ~8 px. Each screen now shows a picture laid out for it: whole, no sideways
    scroll, its smallest words at least 11 px."""
    import base64

    pg = open_page(browser, keyed_server + "/lessons?lesson=11" + ("&presenter=on" if size == PRESENTER else ""),
                   *size)
    settled(pg, "[data-testid=lesson11-cache] img:visible")
    box = pg.locator("[data-testid=lesson11-cache]").first
    shown = box.locator("img:visible")
    assert shown.count() == 1
    assert box.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    assert pg.evaluate("document.documentElement.scrollWidth") <= size[0]
    svg = base64.b64decode(shown.get_attribute("src").split("base64,", 1)[1]).decode()
    units = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    smallest = min(float(f) for f in re.findall(r'font-size="([\d.]+)"', svg))
    assert smallest * shown.bounding_box()["width"] / units >= 11, (units, smallest, shown.bounding_box())
    assert "evicted" in svg and "layer 0" in svg  # the legend and the rows, drawn, not cut
    pg.close()


@pytest.mark.parametrize("number, key", [(2, "lesson2_enlarge"), (5, "lesson5_enlarge"), (9, "lesson9_k")])
def test_a_lessons_stage_in_a_column_opens_across_the_screen_and_the_lesson_is_kept_after(keyed_server, browser,
                                                                                         number, key):
    """Beside another picture in a column, the stage's words were ~5-7 px on a projector. Enlarge opens the same
    picture across the screen (at least 0.9 px a unit of its 1,000-unit drawing: 13-unit words at ~12 px); closing
    it leaves the lesson where it was: the same lesson, the same step, lesson 9's k as it was set."""
    pg = open_page(browser, keyed_server + f"/lessons?presenter=on&lesson={number}", *PRESENTER)
    stage = settled(pg, "[data-testid=dl-stage] img")
    small = stage.bounding_box()["width"]
    if number == 9:  # a slider moved before the click: kept after it
        pg.get_by_role("slider", name=re.compile("guesses per round")).focus()
        pg.keyboard.press("ArrowRight")
        idle(pg)
        key = "lesson9_enlarge"
    k = pg.locator(".st-key-lesson9_k [data-testid=stSliderThumbValue]")
    k_before = k.inner_text() if number == 9 else None
    alt_before = stage.get_attribute("alt")
    pg.locator(f".st-key-{key}").get_by_role("button", name="Enlarge the stage").first.click()
    dialog = pg.locator("[role=dialog]")
    big = dialog.locator("[data-testid=dl-stage] img.dl-stage-wide").first
    big.wait_for(timeout=60_000)
    box = big.bounding_box()
    assert box["width"] >= 900 and box["width"] / small > 1.5, (box, small)
    assert big.get_attribute("alt") == alt_before  # the same pass, not another
    pg.keyboard.press("Escape")
    dialog.wait_for(state="detached", timeout=30_000)
    idle(pg)
    assert f"lesson={number}" in pg.url and pg.locator("[data-testid=dl-stage] img").first.get_attribute("alt") == \
        alt_before
    if number == 9:
        assert k.inner_text() == k_before == "5"
    pg.close()


def test_the_speculative_pages_verify_stage_opens_across_the_projector_with_its_words_readable(keyed_server, browser):
    """In its column the verify stage's smallest words were ~10 px on a projector. Enlarge opens the same round
    across the screen, every word at least 11 px (as lesson 11's picture), and closing it keeps the round."""
    import base64

    pg = open_page(browser, keyed_server + "/speculative?presenter=on", *PRESENTER)
    pg.get_by_role("button", name="Prefill").first.click()
    idle(pg)
    pg.get_by_role("button", name="Next round").first.click()
    stage = settled(pg, "[data-testid=dl-stage] img.dl-stage-wide")
    alt = stage.get_attribute("alt")
    pg.locator(".st-key-speculative_enlarge").get_by_role("button", name="Enlarge the stage").click()
    big = pg.locator("[role=dialog] [data-testid=dl-stage] img.dl-stage-wide").first
    big.wait_for(timeout=60_000)
    svg = base64.b64decode(big.get_attribute("src").split("base64,", 1)[1]).decode()
    units = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    smallest = min(float(f) for f in re.findall(r'font-size="([\d.]+)"', svg))
    assert smallest * big.bounding_box()["width"] / units >= 11, (smallest, units, big.bounding_box())
    assert big.get_attribute("alt") == alt and "round 1" in svg  # the same round, not another
    pg.keyboard.press("Escape")
    pg.locator("[role=dialog]").wait_for(state="detached", timeout=30_000)
    idle(pg)
    assert pg.locator("[data-testid=dl-stage] img.dl-stage-wide").first.get_attribute("alt") == alt
    for _ in range(4):  # the list beside the stage: five chips beside "round 2: 0/4 kept + correction" wrapped
        pg.get_by_role("button", name="Next round").first.click()
        idle(pg)
    rows = pg.locator("[data-testid=stHtml] div").filter(has_text=re.compile(r"^round \d+: \d+/\d+ kept"))
    expect(rows).to_have_count(5, timeout=30_000)
    for row in rows.all():
        tops = [round(box["y"]) for box in (chip.bounding_box() for chip in row.locator("span[title]").all())]
        assert len(tops) >= 2 and max(tops) - min(tops) <= 2, (row.inner_text(), tops)  # one line of chips each
    pg.close()
    phone = open_page(browser, keyed_server + "/speculative", *PHONE)  # a phone's own layout is larger than the dialog's
    phone.get_by_role("button", name="Prefill").first.click()
    settled(phone, "[data-testid=dl-stage] img.dl-stage-phone")
    assert not phone.locator(".st-key-speculative_enlarge").first.is_visible()
    phone.close()


@pytest.mark.parametrize("size", [PRESENTER, PHONE], ids=["projector-presenter", "phone"])
def test_the_pass_over_n_rows_keeps_its_note_legend_ticks_and_axis_title_apart(keyed_server, browser, size):
    """The H200 recording's curve: a timing note lay on the legend under the plot, then (the note moved over the
    plot) the legend lay on the x axis's title and its 1,024-row ticks turned on end. Every piece apart (a note,
    where the recording earns one; its one-row outlier is now named on the plot instead)."""
    pg = open_page(browser, keyed_server + "/scale" + ("?presenter=on" if size == PRESENTER else ""), *size)
    settled(pg, "[data-testid=stPlotlyChart] .gtitle")
    pg.locator(".st-key-scale_ladder_pick").first.click()  # the picker: every ladder, named
    pg.get_by_role("option", name=re.compile("NVIDIA H200")).first.click()
    idle(pg)
    chart = pg.locator("[data-testid=stPlotlyChart]").filter(has_text="One pass over n rows: Llama-3-8B").first
    chart.locator(".legend").first.wait_for(timeout=60_000)
    pg.wait_for_timeout(800)
    found = chart.evaluate("""fig => {
      const out = [];
      const box = e => { const r = e.getBoundingClientRect(); return r.width ? r : null; };
      const hit = (a, b) => a && b && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
      const note = [...fig.querySelectorAll('.annotation')].find(a => a.textContent.startsWith('⚠'));
      const parts = {note: note && box(note), legend: box(fig.querySelector('.legend')),
                     xtitle: box(fig.querySelector('.g-xtitle text')), plot: box(fig.querySelector('.nsewdrag'))};
      const texts = [...fig.querySelectorAll('.xtick text')];
      if (texts.some(t => /rotate\\((?!0)/.test(t.getAttribute('transform') || ''))) out.push('ticks on end');
      const ticks = texts.map(box).filter(Boolean);
      for (const [a, b] of [['note', 'plot'], ['note', 'legend'], ['note', 'xtitle'], ['legend', 'xtitle'],
                            ['legend', 'plot']])
        if (hit(parts[a], parts[b])) out.push(a + ' on ' + b);
      ticks.forEach((t, i) => { if (hit(t, parts.legend)) out.push('tick on legend');
        if (hit(t, parts.xtitle)) out.push('tick on axis title');
        if (i && hit(t, ticks[i - 1])) out.push('ticks on each other'); });
      return out;
    }""")
    assert not found, found
    pg.close()


def test_a_phone_sees_the_grow_the_model_header_whole_above_its_switches(keyed_server, browser):
    """On a phone the Scale page's switches lay over the bottom of the 'Grow the model' header, its letters cut."""
    pg = open_page(browser, keyed_server + "/scale", *PHONE)
    settled(pg, "[data-testid=stButtonGroup]")
    header = pg.locator("h2", has_text="Grow the model").first.bounding_box()
    switches = pg.locator(".st-key-scale_ladder_row [data-testid=stButtonGroup]").first.bounding_box()
    assert header and switches and header["y"] + header["height"] <= switches["y"], (header, switches)
    pg.close()
