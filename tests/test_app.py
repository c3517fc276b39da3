"""The pages, driven like a user would with streamlit's AppTest, on the bundled model."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.appdriver import ROOT, app_test, page



def fresh_app() -> AppTest:
    at = app_test().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def status(at: AppTest) -> str:
    return next(m.value for m in at.markdown if "from Next token" in m.value)


def new_tokens(at: AppTest) -> int:
    return int(re.search(r"\*\*(\d+) new tokens?\*\*", status(at)).group(1))


def kv_bytes(at: AppTest) -> int:
    return int(re.search(r"KV cache \*\*([\d,]+) bytes", status(at)).group(1).replace(",", ""))


def frame_with(at: AppTest, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def open_view(at: AppTest, name: str) -> AppTest:
    """Open one of the step-through tabs (they are lazy: only the open one is built)."""
    at.session_state["step_view"] = name
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_every_page_renders_with_the_bundled_model():
    at = fresh_app()
    assert at.button(key="step_btn_prefill").disabled is False
    assert at.button(key="step_btn_next").disabled is True  # before prefill only Prefill is enabled
    at.switch_page(page("model_info")).run()
    assert not at.exception
    assert any("tinystories-llama" in str(t.value) for t in at.table)


def test_prefill_then_five_next_tokens():
    at = open_view(click(fresh_app(), "step_btn_prefill"), "Shapes")
    d_model = int(frame_with(at, "tensor").set_index("tensor").loc["hidden states (each layer)", "shape"]
                  .strip("[]").split(", ")[2])
    shapes = frame_with(at, "tensor").set_index("tensor")["shape"]
    s = int(shapes["input_ids"].strip("[]").split(", ")[1])
    assert shapes["hidden states (each layer)"] == f"[1, {s}, {d_model}]"
    before = new_tokens(at)
    sizes = [kv_bytes(at)]
    for _ in range(5):
        click(at, "step_btn_next")
        sizes.append(kv_bytes(at))
    assert new_tokens(at) - before == 5
    assert "(5 from Next token)" in status(at)
    assert all(b > a for a, b in zip(sizes, sizes[1:]))  # the cache grows every step
    shapes = frame_with(at, "tensor").set_index("tensor")["shape"]
    assert shapes["hidden states (each layer)"] == f"[1, 1, {d_model}]"
    assert [b.proto.label for b in at.get("download_button")] == ["Trace as JSON", "Steps as CSV"]


def test_cache_off_holds_zero_bytes_and_toggling_resets_the_run():
    at = click(fresh_app(), "step_btn_prefill")
    click(at, "step_btn_next")
    at.sidebar.toggle(key="side_cache").set_value(False).run()
    assert at.button(key="step_btn_prefill").disabled is False  # the run was reset
    assert not any("from Next token" in m.value for m in at.markdown)
    click(at, "step_btn_prefill")
    for _ in range(3):
        click(at, "step_btn_next")
        assert kv_bytes(at) == 0
    open_view(at, "KV cache")
    assert any("cache is off" in w.value for w in at.warning)


def test_seed_changes_sampled_tokens_and_restoring_it_restores_them():
    def generate(at, seed):
        at.sidebar.number_input(key="side_seed").set_value(seed).run()
        click(at, "step_btn_prefill")
        for _ in range(6):
            click(at, "step_btn_next")
        return at.text[0].value

    at = fresh_app()
    at.sidebar.radio(key="side_mode").set_value("sample").run()
    at.sidebar.slider(key="side_temperature").set_value(1.2).run()
    first = generate(at, 1)
    other = generate(at, 2)
    again = generate(at, 1)
    assert first == again
    assert first != other


def test_bad_prompt_shows_a_clear_message_and_the_app_keeps_working():
    at = fresh_app()
    at.text_area(key="step_prompt").set_value("   ").run()
    at.button(key="step_btn_prefill").click().run()
    assert not at.exception
    assert any("empty" in e.value for e in at.error)
    at.text_area(key="step_prompt").set_value("Once upon a time").run()
    click(at, "step_btn_prefill")
    assert new_tokens(at) == 1


@pytest.mark.parametrize("view", ["assembled matrix", "this step", "all heads"])
def test_attention_views_render(view):
    at = click(fresh_app(), "step_btn_prefill")
    click(at, "step_btn_next")
    open_view(at, "Attention")
    at.radio(key="step_att_view").set_value(view).run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 1  # the chosen view's figure, and only it


SCENARIOS = json.loads((ROOT / "assets" / "scenarios.json").read_text())
PROMPTS = json.loads((ROOT / "assets" / "prompts.json").read_text())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["title"][:24] for s in SCENARIOS])
def test_each_scenario_loads_in_one_click_and_replays_its_steps(scenario):
    at = fresh_app()
    at.selectbox(key="step_scenario").set_value(scenario["title"]).run()
    assert not at.exception and not at.error and not at.warning, [e.value for e in at.exception]
    link = scenario["link"]
    assert at.sidebar.selectbox(key="side_model").value == link["model"]
    assert at.sidebar.toggle(key="side_cache").value == (link["cache"] == "on")
    assert at.text_area(key="step_prompt").value == link["prompt"]
    preset = at.selectbox(key="step_preset").value  # names the preset, or none for a prompt of its own
    assert preset is None or next(p["prompt"] for p in PROMPTS if p["title"] == preset) == link["prompt"]
    if "stop" in link:  # the run ends at the stop string, before all its steps
        assert "stopped: **stop_string**" in status(at)
    else:
        assert new_tokens(at) == int(link["steps"]) + 1
    if link["cache"] == "off":
        assert kv_bytes(at) == 0


def test_presenter_mode_from_a_link_enlarges_text_and_stays_in_the_link():
    at = app_test()
    at.query_params = {"presenter": "on"}
    at.run()
    assert not at.exception
    assert at.sidebar.toggle(key="side_presenter").value is True
    assert any("font-size: 22px" in m.value for m in at.markdown)
    assert at.query_params.get("presenter") == "on"
    at.sidebar.toggle(key="side_presenter").set_value(False).run()
    assert not any("font-size: 22px" in m.value for m in at.markdown)
    assert "presenter" not in at.query_params
