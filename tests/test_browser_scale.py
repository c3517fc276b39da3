"""The Scale page's two curves in a real browser: side by side at 1280x720 in presenter mode, each whole and titled
with its device, path and date; stacked on a 390x844 phone, nothing scrolled sideways. What AppTest can check of the
same pictures is in tests/test_scale_trust.py."""

from __future__ import annotations

from tests.test_browser import idle, open_page


def recorded_on(name: str) -> str:
    """The date a shipped recording was measured on (its own field), as a title writes it."""
    import json

    from engine.paths import ROOT

    return json.loads((ROOT / "assets" / name).read_text(encoding="utf-8"))["measured_at"][:10]

PRESENTER, PHONE = (1280, 720), (390, 844)
CURVES = (".st-key-scale_curve_cpu", ".st-key-scale_curve_gpu")


def both_curves(pg) -> list[dict]:
    """Turn 'side by side' on; the two curves' boxes (CPU's, GPU's) once drawn."""
    pg.locator(".st-key-scale_ladder_both label").first.click()
    idle(pg)
    for sel in CURVES:
        pg.locator(f"{sel} .js-plotly-plot").first.wait_for(timeout=60_000)
    return [pg.locator(sel).first.bounding_box() for sel in CURVES]


def titles(pg) -> list[str]:
    return [pg.locator(f"{sel} .gtitle").first.text_content() + " | " +
            " ".join(pg.locator(f"{sel} .gtitle-subtitle, {sel} .gsubtitle").all_text_contents()) for sel in CURVES]


def test_the_cpu_and_gpu_curves_stand_side_by_side_on_a_projector_each_titled_whole(server, browser):
    pg = open_page(browser, server + "/scale?presenter=on", *PRESENTER)
    idle(pg)
    cpu, gpu = both_curves(pg)
    assert abs(cpu["y"] - gpu["y"]) < 4 and cpu["x"] + cpu["width"] <= gpu["x"] + 1  # one row, CPU left
    assert cpu["width"] >= 560 and gpu["x"] + gpu["width"] <= PRESENTER[0]  # each readable, neither past the screen
    said = titles(pg)
    assert "AMD EPYC" in said[0] and "lean pass (compiled)" in said[0], said
    assert "NVIDIA H200" in said[1] and "lean pass (compiled)" in said[1], said
    assert recorded_on("ladder_cpu.json") in said[0] and recorded_on("ladder_gpu.json") in said[1], said
    pg.close()


def test_on_a_phone_the_two_curves_stack_and_nothing_scrolls_sideways(server, browser):
    pg = open_page(browser, server + "/scale", *PHONE)
    idle(pg)
    cpu, gpu = both_curves(pg)
    assert gpu["y"] >= cpu["y"] + cpu["height"] - 1  # stacked, the GPU's under the CPU's
    assert cpu["width"] <= PHONE[0] and gpu["width"] <= PHONE[0]
    assert pg.evaluate("() => document.documentElement.scrollWidth") <= PHONE[0]
    pg.close()


def test_on_a_projector_the_bytes_sections_first_chart_is_whole_under_its_heading(server, browser):
    """Scrolled to "Bytes are time", a projector showed the weight chart's top and cut its axis at the screen's
    edge: a paragraph of where and when stood between the heading and the chart. The chart comes first now."""
    pg = open_page(browser, server + "/scale?presenter=on", *PRESENTER)
    idle(pg)
    heading = pg.get_by_text("Bytes are time: the weights and the cache in fewer bytes, timed").first
    heading.evaluate("e => e.scrollIntoView({block: 'start'})")
    pg.wait_for_timeout(400)
    top = heading.bounding_box()
    chart = pg.locator(".st-key-scale_bytes_storage").first.bounding_box()
    assert 0 <= top["y"] < chart["y"], (top, chart)
    assert chart["y"] + chart["height"] <= PRESENTER[1] + 1, (top, chart)
    title = pg.locator(".st-key-scale_bytes_storage .g-xtitle").first.bounding_box()  # its axis title too
    assert title["y"] + title["height"] <= PRESENTER[1] + 1, title
    pg.close()


TABLES = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')].map(d => {
  const s = d.querySelector('.dvn-scroller');
  return s && {scroll: s.scrollWidth, width: s.clientWidth};
}).filter(Boolean)"""


def test_on_a_projector_every_table_on_the_scale_page_shows_every_column(server, browser):
    """The bytes table's eleven columns ran 105 px past a projector's width: 'predicted (FLOP rate)', the prefill's
    prediction, was cut at 'predic' and read only by scrolling the table sideways."""
    pg = open_page(browser, server + "/scale?presenter=on", *PRESENTER)
    idle(pg)
    pg.locator(".st-key-scale_bytes_storage .js-plotly-plot").first.wait_for(timeout=60_000)
    pg.wait_for_function("() => document.querySelectorAll('[data-testid=stDataFrame] .dvn-scroller').length >= 2")
    tables = pg.evaluate(TABLES)
    assert len(tables) >= 2 and all(t["scroll"] <= t["width"] + 1 for t in tables), tables
    pg.close()
