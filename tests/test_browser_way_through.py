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
    pg.evaluate("spec => Plotly.newPlot('chart', spec.data, spec.layout, {displayModeBar: false})",
                json.loads(figure.to_json()))
    pg.wait_for_timeout(200)
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


# ---------------------------------------------------------------- the race plays on the first screen


def test_at_1280x720_the_race_plays_on_the_first_screen_and_its_verdict_follows(keyed_server, browser):
    """After Start race the lanes sat under the proof, the four numbers and a warning: below the fold."""
    pg = open_page(browser, f"{keyed_server}/race?presenter=on", *PRESENTER)
    expect(pg.get_by_role("button", name="Start race")).to_be_visible(timeout=120_000)
    tokens = pg.get_by_label("tokens", exact=True)
    tokens.fill("40")
    tokens.press("Enter")
    idle(pg)
    pg.get_by_role("button", name="Start race").click()
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
    pg.close()
