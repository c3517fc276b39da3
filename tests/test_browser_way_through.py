"""The class's way through, in a real browser (issue 42, items 8 to 13): every page answers at its own address, a
fork finds its way back to the class, the race plays on the first screen, a phone shows the stage whole and
readable, nothing clips at 1280x720, and the class's link is the address the lecturer used.

System Chromium via Playwright; one app server with a lecturer key for the module (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.test_browser import idle, open_page

PRESENTER, PHONE = (1280, 720), (390, 844)
ROOT = Path(__file__).resolve().parent.parent

# every page of the sidebar, by its address, and what the page itself shows first (its own words, not the frame's)
ADDRESSES = {
    "step_through": ("button", "Prefill"),
    "lessons": ("heading", "Lessons: how a language model generates text"),
    "race": ("heading", "Race: KV cache on vs off"),
    "speculative": ("heading", "Speculative decoding"),
    "serving": ("button", re.compile(r"▶ step")),
    "scale": ("heading", "Scale: the model grown, KV memory, the roofline"),
    "budget": ("heading", "The KV cache on a budget"),
    "model_info": ("heading", "The model"),
}


def not_found(pg) -> bool:
    return pg.get_by_text("Page not found").count() > 0


@pytest.mark.parametrize("path", sorted(ADDRESSES))
def test_every_page_answers_at_its_own_address(keyed_server, browser, path):
    """/step_through answered "Page not found" (the default page lived only at /) and ran the step page anyway."""
    role, name = ADDRESSES[path]
    pg = open_page(browser, f"{keyed_server}/{path}?seed=3", *PRESENTER)
    expect(pg.get_by_role(role, name=name).first).to_be_visible(timeout=120_000)
    idle(pg)
    assert not not_found(pg), path
    assert f"/{path}" in pg.url and "seed=3" in pg.url  # it stays there, its link's settings kept
    assert pg.locator("[data-testid='stException']").count() == 0
    pg.close()


def open_sidebar(pg) -> None:
    button = pg.locator("[data-testid=stExpandSidebarButton]")
    if button.count():
        button.first.click()
    expect(pg.locator("[data-testid=stSidebar][data-collapsed=false]")).to_have_count(1)
    idle(pg)


def test_at_1280x720_with_the_sidebar_open_every_page_name_is_whole_and_the_control_bar_is_one_row(
        keyed_server, browser):
    """'Scale: KV memory and ro…' in the sidebar; the KV cache switch wrapped onto a second row of the bar."""
    pg = open_page(browser, f"{keyed_server}/?presenter=on&steps=2", *PRESENTER)
    expect(pg.get_by_role("button", name="Next token")).to_be_enabled(timeout=120_000)
    open_sidebar(pg)
    names = pg.evaluate("""() => [...document.querySelectorAll('[data-testid=stSidebar] a')].map(a => {
        const words = a.querySelector('[data-testid=stMarkdownContainer]') || a;
        const cut = [words, ...words.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1);
        const r = words.getBoundingClientRect(), side = a.closest('[data-testid=stSidebar]').getBoundingClientRect();
        return [words.innerText.trim(), cut || r.right > side.right + 1];
    })""")
    assert "Scale: KV memory and roofline" in [n for n, _ in names]
    assert [n for n, cut in names if cut] == []
    bar = pg.evaluate("""() => ['step_prompt', 'step_btn_prefill', 'step_btn_back', 'step_btn_forward', 'step_btn_next',
        'step_btn_run', 'step_btn_reset', 'bar_cache'].map(k => {
          const r = document.querySelector('.st-key-' + k).getBoundingClientRect();
          return [k, r.top, r.bottom];
        })""")
    tops = {k: top for k, top, _ in bar}
    first = min(tops.values())
    assert [k for k, top in tops.items() if top > first + 20] == [], bar  # every control on the bar's one row
    pg.close()


# ---------------------------------------------------------------- a chart as plotly.js draws it


def drawn(browser, figure, width: int, height: int = 500):
    """A page with `figure` drawn by plotly.js (the package's own bundle, no server) in a box `width` px wide: the
    width the Latency view has beside the stage at 1280x720 in presenter mode, or on a phone."""
    import plotly

    bundle = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    pg = browser.new_page(viewport={"width": width + 40, "height": height})
    pg.set_content(f'<div id="chart" style="width:{width}px"></div>')
    pg.add_script_tag(path=str(bundle))
    pg.evaluate("spec => Plotly.newPlot('chart', spec.data, spec.layout, {displayModeBar: false}).then(() => true)",
                json.loads(figure.to_json()))
    # automargin redraws after the first drawing: read the words only once two looks 150 ms apart agree
    before = None
    for _ in range(40):
        pg.wait_for_timeout(150)
        now = pg.evaluate(WORDS)
        if now == before:
            break
        before = now
    return pg


WORDS = """() => {  // every piece of text the chart draws, by what it is: [kind, text, left, top, right, bottom]
  const out = [], kinds = {'.xtick text': 'x tick', '.ytick text': 'y tick', '.y2tick text': 'y2 tick',
    '.g-xtitle text': 'x title', '.g-ytitle text': 'y title', '.g-y2title text': 'y2 title', '.legendtext': 'legend',
    '.annotation-text': 'note', '.gtitle': 'title'};
  for (const [sel, kind] of Object.entries(kinds))
    for (const t of document.querySelectorAll(sel)) {
      const r = t.getBoundingClientRect();
      if (r.width > 0 && (t.textContent || '').trim()) out.push([kind, t.textContent.trim(), r.left, r.top, r.right, r.bottom]);
    }
  return out;
}"""


def collisions(words: list) -> list:
    """Pairs of chart words of different kinds whose boxes overlap (a tick label over a note, a note over a title)."""
    out = []
    for i, a in enumerate(words):
        for b in words[i + 1:]:
            if a[0] != b[0] and a[2] < b[4] - 1 and b[2] < a[4] - 1 and a[3] < b[5] - 1 and b[3] < a[5] - 1:
                out.append((a[:2], b[:2]))
    return out


@pytest.mark.parametrize("scale, width", [(1.35, 440), (1.0, 440), (1.0, 370)], ids=["presenter", "plain", "phone"])
def test_the_latency_views_cut_whiskers_are_named_where_no_axis_label_or_tick_lies(browser, family_model, scale, width):
    """'▲ cut: step 1: 29 ms' lay over the right axis's tick labels: its words are still said, over nothing."""
    from dataclasses import replace

    import streamlit  # noqa: F401 - as in the app's process: its colour-only template is plotly's default there

    from drawing.latency import latency_figure
    from engine import Stepper
    from engine.forward.run import Timing

    run = Stepper(family_model("llama"), "Once upon a time", max_new_tokens=8, stop_on_eos=False)
    run.run()
    traces = [replace(t, timing=Timing((4.0, 4.1, 4.2), None, 0.0)) for t in run.records]
    traces[0] = replace(traces[0], timing=Timing((20.0, 21.0, 22.0), None, 0.0))
    traces[1] = replace(traces[1], timing=Timing((4.0, 4.2, 29.0), None, 0.0))  # one slow repeat: its whisker cut
    pg = drawn(browser, latency_figure(traces, scale=scale), width)
    words = pg.evaluate(WORDS)
    said = " ".join(w[1] for w in words)
    assert re.search(r"cut: step 1: 29 ms", said), said
    assert collisions(words) == []
    box = pg.evaluate("() => document.querySelector('#chart .main-svg').getBoundingClientRect().toJSON()")
    assert all(box["left"] - 1 <= w[2] and w[4] <= box["right"] + 1 for w in words), words  # nothing past its edge
    pg.close()


def next_token_chart(request, scale):
    """Lesson 6's next-token bars: on a phone the bars' two names wrapped into two rows that stood on the plot and
    grew up over the title, 'before warpers' drawn across 'Next token: ·was (green)'; the candidates' names, always
    turned 30°, crowded one another and the axis ('·saw' on the probability axis's '0%'). Plotly now turns them as
    far as the width needs."""
    from drawing.tokens import next_token_figure
    from engine import Stepper
    from ui.presets import PROMPTS

    t = Stepper(request.getfixturevalue("bundled_lm"), PROMPTS[2]["prompt"], max_new_tokens=4).prefill()
    return next_token_figure(t, scale=scale), len(t.top)  # every candidate named


def race_chart(request, scale):
    """The race: on a phone its four names wrapped into rows standing on the plot that grew up over its title, the
    'KV cache on' line struck through 'Per-step latency against position'."""
    from engine.generate.compare import compare
    from topics.race import draw as race_draw
    from topics.race import measure as race

    lm = request.getfixturevalue("family_model")("llama")  # the legend's names are every architecture's
    report = race.RaceReport.of(compare(lm, "Once upon a time", new_tokens=6, stop_on_eos=False))
    return race_draw.latency_figure(race.race_frame(report), scale=scale), None


@pytest.mark.parametrize("chart", [next_token_chart, race_chart], ids=["next token", "race"])
@pytest.mark.parametrize("scale, width", [(1.35, 1200), (1.0, 700), (1.0, 370)], ids=["presenter", "plain", "phone"])
def test_a_charts_legend_of_several_names_lies_clear_of_its_title(browser, request, chart, scale, width):
    """A legend that wraps on a narrow screen grows down from under the title, never up over it (each chart's
    story: its builder's docstring)."""
    import streamlit  # noqa: F401 - as in the app's process: its colour-only template is plotly's default there

    figure, ticks = chart(request, scale)
    pg = drawn(browser, figure, width)
    words = pg.evaluate(WORDS)
    assert {"legend", "title"} <= {w[0] for w in words}, words
    assert collisions(words) == []
    assert ticks is None or len([w for w in words if w[0] == "x tick"]) == ticks
    pg.close()


COLOUR_BAR = """() => [...document.querySelectorAll('.colorbar .cbaxis text, .colorbar text.ytick, .cbaxis .ytick text')]
  .filter(t => t.textContent.trim()).map(t => { const r = t.getBoundingClientRect(); return [r.top, r.bottom]; })"""


@pytest.mark.parametrize("scale, width", [(1.35, 600), (1.0, 370)], ids=["presenter", "phone"])
def test_every_heads_row_chart_keeps_its_title_and_colour_bar_words_apart(browser, family_model, scale, width):
    """The step page's Attention view on a phone: the axis title 'head · its role in this row' ran up the side into
    'layer 0, every head: query 43 ·to', and the colour bar's 1, 0.5 and 0 lay on one another."""
    import streamlit  # noqa: F401 - as in the app's process: its colour-only template is plotly's default there

    from drawing.attention import heads_figure
    from drawing.palette import axis_labels
    from engine import Stepper

    run = Stepper(family_model("llama"), "Once upon a time there was a little girl named Lily. She",
                  max_new_tokens=30, stop_on_eos=False)
    run.run()
    t = run.records[-1]
    roles = {h: "previous token" if h < 2 else "broad" for h in range(t.layers[0].pattern.shape[0])}
    pg = drawn(browser, heads_figure(t, 0, axis_labels(run.pieces()), scale=scale, roles=roles), width)
    words = pg.evaluate(WORDS)
    assert "title" in {w[0] for w in words} and collisions(words) == []
    bar = sorted(pg.evaluate(COLOUR_BAR))
    assert len(bar) >= 2 and all(a[1] <= b[0] + 1 for a, b in zip(bar, bar[1:])), bar  # each tick clear of the next
    pg.close()


def test_lesson_1s_request_cards_keep_every_word_inside_their_box(browser, family_model):
    """'4,065,536 parameters, once per server' and '21 characters → 8 ids' ran to their card's right edge: the notes
    were cut at 17 characters whatever the card's width."""
    from drawing.request import request_svg
    from physics.request import request_timeline

    svg = request_svg(request_timeline(family_model("llama"), "Once upon a time, there was", new_tokens=4))
    pg = browser.new_page(viewport={"width": 1100, "height": 500})
    pg.set_content(f"<body style='margin:10px'><div style='width:1000px'>{svg}</div></body>")
    out = pg.evaluate("""() => [...document.querySelectorAll('[data-role=request-step]')].flatMap(g => {
      const box = g.querySelector('rect').getBoundingClientRect();
      return [...g.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect().right, box.right]);
    })""")
    assert len(out) > 14 and [w for w, right, edge in out if right > edge - 3] == [], out
    pg.close()


MARKED = """() => {  // each rung's name beside its point, and every marker drawn: [text, left, top, right, bottom]
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {names: [...document.querySelectorAll('.textpoint text')].filter(t => t.textContent.trim())
                    .map(t => [t.textContent.trim(), ...box(t)]),
          markers: [...document.querySelectorAll('.scatterlayer .points path.point')].map(box)};
}"""


@pytest.mark.parametrize("scale, width", [(1.0, 900), (1.35, 590), (1.0, 370)], ids=["wide", "presenter", "phone"])
def test_every_rung_named_on_the_recorded_rooflines_lies_clear_of_every_marker_and_whole(browser, scale, width):
    """On the EPYC's roofline the largest rung's name, above its decode point, lay under the lean pass's diamond a
    rung below it, drawn over the word: '221M' read '22'. On the H200's, beside the pass-of-n curve on a projector
    (~590 px), 'Llama-3-8B' ran past the chart's right edge and read 'Llama-3'."""
    from topics.ladder import draw
    from topics.ladder.store import recorded_ladders

    ladders = recorded_ladders()
    assert ladders, "no recorded ladder shipped in assets/"
    for ladder in ladders:
        pg = drawn(browser, draw.roofline_figure(ladder, scale=scale), width, height=700)
        got = pg.evaluate(MARKED)
        assert {r.label for r in (ladder.rungs[0], ladder.rungs[-1])} <= {n[0] for n in got["names"]}, got["names"]
        under = [(n[0], m) for n in got["names"] for m in got["markers"]
                 if n[1] < m[2] - 1 and m[0] < n[3] - 1 and n[2] < m[3] - 1 and m[1] < n[4] - 1]
        assert under == [], f"{ladder.device}: a rung's name under a marker: {under}"
        box = pg.evaluate("() => document.querySelector('#chart .main-svg').getBoundingClientRect().toJSON()")
        assert [n for n in got["names"] if n[3] > box["right"] + 1] == [], f"{ladder.device}: a name cut"
        pg.close()


# ---------------------------------------------------------------- the race plays on the first screen


def start_race(browser, url: str, size: tuple[int, int], tokens: int):
    """The race page at `size`: `tokens` new tokens asked for, then Start race pressed; the page, racing."""
    pg = open_page(browser, url, *size)
    expect(pg.get_by_role("button", name="Start race")).to_be_visible(timeout=120_000)
    box = pg.get_by_label("tokens", exact=True)
    box.fill(str(tokens))
    box.press("Enter")
    idle(pg)
    pg.get_by_role("button", name="Start race").click()
    return pg


def test_at_1280x720_the_race_plays_on_the_first_screen_and_its_verdict_follows(keyed_server, browser):
    """After Start race the lanes sat under the proof, the four numbers and a warning: below the fold. They play on
    the first screen now, and the verdict follows them, on the first screen too at 120 tokens (the lanes' texts
    keep their newest lines)."""
    pg = start_race(browser, f"{keyed_server}/race?presenter=on", PRESENTER, tokens=120)
    lanes = [pg.get_by_test_id(f"race-progress-{mode}") for mode in ("cache", "nocache")]
    lanes[1].wait_for(timeout=300_000)  # both runs are measured first, then played back
    seen = None
    for _ in range(400):  # while they play: the slower run not finished yet
        if "finished" not in lanes[1].inner_text():
            seen = [lane.bounding_box() for lane in lanes] + [
                pg.get_by_test_id(f"race-bar-{mode}").bounding_box() for mode in ("cache", "nocache")]
            proof = pg.locator("[data-testid=stAlert]").filter(has_text=re.compile("Identical tokens|The runs differ"))
            ahead = [b.bounding_box() for b in proof.all()]
            break
        pg.wait_for_timeout(20)
    assert seen, "the playback was never seen running"
    assert pg.evaluate("window.scrollY") == 0
    assert all(box and box["y"] >= 0 and box["y"] + box["height"] <= PRESENTER[1] for box in seen), seen
    assert all(b is None or b["y"] > seen[0]["y"] for b in ahead), ahead  # no verdict above the lanes
    idle(pg)
    proof = pg.locator("[data-testid=stAlert]").filter(has_text=re.compile("Identical tokens|The runs differ")).first
    expect(proof).to_be_visible()
    assert proof.bounding_box()["y"] > lanes[0].bounding_box()["y"]  # the verdict follows the lanes
    assert "finished" in lanes[0].inner_text() and "finished" in lanes[1].inner_text()
    pg.evaluate("window.scrollTo(0, 0)")
    for shown in (proof, pg.locator("[data-testid='stMetric']").first, *lanes):
        box = shown.bounding_box()
        assert box["y"] + box["height"] <= PRESENTER[1], box  # the lanes and the verdict, on one screen
    for mode in ("cache", "nocache"):  # each lane's text shows its newest words (the earlier ones scroll in place)
        end = pg.get_by_test_id(f"race-text-{mode}").evaluate("""e => { const r = e.getBoundingClientRect(),
            words = e.querySelector('b').getClientRects(), last = words[words.length - 1];
            return last.bottom <= r.bottom + 1 && last.top >= r.top - 1; }""")
        assert end, mode
    pg.close()


@pytest.mark.parametrize("size", [PHONE, PRESENTER], ids=["phone", "presenter"])
def test_each_race_text_says_which_run_it_is_where_the_lanes_stack(keyed_server, browser, size):
    """On a phone the columns stack: both lanes (name, bar, clock), then both texts, under the second lane's bar.
    Each text there is named by its run, in that order; side by side, under their own lanes, they need no name."""
    pg = start_race(browser, f"{keyed_server}/race", size, tokens=16)
    pg.get_by_test_id("race-text-nocache").wait_for(timeout=300_000)
    idle(pg)
    names = {m: pg.get_by_test_id(f"race-text-name-{m}") for m in ("cache", "nocache")}
    texts = {m: pg.get_by_test_id(f"race-text-{m}") for m in ("cache", "nocache")}
    if size == PRESENTER:
        assert not names["cache"].is_visible() and not names["nocache"].is_visible()
        assert texts["cache"].bounding_box()["x"] < texts["nocache"].bounding_box()["x"]  # side by side
    else:
        assert names["cache"].inner_text() == "KV cache on" and names["nocache"].inner_text() == "KV cache off"
        order = [names["cache"], texts["cache"], names["nocache"], texts["nocache"]]
        tops = [e.bounding_box()["y"] for e in order]
        assert tops == sorted(tops), tops  # each name right above its own text
        assert all(px >= 11 for px in (float(n.evaluate("e => getComputedStyle(e).fontSize")[:-2])
                                       for n in names.values()))
    pg.close()


# ---------------------------------------------------------------- a phone: the stage whole, every word 11 px or more


SMALL_WORDS = """(root) => {  // every visible word set under 11 px: [text, px] (an inline SVG's words at the size drawn)
  const out = [];
  const walker = document.createTreeWalker(root || document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const n = walker.currentNode, el = n.parentElement;
    if (!el || !n.textContent.replace(/\\u200b/g, '').trim()) continue;
    if (el.closest('.katex-mathml, [data-testid=stSidebar], script, style, .modebar-container')) continue;
    const style = getComputedStyle(el), r = el.getBoundingClientRect();
    if (style.display === 'none' || style.visibility === 'hidden' || r.width < 2 || r.height < 2) continue;
    let px = parseFloat(style.fontSize);
    const svg = el.closest('svg');
    if (svg && svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width)
      px *= svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    if (px < 10.95) out.push([n.textContent.trim().slice(0, 30), Math.round(px * 10) / 10]);
  }
  return out;
}"""


APART = """(svg) => {  // words of an inline SVG that leave it or overlap another word: [a, b]
  const box = svg.getBoundingClientRect(), out = [];
  const words = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()])
    .filter(([w, r]) => w.trim() && r.width > 0);
  for (const [w, r] of words) if (r.left < box.left - 1 || r.right > box.right + 1) out.push([w, 'past the edge']);
  for (let i = 0; i < words.length; i++) for (let j = i + 1; j < words.length; j++) {
    const [a, r] = words[i], [b, q] = words[j];
    if (r.left < q.right - 1 && q.left < r.right - 1 && r.top < q.bottom - 2 && q.top < r.bottom - 2) out.push([a, b]);
  }
  return out;
}"""


def picture_words(svg: str) -> list[tuple[str, float, float, float]]:
    """(text, x, y, font size) of every <text> of an SVG, in its own units."""
    return [(m.group(4), float(m.group(1)), float(m.group(2)), float(m.group(3))) for m in re.finditer(
        r'<text x="([\d.-]+)" y="([\d.-]+)" font-size="([\d.]+)"[^>]*>([^<]*)</text>', svg)]


def shown_at(box: dict, svg: str):
    """Where a unit of the SVG lands on the screen, as the <img> of `box` shows it: (x, y) -> (left, top) in px."""
    width = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    k = box["width"] / width
    return k, (lambda x, y: (box["x"] + x * k, box["y"] + y * k))


def role_box(svg: str, role: str, extra: str = "") -> tuple[float, float, float, float]:
    """(x, y, width, height) of the first rect inside the first <g data-role=role ...extra>."""
    m = re.search(rf'data-role="{role}"{extra}[^>]*><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"',
                  svg)
    assert m, role
    return tuple(float(v) for v in m.groups())


def on_first_screen(place, x: float, y: float, w: float, h: float, size=PHONE) -> bool:
    (left, top), (right, bottom) = place(x, y), place(x + w, y + h)
    return left >= -1 and right <= size[0] + 1 and top >= -1 and bottom <= size[1] + 1


def test_a_phone_opens_its_own_stage_with_title_layer_buttons_and_newest_column_on_screen_and_no_word_under_11_px(
        keyed_server, browser):
    """The stage opened scrolled to its right edge, its title and layer buttons cut until a swipe, its words 6-8 px.
    On a phone it is now drawn for the phone's width: its title, its layer buttons, the new K/V column and the next
    token all on the first screen, nothing to scroll sideways, no word under 11 px (in the picture or on the page)."""
    import base64

    pg = open_page(browser, f"{keyed_server}/?steps=3", *PHONE)
    stage = pg.locator("[data-testid=dl-stage] img:visible")
    expect(stage).to_be_visible(timeout=120_000)
    idle(pg)
    assert pg.evaluate("document.documentElement.scrollWidth") == PHONE[0]
    assert pg.locator("[data-testid=dl-stage]").first.evaluate("e => e.scrollLeft") == 0
    svg = base64.b64decode(stage.get_attribute("src").split("base64,", 1)[1]).decode()
    k, place = shown_at(stage.bounding_box(), svg)
    words = picture_words(svg)
    title = words[0]
    assert title[0].startswith("Decode") and on_first_screen(place, title[1], title[2] - title[3], 200, title[3])
    for layer in range(4):  # the bundled model's four layers, each a button on screen
        assert on_first_screen(place, *role_box(svg, "layer", f' data-layer="{layer}"')), layer
    assert on_first_screen(place, *role_box(svg, "k-col", r' data-pos="\d+" data-kind="\w+" data-new="1"'))
    assert on_first_screen(place, *role_box(svg, "chosen-chip"))
    smallest = min(size for _, _, _, size in words) * k
    assert smallest >= 11, smallest
    for view in ("Attention", "Next token", "Matmuls", "Shapes", "KV cache", "Latency", "Tokens"):
        pg.locator("[data-testid='stRadio'] label").filter(has_text=re.compile(f"^{view}$")).first.click()
        idle(pg)
        assert pg.evaluate(SMALL_WORDS) == [], view
    pg.close()


def test_a_phone_following_the_class_sees_the_stage_whole_and_a_lesson_says_its_title_once_under_the_bar(
        keyed_server, browser):
    """A follower's phone: the stage opened at its right edge with 7 px words; a followed lesson said its title four
    times ('Lessons · 4. The KV cache' twice, the lesson picker, the heading) under the page's own title."""
    from tests.test_follow import start_class

    lect = open_page(browser, keyed_server, *PRESENTER)
    expect(lect.get_by_role("button", name="Prefill")).to_be_enabled(timeout=120_000)
    link = start_class(lect)
    lect.keyboard.press("p")
    expect(lect.get_by_text(re.compile(r"\(0 from decode steps\)"))).to_be_visible()
    for i in (1, 2):
        lect.keyboard.press("n")
        expect(lect.get_by_text(re.compile(rf"\({i} from decode steps\)"))).to_be_visible()
    phone = open_page(browser, link, *PHONE)
    stage = phone.locator("[data-testid=dl-follow-stage][data-step='2'] svg").first
    stage.wait_for(timeout=30_000)
    assert phone.evaluate("document.documentElement.scrollWidth") == PHONE[0]
    for role in ("layer", "chosen-chip"):
        box = stage.locator(f"[data-role={role}]").first.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE[0] and box["y"] + box["height"] <= PHONE[1], role
    new = stage.locator("[data-role=k-col][data-new='1']").first.bounding_box()
    assert new["x"] + new["width"] <= PHONE[0] and new["y"] + new["height"] <= PHONE[1]
    title = stage.locator("text").first.bounding_box()
    assert title["x"] >= 0 and title["y"] >= 0
    assert stage.evaluate(APART) == []  # every word inside the picture, none over another
    assert phone.evaluate(SMALL_WORDS) == []
    for view in ("Next token", "KV cache", "Latency"):
        phone.locator(".dlf-btn", has_text=view).first.click()
        phone.locator(".dlf-view .dlf-block, .dlf-view .dlf-figure .main-svg").first.wait_for(timeout=30_000)
        phone.wait_for_timeout(800)
        assert phone.evaluate(SMALL_WORDS) == [], view

    lect.locator("[data-testid=stSidebar] a").filter(has_text="Lessons").first.click()
    idle(lect)
    for n in (2, 3, 4):
        lect.get_by_role("button", name="Next").click()
        expect(lect.get_by_role("heading", level=2).filter(has_text=re.compile(rf"^{n}\. "))).to_be_visible()
        idle(lect)
    expect(phone.get_by_test_id("dl-follow-where")).to_contain_text("Lessons · 4. The KV cache", timeout=15_000)
    page = phone.get_by_test_id("dl-follow-page")
    expect(page).to_contain_text("try it: decode steps")
    shown = phone.evaluate("() => document.querySelector('[data-testid=dl-follow]').innerText")
    assert shown.count("The KV cache") == 2, shown[:400]  # once in the bar, once as the lesson's heading
    assert "Lessons: how a language model generates text" not in shown  # the page's title: the bar names the page
    phone.wait_for_timeout(1000)
    assert phone.evaluate(SMALL_WORDS) == []
    lect.close()
    phone.close()


def phone_cases(bundled_lm, family_model):
    """Passes that stretch a phone's stage: a prefill, a cached step, 30 steps with the cache off over a long
    prompt, a six-layer model with sliding windows (its layer buttons elided), a long token, a rejected guess."""
    from engine import Stepper

    out = []
    s = Stepper(bundled_lm, "Once upon a time", max_new_tokens=40)
    out.append(("prefill", s.prefill(), s, {}))
    for _ in range(3):
        s.decode()
    out.append(("decode", s.records[-1], s, {"layer": 3, "head": 5}))
    out.append(("rejected", s.records[-1], s, {"rejected_from": s.records[-1].kv_len - 2,
                                                 "title": "Verify · round 2 · 3 rows checked in one pass · 2 columns cut"}))
    off = Stepper(bundled_lm, "Once upon a time there was a little girl named Lily. She loved to play in the park "
                  "with her friends every day.", max_new_tokens=40, use_cache=False)
    off.prefill()
    for _ in range(30):
        off.decode()
    out.append(("cache off, 30 steps", off.records[-1], off, {"layer": 2}))
    g = Stepper(family_model("gemma3"), "Once upon a time there was a cat", max_new_tokens=12)
    g.prefill()
    for _ in range(8):
        g.decode()
    out.append(("six sliding layers", g.records[-1], g, {"layer": 3, "head": 1}))
    return out


def test_the_phone_stage_keeps_every_word_inside_the_picture_and_apart_at_390_px(browser, bundled_lm, family_model):
    from drawing.stage_phone import phone_stage_svg

    pg = browser.new_page(viewport={"width": PHONE[0], "height": PHONE[1]})
    for name, t, run, kw in phone_cases(bundled_lm, family_model):
        pieces = run.pieces()
        if name == "decode":
            pieces = pieces[:-1] + ["<|endoftext|><|endoftext|>"]  # a long token in the strip
        svg = phone_stage_svg(t, pieces, run.prompt_len, **kw)
        pg.set_content(f"<body style='margin:10px'><div style='width:370px'>{svg}</div></body>")
        found = pg.locator("svg").first.evaluate(APART)
        assert found == [], (name, found)
        assert pg.evaluate(SMALL_WORDS) == [], name
    pg.close()


@pytest.mark.parametrize("scale, width", [(1.35, 700), (1.0, 358)], ids=["presenter", "phone"])
def test_lesson_12s_bytes_charts_keep_every_word_inside_and_the_legend_in_one_row_beside_the_test(browser, scale,
                                                                                                 width):
    """Lesson 12's storage chart shares a projector's line with the test (a 0.6 column, ~700 px): its legend took
    three rows there and pushed the axis's words under the screen's foot; on a phone its axis title ran past the
    chart's right edge ('…counted from the tensors' without its ')')."""
    import streamlit  # noqa: F401 - as in the app's process: its colour-only template is plotly's default there

    from topics.bytes import figures
    from topics.bytes import store as bytes_store

    rec = bytes_store.recorded()
    for figure in (figures.storage_figure(rec, scale=scale), figures.context_figure(rec, scale=scale)):
        pg = drawn(browser, figure, width)
        words = pg.evaluate(WORDS)
        box = pg.evaluate("() => document.querySelector('#chart .main-svg').getBoundingClientRect().toJSON()")
        assert [w for w in words if w[2] < box["left"] - 1 or w[4] > box["right"] + 1] == [], box
        assert collisions(words) == []
        legend = [w for w in words if w[0] == "legend"]
        if scale > 1 and figure.layout.title.text.startswith("Time per pass"):
            assert len({round(w[3]) for w in legend}) == 1, legend  # one row
        pg.close()
