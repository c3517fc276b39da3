"""Links: every field a link carries comes back from making and reading a link at its zero, its default and its
extreme values (seed 0, top-k 0, temperature 0, step 0, layer 0, head 0, an empty stop list, ...), through a real
address (encoded, then parsed as a browser's request is); and the page's own link, opened, shows the same run at
those values. A dropped zero is a link that opens someone else's settings.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from drawing.views import VIEWS
from engine.generate.serving.run import BATCHING, PREEMPTION
from topics.serving.scenarios import SCENARIOS
from ui.link_codec import FIELDS, LADDER_VIEWS, MAX_PROMPT_CHARS, make_link, read_link

# field -> its zero (or lowest), the sidebar's default, its extreme (highest), and one more where it has one
VALUES = {
    "model": ["tinystories-llama", "tinystories-gpt2", "/data/" + "m" * 294],
    "prompt": ["", "Once upon a time", "x" * MAX_PROMPT_CHARS, "a&b=c#d %20?\n\"é"],
    "rule": ["greedy", "sample"],
    "temperature": [0.0, 0.8, 2.0, 0.05],
    "top_k": [0, 50, 1_000_000],
    "top_p": [0.01, 1.0, 0.95],
    "repetition_penalty": [0.5, 1.0, 2.0],
    "seed": [0, 7, 2**31 - 1],
    "max_new_tokens": [1, 40, 512],
    "stop": ["", ".", ".,!"],
    "cache": ["on", "off"],
    "steps": [0, 1, 512],
    "at": [0, 3, 512],
    "presenter": ["on", "off"],
    "lesson": [1, 11, 99],
    "ladder": list(LADDER_VIEWS),
    "curves": ["side_by_side"],
    "view": list(VIEWS),
    "layer": [0, 2, 1023],
    "head": [0, 5, 1023],
    "scenario": list(SCENARIOS),
    "preemption": list(PREEMPTION),
    "batching": list(BATCHING),
    "policy": ["full", "heavy", "snap-capped"],
    "budget": [1, 64, 4096],
    "drafter": ["draft", "lookup3", "lookup2"],
    "k": [1, 4, 8],
    "tokens": [2, 200, 2048],
    "size": ["26M", "110M"],
}


def through_an_address(link: dict[str, str]) -> dict[str, str]:
    """The link as a browser sends it and a server reads it: encoded into a URL, then parsed (blank values kept)."""
    query = urlsplit("http://lab.example.edu/step_through?" + urlencode(link)).query
    return {k: v[0] if len(v) == 1 else v for k, v in parse_qs(query, keep_blank_values=True).items()}


def test_every_link_field_has_its_values_here():
    assert set(VALUES) == set(FIELDS)  # a new field is round-tripped here too


@pytest.mark.parametrize("name, value", [(n, v) for n, vs in VALUES.items() for v in vs],
                         ids=[f"{n}={str(v)[:12]!r}" for n, vs in VALUES.items() for v in vs])
def test_each_field_comes_back_from_a_link_at_its_zero_default_and_extreme_values(name, value):
    link = make_link({name: value})
    assert name in link, f"{name}={value!r} was left out of the link"  # a zero is a value, not an absence
    values, problems = read_link(through_an_address(link))
    assert problems == [] and values == {name: value} and type(values[name]) is type(value)


@pytest.mark.parametrize("which", [0, -1], ids=["every zero", "every extreme"])
def test_a_link_with_every_field_at_once_comes_back_whole(which):
    settings = {name: vs[which] for name, vs in VALUES.items()}
    values, problems = read_link(through_an_address(make_link(settings)))
    assert problems == [] and values == settings


def test_only_none_is_left_out_and_nothing_unknown_goes_in():
    assert make_link({"seed": None, "layer": None, "stop": ""}) == {"stop": ""}
    assert make_link({"nonsense": 1, "seed": 0}) == {"seed": "0"}


# ---------------------------------------------------------------- the page's own link, opened (AppTest)


def sidebar_values(at) -> dict:
    """What the sidebar shows: each setting's widget value."""
    sb = at.sidebar
    return {"rule": sb.radio(key="side_mode").value, "temperature": sb.slider(key="side_temperature").value,
            "top_k": sb.number_input(key="side_top_k").value, "top_p": sb.slider(key="side_top_p").value,
            "repetition_penalty": sb.slider(key="side_rep").value, "seed": sb.number_input(key="side_seed").value,
            "max_new_tokens": sb.number_input(key="side_max_new").value,
            "stop": sb.text_input(key="side_stops").value}


@pytest.mark.parametrize("chosen, layer, head", [
    ({"rule": "sample", "temperature": 0.0, "top_k": 0, "top_p": 0.01, "repetition_penalty": 0.5, "seed": 0,
      "max_new_tokens": 1, "stop": ""}, 0, 0),
    ({"rule": "sample", "temperature": 2.0, "top_k": 4096, "top_p": 1.0, "repetition_penalty": 2.0,
      "seed": 2**31 - 1, "max_new_tokens": 512, "stop": ".,!"}, 3, 7),
], ids=["every zero", "every extreme"])
def test_the_pages_link_opened_elsewhere_shows_the_same_settings_step_layer_and_head(chosen, layer, head):
    """Set in the sidebar, prefilled, the layer and head picked: the address bar's link, opened in another browser
    whose sidebar was left elsewhere (temperature 0.8, max new tokens 40: the defaults), shows the same."""
    from ui.apptest import app_test

    at = app_test()
    for key, name in (("side_mode", "rule"), ("side_temperature", "temperature"), ("side_top_k", "top_k"),
                      ("side_top_p", "top_p"), ("side_rep", "repetition_penalty"), ("side_seed", "seed"),
                      ("side_max_new", "max_new_tokens"), ("side_stops", "stop")):
        at.session_state[key] = chosen[name]
    at.run()
    at.button(key="step_btn_prefill").click().run()
    at.session_state["step_layer"], at.session_state["step_head"] = layer, head
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert sidebar_values(at) == chosen
    link = dict(at.query_params)
    opened = app_test()
    opened.query_params = link
    opened.run()
    assert not opened.exception and not opened.error, [e.value for e in opened.error]
    assert sidebar_values(opened) == chosen
    assert (opened.segmented_control(key="step_layer").value, opened.session_state["step_head"]) == (layer, head)
    said = next(m.value for m in opened.markdown if "from decode steps" in m.value)
    assert "step **0** of 0" in said  # the prefill, the link's step 0
