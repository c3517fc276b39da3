"""The Serving page and lesson 10, driven as a person would: scenarios, ▶ ◀, Run to end, bad requests, a projector."""

from __future__ import annotations

import base64
import re

import pytest

from engine.generate.serving.scenarios import SCENARIOS
from ui.apptest import app_test, page

SCENARIO_TITLES = [s["title"] for s in SCENARIOS.values()]  # the engine's own list, in the picker's order


def serving_page():
    at = app_test().run()
    at.switch_page(page("serving")).run()
    assert not at.exception
    return at


def svgs(at, testid: str) -> list[str]:
    """The SVG text of every serving picture with this test id on the page (they are <img> data URIs)."""
    out = []
    for block in at.get("html"):
        body = str(block.proto.body)
        if f'data-testid="{testid}"' in body:
            data = re.search(r"base64,([A-Za-z0-9+/=]+)", body).group(1)
            out.append(base64.b64decode(data).decode())
    return out


@pytest.mark.parametrize("title", SCENARIO_TITLES)
def test_each_scenario_runs_to_the_end_and_draws_every_step(title):
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(title).run()
    at.button(key="serve_btn_forward").click().run()
    pool = svgs(at, "dl-pool")[0]
    assert pool.count('data-role="block-used"') > 0  # step 0 prefilled someone: blocks taken
    at.button(key="serve_btn_run").click().run()
    assert not at.exception and not at.error
    timeline = svgs(at, "dl-timeline")[0]
    assert timeline.count('data-role="cell-prefill"') >= 1 and timeline.count('data-role="cell-decode"') > 5
    done = svgs(at, "dl-pass")[0]
    assert 'data-role="queue-done"' in done
    pool = svgs(at, "dl-pool")[0]
    assert pool.count('data-role="block-free"') == pool.count("data-block=")  # everything given back at the end
    if "preemption" in title:
        assert timeline.count('data-role="cell-preempted"') > 0 and timeline.count('data-role="cell-recompute"') > 0
    table = at.dataframe[0].value
    assert list(table["status"]) == ["done"] * len(table)


def test_back_shows_an_earlier_step_and_forward_replays_it():
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIO_TITLES[1]).run()
    for _ in range(8):
        at.button(key="serve_btn_forward").click().run()
    newest = svgs(at, "dl-pass")[0]
    at.button(key="serve_btn_back").click().run()
    assert "step 6:" in svgs(at, "dl-pass")[0] and "step 7:" in newest
    shared = svgs(at, "dl-pool")[0]
    assert shared.count('data-role="block-shared"') > 0  # r1 shares the system prompt's blocks by step 6
    at.button(key="serve_btn_forward").click().run()
    assert svgs(at, "dl-pass")[0] == newest  # replayed from the record, not computed again


def test_your_own_requests_with_a_bad_arrival_get_a_message_and_the_page_keeps_working():
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value("Your own requests").run()
    at.session_state["serve_own_requests"] = None
    from engine.generate.serving import RequestSpec

    at.session_state["serve_own_requests"] = [RequestSpec("Once upon a time", 8, 5), RequestSpec("Tom", 8, 1)]
    at.button(key="serve_btn_forward").click().run()
    assert not at.exception
    assert any("forward in time" in str(e.value) for e in at.error)
    at.selectbox(key="serve_scenario").set_value(SCENARIO_TITLES[0]).run()
    at.button(key="serve_btn_forward").click().run()
    assert not at.error and svgs(at, "dl-pool")


def test_lesson_10_shows_the_pool_and_the_pass():
    at = app_test().run()
    at.switch_page(page("lessons")).run()
    titles = at.selectbox(key="lesson_pick").options
    at.selectbox(key="lesson_pick").set_value(next(t for t in titles if t.startswith("10."))).run()
    assert not at.exception
    pool, one_pass = svgs(at, "dl-pool"), svgs(at, "dl-pass")
    assert pool and one_pass and "ONE forward pass" in one_pass[0]
    assert pool[0].count('data-role="block-shared"') > 0  # the system prompt stored once by step 8


def test_the_chunked_off_row_reports_the_stall_its_own_run_shows():
    """Scenario 3, chunked prefill on vs off: the table is read off the two runs whose timelines are drawn beside it,
    so with chunking off the requests already decoding sit out the long prompt's one prefill pass, in both."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIO_TITLES[2]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    at.button(key="serve_chunk_compare").click().run()
    assert not at.exception and not at.error
    table = next(t.value for t in at.table if "decode steps sat out" in t.value.columns)  # index: chunked prefill
    assert len(svgs(at, "dl-timeline-on")) == len(svgs(at, "dl-timeline-off")) == 1
    arrives = SCENARIOS["long_prompt"]["requests"][3].arrive  # the long prompt, r3
    sat_out = {way: [(rid, int(step)) for svg in svgs(at, f"dl-timeline-{way}")
                     for rid, step in re.findall(r'data-role="cell-idle" data-request="(r[0-2])" data-step="(\d+)"', svg)
                     if int(step) >= arrives] for way in ("on", "off")}
    assert sat_out["off"], "with chunking off the decoding requests must sit out the long prompt's pass"
    assert {rid for rid, _ in sat_out["off"]} == {"r0", "r1", "r2"}
    assert int(table.loc["off", "decode steps sat out"]) == 1 == len({step for _, step in sat_out["off"]})
    assert float(table.loc["off", "longest wait between two tokens"].split()[0]) > 0
    assert int(table.loc["on", "decode steps sat out"]) == 0 and not sat_out["on"]
    said = next(c.value for c in at.caption if "With chunked prefill off" in c.value)
    step = sat_out["off"][0][1]
    assert f"r0–r2 sat out step {step} while one pass prefilled" in said


SAME = {"continuous_tokens_per_s": 492, "one_at_a_time_tokens_per_s": 130, "static_batch_tokens_per_s": 498,
        "generate_batch_tokens_per_s": 300, "requests": 8, "new_tokens": 32}
MIXED = {"continuous_tokens_per_s": 450, "one_at_a_time_tokens_per_s": 128, "static_batch_tokens_per_s": 260,
         "new_tokens": [64, 8, 16, 64, 8, 32, 16, 48]}


def test_throughput_is_a_chart_of_both_workloads_and_says_why_static_batching_can_win():
    from topics.serving.draw import throughput_figure, throughput_sentence

    f = throughput_figure(SAME, MIXED)
    assert [t.name for t in f.data] == ["same length, all at once", "mixed lengths"]
    assert len(f.data[0].y) == 4 and len(f.data[1].y) == 3  # generate_batch takes one length only
    said = throughput_sentence(SAME, MIXED)
    assert "static batch made 498 tokens/s against continuous batching's 492 (it won)" in said
    assert "static batch's best case" in said and "50% wasted" in said and "(×1.7)" in said
    assert "busy" not in said


def test_a_throughput_round_that_flips_against_the_work_is_called_noise():
    from topics.serving.draw import throughput_sentence

    noisy = {**MIXED, "static_batch_tokens_per_s": 700}  # more padded work, yet faster: the server moved
    said = throughput_sentence(SAME, noisy)
    assert "The server was busy while these ran: the static batch measured more than ×1.3 faster" in said
    assert "hid that waste" not in said  # no cause claimed that the numbers do not show


def typed(at, key: str, edits: dict):
    """Type into a data editor as the browser reports it: {edited_rows, added_rows, deleted_rows} for the widget
    (AppTest has no editing of its own); Streamlit applies the edits to the table the page gets back."""
    import json

    from streamlit.proto.WidgetStates_pb2 import WidgetState

    (editor,) = {d.proto.id: d for d in at.data_editor if d.key == key}.values()
    states = at._tree.get_widget_states()
    states.widgets.append(WidgetState(id=editor.proto.id, string_value=json.dumps(edits)))
    at._run(states)
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_your_own_requests_are_what_was_typed_into_the_table():
    from engine.generate.serving import RequestSpec

    at = serving_page()
    at.selectbox(key="serve_scenario").set_value("Your own requests").run()
    first = list(at.data_editor[0].value.itertuples(index=False))
    typed(at, "serve_own_editor", {
        "edited_rows": {"0": {"prompt": "Tom had a red ball.", "max_new_tokens": 5}, "2": {"max_new_tokens": 4}},
        "added_rows": [{"prompt": "The sun was hot.", "max_new_tokens": 3, "arrive": 6},
                       {"prompt": "   ", "max_new_tokens": 4, "arrive": 0}],  # a blank prompt: not a request
        "deleted_rows": [1]})
    assert not at.error
    kept = first[2]
    assert at.session_state["serve_own_requests"] == [
        RequestSpec("Tom had a red ball.", 5, 0), RequestSpec(kept.prompt, 4, int(kept.arrive)),
        RequestSpec("The sun was hot.", 3, 6)]
    for _ in range(20):  # ▶ step until every request is done (Run to end is issue 35's crash, fixed apart)
        at.button(key="serve_btn_forward").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        run = at.session_state["serve_run"]
        if run.done:
            break
    assert [(r.prompt, len(r.generated_ids)) for r in run.requests] == [
        ("Tom had a red ball.", 5), (kept.prompt, 4), ("The sun was hot.", 3)]


@pytest.mark.parametrize("edits, said", [
    ({"added_rows": [{"prompt": "Tom"}]}, "needs a whole number of max new tokens"),  # the other cells left blank
    ({"added_rows": [{"prompt": f"request {i}", "max_new_tokens": 2, "arrive": 0} for i in range(14)]},
     "17 requests is more than one run may serve"),
], ids=["blank cells", "too many rows"])
def test_a_table_typed_wrong_gets_a_message_and_keeps_the_last_good_requests(edits, said):
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value("Your own requests").run()
    before = at.session_state.get("serve_own_requests")
    typed(at, "serve_own_editor", edits)
    assert any(said in e.value for e in at.error), [e.value for e in at.error]
    assert at.session_state.get("serve_own_requests") == before
