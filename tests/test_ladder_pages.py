"""The size ladder in the app: the Scale page opens on it, a link opens its picture, the lessons and the Latency
view quote its numbers, and the race runs at a rung with random weights."""

from __future__ import annotations

import json

import pytest

from engine.load.rungs import RANDOM_WEIGHTS
from topics.ladder import draw as draw
from topics.ladder.measure import STORE, ladder_key, measure_ladder
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


@pytest.mark.parametrize("view, title", [("roofline", "Every rung on this device's roofline"),
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
    assert draw.bundled_sentence(kept) in text


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
