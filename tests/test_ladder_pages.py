"""The size ladder in the app: the Scale page opens on it, a link opens its picture, the lessons and the Latency
view quote its numbers, and the race runs at a rung with random weights."""

from __future__ import annotations

import json
import re

import pytest

from physics.rungs import RANDOM_WEIGHTS
from topics.ladder import draw as draw
from topics.ladder.measure import measure_ladder
from topics.ladder.store import STORE, ladder_key
from ui.apptest import app_test, page

pytestmark = pytest.mark.slow  # every test here drives the app's pages in AppTest


@pytest.fixture(scope="module")
def kept():
    """A small ladder measured here and kept as this server's own (what the Scale page's button makes), for the
    model as the sidebar names it."""
    from engine.load.load import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL, device="cpu")
    measured = measure_ladder(lm, sizes=["own", "6M"], tokens=16, repeats=1)
    key = ladder_key(lm)
    STORE._kept[key] = measured
    yield measured
    STORE._kept.pop(key, None)


def figure_titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def test_the_scale_page_opens_on_the_ladder_measured_here_with_random_weights_said(kept):
    at = app_test().run()
    at.switch_page(page("scale")).run()
    assert not at.exception
    assert at.get("plotly_chart"), "no chart"
    first = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
    assert first["title"]["text"] == "ms per token: prefill vs decode"
    assert RANDOM_WEIGHTS in first["title"]["subtitle"]["text"]  # said on the figure itself
    assert any("measured on this server" in c.value for c in at.caption)
    said = draw.bundled_sentence(kept)
    assert any(said == c.value for c in at.caption)  # what bounds the bundled model, from the same ladder


@pytest.mark.parametrize("view, title", [("roofline", "Every rung on its machine's roofline"),
                                         ("split", "Where a decode step's time goes")])
def test_a_ladder_link_opens_its_picture_and_keeps_it(kept, view, title):
    at = app_test()
    at.query_params = {"ladder": view}
    at.run()
    at.switch_page(page("scale")).run()
    assert not at.exception
    assert title in figure_titles(at)
    assert at.query_params["ladder"] in (view, [view])  # the address bar still reproduces it


def test_a_bad_ladder_link_is_ignored_with_a_reason(kept):
    at = app_test()
    at.query_params = {"ladder": "<b>x</b>"}
    at.run()
    assert any("ladder" in w.value and "ignored" in w.value for w in at.warning)


@pytest.mark.parametrize("lesson, phase", [(2, "prefill"), (3, "decode")])
def test_lessons_2_and_3_make_their_claim_in_the_ladders_numbers(kept, lesson, phase):
    at = app_test()
    at.query_params = {"lesson": str(lesson)}
    at.run()
    at.switch_page(page("lessons")).run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert draw.phase_claim(kept, phase) in text  # the verdict is the ladder's, whatever it says
    # ... and, plainly, that the bundled model is too small to show it, with its own step's verdict
    assert re.search(rf"The bundled 4\.1M model is too small to show it: measured here, its {phase} step took "
                     r"[\d.]+ ms, \*\*(overhead-bound|memory|compute|on the)", text), text[-600:]


def test_the_latency_view_says_what_a_token_costs_at_a_real_size(kept):
    at = app_test().run()
    at.button(key="step_btn_prefill").click().run()
    at.session_state["step_view"] = "Latency"
    at.run()
    assert any(draw.per_token_claim(kept) in c.value for c in at.caption)


def test_the_race_runs_at_a_rung_with_random_weights_and_the_same_tokens():
    at = app_test(timeout=600).run()
    at.switch_page(page("race")).run()
    at.selectbox(key="race_size").set_value("26M").run()
    at.number_input(key="race_steps").set_value(6).run()
    at.select_slider(key="race_speed").set_value(4.0).run()
    at.button(key="race_start").click().run()
    assert not at.exception and not at.error
    assert any(c.value.startswith("Raced at 26M parameters (float32), " + RANDOM_WEIGHTS) for c in at.caption)
    assert any("Identical tokens" in s.value for s in at.success)  # the cache changes the time, not the tokens


def test_a_measurement_survives_clicks_on_the_pictures_and_its_result_is_shown(monkeypatch):
    """Measure, then click another picture while it runs: the page keeps saying how far it got (the measurement
    runs in a thread of its own, not in the page run the click ended), and shows the new ladder when it is done.
    The measurement here is a stand-in that waits for the test, so the click lands mid-way for certain."""
    import dataclasses
    import threading

    from engine.load.load import DEFAULT_MODEL, load_model
    from topics.ladder import store
    from ui.text import plain

    lm = load_model(DEFAULT_MODEL, device="cpu")
    key = ladder_key(lm)
    kept_before = STORE._kept.pop(key, None)
    go, asked = threading.Event(), threading.Event()
    fresh = dataclasses.replace(store.recorded_ladders()[0], device="the stand-in device of this test")

    def stand_in(lm, sizes=None, tokens=16, repeats=1, on_progress=None, **kw):
        on_progress(0.42, "112M: prefill of 128 tokens…")
        asked.set()
        assert go.wait(60)
        return fresh

    monkeypatch.setattr(store, "measure_ladder", stand_in)  # the store measures with it
    try:
        at = app_test().run()
        at.switch_page(page("scale")).run()
        at.button(key="scale_ladder_measure").click().run()
        assert asked.wait(30)
        at.segmented_control(key="scale_ladder_view").set_value("roofline").run()  # a click mid-way
        assert not at.exception
        shown = [p.proto.text for p in at.get("progress")]
        assert shown and "measuring… 42 %" in shown[0] and "112M" in shown[0], shown
        assert at.button(key="scale_ladder_measure").disabled  # one measurement at a time
        go.set()
        for _ in range(100):  # the stand-in returns; its thread stores the ladder
            if store.ladder_job(lm) is None:
                break
            threading.Event().wait(0.1)
        at.run()
        assert not at.exception and not at.get("progress")
        source = plain("measured on this server (the stand-in device of this test)")  # as the caption shows it
        assert any(source in c.value for c in at.caption), [c.value for c in at.caption]
        assert "Every rung on its machine's roofline" in figure_titles(at)  # on the picture clicked meanwhile
    finally:
        go.set()
        STORE._kept.pop(key, None)
        if kept_before is not None:
            STORE._kept[key] = kept_before


@pytest.mark.parametrize("name", ["ladder_cpu.json", "ladder_gpu.json"])
def test_every_ladder_pictures_legend_lies_in_a_margin_of_its_own_at_any_width(name):
    """The rungs' roofline once named its red, orange and diamonds nowhere a person could see (its legend hung
    above the figure), then, on a phone, over its note: a legend on the plot's top edge wraps into more rows on a
    narrow screen and rises over what is above it. Each picture's legend now stands at the figure's foot, one
    entry a row (so its rows do not depend on the screen's width), in a bottom margin that holds every row and the
    x axis above it; and the top margin holds the title and every line of the note under it."""
    from engine.paths import ASSETS
    from topics.ladder.record import Ladder

    lad = Ladder.from_dict(json.loads((ASSETS / name).read_text(encoding="utf-8")))
    for figure in (draw.roofline_figure, draw.per_token_figure, draw.split_figure):
        fig = figure(lad)
        legend, margin = fig.layout.legend, fig.layout.margin
        entries = sum(1 for t in fig.data if t.showlegend is not False and t.name)
        assert entries >= 2, figure.__name__
        assert (legend.orientation, legend.yref, legend.yanchor, legend.y) == ("v", "container", "bottom", 0), \
            (figure.__name__, legend)
        assert margin.b >= entries * 20 + 50, (figure.__name__, margin.b, entries)  # 20 px a row, the axis's 50
        lines = fig.layout.title.subtitle.text.count("<br>") + 1
        assert margin.t >= 17 + 16 * lines + 20, (figure.__name__, margin.t, lines)  # the title, 16 px a line
