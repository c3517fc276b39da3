"""The Serving and Scale pages on a 390x844 phone, in a real browser: the page never scrolls sideways and every
picture fits the screen whole (its box inside the viewport), its text 11 px or more: reflowed for the width, not
shrunk, a few engine steps in and at the end of a run. What the pictures say at a phone's width (the same records,
the same roles) is checked without a browser in tests/test_serving_page.py."""

from __future__ import annotations

import re

import pytest

from tests.test_browser import idle, open_page

PHONE = (390, 844)

# Every picture on the main area as the screen shows it: a serving picture's <img> (the one a phone is shown), and
# a chart's layers, its title and its legend. Each with its box and, for a serving picture, its smallest text in px.
PICTURES = """() => {
  const seen = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const box = el => { const r = el.getBoundingClientRect(); return {left: r.left, right: r.right}; };
  const serving = [...document.querySelectorAll('[data-testid=stMain] .dl-serve img')].filter(seen).map(img => {
    const bytes = Uint8Array.from(atob(img.src.split('base64,')[1]), c => c.charCodeAt(0));
    const svg = new DOMParser().parseFromString(new TextDecoder().decode(bytes), 'image/svg+xml');
    const sizes = [...svg.querySelectorAll('text')].map(t => parseFloat(t.getAttribute('font-size')));
    const view = parseFloat(svg.documentElement.getAttribute('viewBox').split(' ')[2]);
    return {what: img.closest('.dl-serve').dataset.testid, ...box(img),
            smallest_px: Math.min(...sizes) * img.getBoundingClientRect().width / view};
  });
  const charts = [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')].flatMap(plot => {
    const name = (plot.querySelector('.gtitle') || {}).textContent || 'a chart';
    return [...plot.querySelectorAll('.main-svg, .gtitle, .legend')].filter(seen)
      .map(el => ({what: `${name}: ${el.getAttribute('class')}`, ...box(el)}));
  });
  return {scroll: document.scrollingElement.scrollWidth, width: innerWidth, pictures: [...serving, ...charts]};
}"""


def fits(pg, where: str, serving: int = 0) -> None:
    """The page does not scroll sideways; every picture's box is inside the screen; `serving` serving pictures
    shown, each with no text under 11 px."""
    seen = pg.evaluate(PICTURES)
    assert seen["scroll"] <= seen["width"] == PHONE[0], (where, seen["scroll"])
    outside = [p for p in seen["pictures"] if p["left"] < -0.5 or p["right"] > seen["width"] + 0.5]
    assert not outside, (where, outside)
    drawn = [p for p in seen["pictures"] if "smallest_px" in p]
    assert len(drawn) == serving, (where, drawn)
    assert all(p["smallest_px"] >= 11 for p in drawn), (where, drawn)
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside


@pytest.mark.parametrize("scenario", ["long_prompt", "preemption", "queue"])
def test_on_a_phone_every_serving_picture_fits_the_screen_a_few_steps_in_and_at_the_end(server, browser, scenario):
    pg = open_page(browser, f"{server}/serving?scenario={scenario}&steps=6", *PHONE)
    pg.locator("[data-testid=dl-timeline] img:visible").wait_for()
    idle(pg)
    assert "after step 6" in pg.locator("[data-testid=dl-pool] img:visible").get_attribute("alt")
    fits(pg, f"{scenario}, step 6", serving=3)
    pg.get_by_role("button", name="Run to end").click()
    pg.locator("strong", has_text=re.compile("^Finished$")).first.wait_for(timeout=180_000)
    for part in ("dl-pool", "dl-pass", "dl-timeline"):  # the finished run's three pictures, once drawn
        pg.locator(f"[data-testid={part}] img:visible").wait_for()
    idle(pg)
    fits(pg, f"{scenario}, finished", serving=3)
    pg.close()


def test_on_a_phone_every_scale_picture_fits_the_screen(server, browser):
    pg = open_page(browser, f"{server}/scale", *PHONE)
    pg.get_by_text("Where does a decode step's time go?").wait_for(timeout=300_000)
    idle(pg)
    for view in ("ms per token", "roofline", "time split"):  # the size ladder's pictures, each picked
        pg.locator(".st-key-scale_ladder_row [data-testid=stButtonGroup] button").filter(has_text=view).click()
        idle(pg)
        fits(pg, view)
    pg.close()


FORMULAS = """() => [...document.querySelectorAll('[data-testid=stMain] .katex-display')].map(f => {
  const r = f.getBoundingClientRect();
  const px = [...f.querySelectorAll('.katex-html *')].filter(e => e.childElementCount === 0 && e.textContent.trim())
    .map(e => parseFloat(getComputedStyle(e).fontSize));
  return {scroll: f.scrollWidth, width: f.clientWidth, left: r.left, right: r.right, smallest_px: Math.min(...px),
          overflow: getComputedStyle(f).overflowX, tex: f.querySelector('annotation').textContent};
})"""


def test_on_a_phone_lesson_4s_formula_is_whole_on_screen_its_text_11_px_or_more(server, browser):
    pg = open_page(browser, f"{server}/lessons?lesson=4", *PHONE)
    pg.locator("[data-testid=stMain] .katex-display").wait_for(timeout=120_000)  # a loaded machine draws it late
    idle(pg)
    pg.evaluate("() => document.fonts.ready.then(() => true)")  # KaTeX's own fonts, not a narrower fallback
    (formula,) = pg.evaluate(FORMULAS)
    assert formula["scroll"] <= formula["width"] + 1, formula  # the whole product, "= … bytes" included, no swipe
    assert 0 <= formula["left"] and formula["right"] <= PHONE[0] and formula["smallest_px"] >= 11, formula
    slider = pg.get_by_test_id("stMain").get_by_role("slider").first  # the click after: the most decode steps, the longest numbers
    slider.focus()
    slider.press("End")
    pg.wait_for_function("""old => { const a = document.querySelector('[data-testid=stMain] .katex-display annotation');
                                  return a !== null && a.textContent !== old; }""", arg=formula["tex"], timeout=120_000)
    idle(pg)
    pg.evaluate("() => document.fonts.ready.then(() => true)")
    (longest,) = pg.evaluate(FORMULAS)
    assert longest["tex"] != formula["tex"] and 0 <= longest["left"] and longest["right"] <= PHONE[0], longest
    assert longest["scroll"] <= longest["width"] + 1 or longest["overflow"] == "auto", longest  # never cut off
    assert longest["smallest_px"] >= 11, longest
    assert pg.locator("[data-testid='stException']").count() == 0 and not pg.outside
    pg.close()


# Each chart's plot area, its legend and its axis titles as the screen shows them.
CHART_PARTS = """() => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')].map(plot => {
  const r = el => el ? el.getBoundingClientRect() : null;
  const titles = [...plot.querySelectorAll('.g-xtitle text, .g-ytitle text')].map(t => {
    const b = t.getBoundingClientRect(); return {text: t.textContent, left: b.left, right: b.right, top: b.top};
  });
  return {name: (plot.querySelector('.gtitle') || {}).textContent, titles, plot: r(plot.querySelector('.nsewdrag')).height,
          legend: (r(plot.querySelector('.legend')) || {height: 0}).height};
})"""


def test_on_a_phone_lesson_12s_charts_show_their_axis_titles_whole_and_a_plot_taller_than_its_legend(server, browser):
    """At 390 px the weight chart's axis title ran off both edges ("eight bytes read … equal bytes draw") and the
    context chart's eight-row legend stood over a plot shorter than itself: both after the prediction is picked."""
    pg = open_page(browser, f"{server}/lessons?lesson=12", *PHONE)
    idle(pg)
    pg.locator(".st-key-lesson12_guess").get_by_text("both faster", exact=True).click()
    idle(pg)
    pg.get_by_text("The context's bytes: one decode step's time").wait_for()
    charts = pg.evaluate(CHART_PARTS)
    assert len(charts) == 2, charts
    for c in charts:
        assert c["plot"] >= c["legend"], c
        for t in c["titles"]:
            assert t["left"] >= -0.5 and t["right"] <= PHONE[0] + 0.5, (c["name"], t)
    fits(pg, "lesson 12")
    pg.close()


LESSON_5_PARTS = """() => [...document.querySelectorAll('[data-testid=stMain] .js-plotly-plot')].map(plot => {
  const box = plot.getBoundingClientRect();
  const rect = el => { const b = el.getBoundingClientRect(); return {left: b.left, right: b.right, top: b.top,
                                                                    bottom: b.bottom, text: el.textContent}; };
  return {box: rect(plot), plot: plot.querySelector('.nsewdrag').getBoundingClientRect().height,
          legend: plot.querySelector('.legend').getBoundingClientRect().height,
          titles: [...plot.querySelectorAll('.g-ytitle text, .g-y2title text, .g-xtitle text')].map(rect),
          notes: [...plot.querySelectorAll('.annotation')].map(rect)};
})"""


def test_on_a_phone_lesson_5s_chart_keeps_its_axis_titles_and_note_inside_and_its_plot_taller_than_its_legend(
        server, browser):
    """At 390 px lesson 5's chart stacked its four legend entries over a 70-px plot, cut its right axis title at
    the top ("s per decode step (measured)") and ran its busy-server note off the right edge."""
    pg = open_page(browser, f"{server}/lessons?lesson=5", *PHONE)
    idle(pg)
    pg.get_by_text("Work per step, and the time it took").wait_for()
    (c,) = pg.evaluate(LESSON_5_PARTS)
    assert c["plot"] >= c["legend"], c
    for part in c["titles"] + c["notes"]:
        assert part["left"] >= -0.5 and part["right"] <= PHONE[0] + 0.5, part
        assert part["top"] >= c["box"]["top"] - 0.5 and part["bottom"] <= c["box"]["bottom"] + 0.5, part
    fits(pg, "lesson 5")
    pg.close()


def test_on_a_phone_every_budget_chart_fits_the_screen_its_title_whole(server, browser):
    """The budget page's recorded charts, drawn before anything is measured: each chart's title, legend and plot
    inside the screen (the titles ran off it: "Every policy over 8 stories, budget 6…")."""
    pg = open_page(browser, f"{server}/budget", *PHONE)
    pg.locator("[data-testid=stMain] .js-plotly-plot .gtitle", has_text="Every policy over").wait_for(timeout=300_000)
    idle(pg)
    titles = pg.locator("[data-testid=stMain] .js-plotly-plot .gtitle").all_text_contents()
    assert any(t.startswith("Damage against the budget") for t in titles), titles
    fits(pg, "budget")
    pg.close()


def test_on_a_phone_lesson_7s_batch_says_it_scrolls_sideways_where_it_does(server, browser):
    """The padded batch is wider than a phone: its first columns are row 0's padding alone, so the grid says it
    scrolls sideways, as the lessons' other wide pictures do, and scrolls to the last position."""
    pg = open_page(browser, f"{server}/lessons?lesson=7", *PHONE)
    pg.locator("[data-testid='dl-batch'] [data-pos]").first.wait_for(timeout=120_000)
    idle(pg)
    seen = pg.evaluate("""() => { const g = document.querySelector('[data-testid=dl-batch]');
      return {scrolls: g.scrollWidth > g.clientWidth + 1, hint: getComputedStyle(g, '::before').content,
              right: g.getBoundingClientRect().right}; }""")
    assert seen["scrolls"] and "swipe sideways" in seen["hint"], seen
    assert seen["right"] <= PHONE[0] + 0.5
    pg.close()


def test_on_a_phone_a_revealed_polls_bars_are_drawn_to_one_scale(browser):
    """After the reveal a phone drew '1 vote (100%)' as an 11 px bar beside 'model 88%' at 26 px: each bar shrank
    beside its own label. Every bar is now its share of one track: the widths keep the shares' ratios."""
    from classroom.poll_draw import poll_html

    question = {"choices": ["·two", "·a", "·the"], "answer": "·two", "model": {"·two": 0.1, "·a": 0.88, "·the": 0.02}}
    html = poll_html(question, {"total": 1, "counts": {"·two": 1}}, revealed=True)
    pg = browser.new_page(viewport={"width": PHONE[0], "height": PHONE[1]})
    pg.set_content(f"<body style='margin:10px;font:16px sans-serif'>{html}</body>")
    bars = pg.evaluate("""() => [...document.querySelectorAll('[data-role=poll-bar]')].map(b => [
        b.closest('[data-choice]').dataset.choice, b.parentElement.nextElementSibling.textContent,
        b.getBoundingClientRect().width])""")
    pg.close()
    width = {label: w for _, label, w in bars}
    assert width["1 vote (100%)"] == pytest.approx(width["model 88%"] / 0.88, rel=0.03), bars
    assert width["model 88%"] == pytest.approx(width["model 10%"] * 8.8, rel=0.05), bars
    assert width["1 vote (100%)"] > 100, bars  # a bar a class can read, not a sliver
