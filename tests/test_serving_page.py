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
    free, cached = pool.count('data-role="block-free"'), pool.count('data-role="block-cached"')
    assert free + cached == pool.count("data-block=")  # everything given back at the end: free, or cached
    assert 'data-role="pool-key"' in pool and "cached, free to evict" in pool  # the four states named once
    if "preemption" in title:
        assert timeline.count('data-role="cell-preempted"') > 0 and timeline.count('data-role="cell-recompute"') > 0
    if "prefix cache" in title:
        assert cached > 0  # the system prompt's full blocks outlive the requests that computed them
    table = at.dataframe[0].value
    assert list(table["status"]) == ["done"] * len(table)
    said = next(m.value for m in at.markdown if m.value.startswith("**Finished**"))
    assert f"exactly the ones it gets alone ({len(table)} of {len(table)}, checked)" in said


def test_the_prefix_cache_scenario_draws_cached_blocks_and_hits_them_after_their_request_finished():
    """Scenario 5: r0 finishes, its full system-prompt blocks stay cached (grey, dashed: free to evict); r1 arrives
    later and takes them back (a prefix hit across time), so they are in use again."""
    from engine.generate.serving.record import NOT_ARRIVED

    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS["prefix_cache"]["title"]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    assert not at.exception and not at.error
    steps = at.session_state["serve_run"].records  # the controller's run (ui/controller.py: "{prefix}_run")
    arrive = SCENARIOS["prefix_cache"]["requests"][1].arrive
    between = next(s for s in steps if s.step == arrive - 1)  # r0 done, r1 not arrived: only cached blocks remain
    assert between.status("r0") == "done" and between.status("r1") == NOT_ARRIVED and between.blocks_cached > 0
    at.slider(key="serve_at").set_value(arrive - 1).run()
    pool = svgs(at, "dl-pool")[0]
    assert pool.count('data-role="block-cached"') == between.blocks_cached and 'data-role="block-used"' not in pool
    hit = next(s for s in steps if any(rid == "r1" for rid, _ in s.prefix_hits))
    at.slider(key="serve_at").set_value(hit.step).run()
    assert f"r1 shares {dict(hit.prefix_hits)['r1']} prompt tokens" in svgs(at, "dl-pass")[0]


def test_the_preemption_policy_is_a_knob_and_both_policies_give_every_request_its_own_tokens():
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS["preemption"]["title"]).run()
    assert at.session_state["serve_preemption"] == "newest"
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    assert any("preemption: newest goes" in c.value for c in at.caption)
    at.button(key="serve_policy_compare").click().run()
    assert not at.exception and not at.error
    table = next(t.value for t in at.table if "same tokens as alone" in t.value.columns)
    assert len(table) == 2 and all(v.startswith("yes") for v in table["same tokens as alone"])
    result = at.session_state["serve_measured"][1]
    assert set(result) == {"newest", "most_blocks"} and all(v["preemptions"] > 0 for v in result.values())
    for policy, v in result.items():  # the table says what the runs did
        row = table.loc[next(i for i in table.index if i.startswith(policy.replace("_", " ")))]
        assert int(row["preemptions"]) == v["preemptions"] and int(row["positions computed again"]) == v["recomputed"]
    at.segmented_control(key="serve_preemption").set_value("most_blocks").run()  # a new run, under the other policy
    assert not at.exception
    at.button(key="serve_btn_forward").click().run()
    assert any("preemption: most blocks go" in c.value for c in at.caption)  # the caption names the policy that ran


def test_run_to_end_on_a_fresh_scenario_draws_the_finished_run():
    """Run to end (E) before any ▶ step: the run starts and finishes in one press, and the page draws it finished
    (it used to fail on Streamlit refusing a change to the already drawn Autoplay switch)."""
    for title in (SCENARIO_TITLES[1], SCENARIO_TITLES[3]):
        at = serving_page()
        at.selectbox(key="serve_scenario").set_value(title).run()
        at.button(key="serve_btn_run").click().run()
        assert not at.exception and not at.error
        assert any(m.value.startswith("**Finished**") for m in at.markdown)
        requests = len(next(sc for sc in SCENARIOS.values() if sc["title"] == title)["requests"])
        assert any(f"{requests}/{requests} requests done" in m.value for m in at.markdown)
        assert at.button(key="serve_btn_run").disabled  # finished: nothing more to run
        assert 'data-role="queue-done"' in svgs(at, "dl-pass")[0]
        wasted = at.table[0].value["wasted (held, no token), averaged"]  # read as a person reads the table
        assert all(0 <= int(w.rstrip("%")) <= 100 for w in wasted), list(wasted)
        if "preemption" in title:  # exactness checked, not only said: the same tokens as a pool that fits all
            said = next(m.value for m in at.markdown if "same tokens either way" in m.value)
            assert said.endswith("same tokens either way: **yes**.")
            timeline = svgs(at, "dl-timeline")[0]
            preempted = sorted(set(re.findall(r'data-role="cell-preempted" data-request="(r\d+)"', timeline)))
            assert preempted and all(rid in said for rid in preempted[:1] + preempted[-1:])
        if "shared system prompt" in title:
            said = next(m.value for m in at.markdown if m.value.startswith("Prefix sharing"))
            served, stored = (int(x.replace(",", "")) for x in re.search(
                r"read ([\d,]+) positions' keys and values over the run's \d+ steps, from ([\d,]+) stored", said).groups())
            assert served > stored


def test_a_serving_link_opens_the_same_scenario_at_the_same_engine_step():
    """The address bar holds the scenario and the engine step on screen; a new session opening it sees the same
    screen: the same scenario picked, the same step of the same run, the same pass and pool drawn."""
    at = serving_page()
    title = SCENARIO_TITLES[1]
    at.selectbox(key="serve_scenario").set_value(title).run()
    for _ in range(6):
        at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_back").click().run()
    link = dict(at.query_params)
    assert link["scenario"] == "shared_prefix" and link["steps"] == "5" and link["at"] == "4"
    def unclocked(svg: str) -> str:  # a pass's measured time is the clock's, not the screen's
        return re.sub(r"[\d.]+ ms measured", "ms measured", svg)

    screen = (unclocked(svgs(at, "dl-pass")[0]), svgs(at, "dl-pool")[0])
    other = app_test()
    other.query_params = link
    other.run()
    other.switch_page(page("serving")).run()
    assert not other.exception and not other.error and not other.warning
    assert other.selectbox(key="serve_scenario").value == title
    assert any("step **4** of 5" in m.value for m in other.markdown)
    assert (unclocked(svgs(other, "dl-pass")[0]), svgs(other, "dl-pool")[0]) == screen
    other.button(key="serve_btn_forward").click().run()  # and it goes on from there like the original
    assert dict(other.query_params)["steps"] == "5" and "at" not in dict(other.query_params)


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
    slider = at.slider(key="lesson10_steps")
    line = next(m.value for m in at.markdown if m.value.startswith("step **"))
    assert f"step **{slider.value}** of {int(slider.max)}" in line  # the line counts the steps the slider walks
    slider.set_value(slider.max).run()
    requests = len(SCENARIOS["shared_prefix"]["requests"])
    assert f"{requests}/{requests} requests done" in next(m.value for m in at.markdown if m.value.startswith("step **"))
    timeline = svgs(at, "dl-timeline")[0]
    for r in range(requests):  # every request's row of the timeline has its passes drawn
        assert re.search(rf'data-role="cell-(prefill|decode)" data-request="r{r}"', timeline), f"r{r}'s row is empty"


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
    assert "its two bars should match: 130 and 128 tokens/s." in said  # the same work either way, said so
    assert "generate_batch has no mixed-lengths bar" in said  # a bar left out is said to be left out


def test_a_throughput_round_that_flips_against_the_work_is_called_noise():
    from topics.serving.draw import throughput_sentence

    noisy = {**MIXED, "static_batch_tokens_per_s": 700}  # more padded work, yet faster: the server moved
    said = throughput_sentence(SAME, noisy)
    assert "The server was busy while these ran: the static batch measured more than ×1.3 faster" in said
    assert "hid that waste" not in said  # no cause claimed that the numbers do not show
    apart = throughput_sentence(SAME, {**MIXED, "one_at_a_time_tokens_per_s": 65})  # the same work, half the rate
    assert "130 and 65 tokens/s, ×2.0 apart: the server was busy" in apart


# ---------------------------------------------------------------- batch size on the roofline


def _measured_rows(lm, sizes=(1, 2, 4, 8, 16), context=68, ms=(3.0, 3.5, 4.5, 6.0, 9.0)):
    """A small fixture record of step_time_vs_batch: its intensities from estimates.batched_decode, its times given."""
    from engine.forward.estimates import batched_decode

    rows = []
    for b, t in zip(sizes, ms):
        w = batched_decode(lm.spec, b, context, lm.elem_bytes)
        rows.append({"batch": b, "decode_ms": t, "over_batch_1": t / ms[0], "per_sequence_ms": t / b,
                     "spread": [t, t], "context": context, "flops": w["flops"], "bytes": w["bytes"],
                     "intensity": w["intensity"], "achieved": w["flops"] / (t / 1e3)})
    return rows


def test_the_batch_roofline_places_each_measured_pass_and_a_gpus_prediction_labelled_so(bundled_lm):
    """Each measured pass of B sequences at its batched_decode intensity and FLOPs / measured time on this device's
    roof; beside it an H100's predicted passes (bf16) for the same model and for Llama-3-8B, with the batch where each
    reaches the ridge; the sentence's numbers are the record's."""
    from engine.forward.estimates import saturating_batch
    from engine.measure import kvcalc, roofline
    from topics.serving.draw import batch_roofline_figure, batch_roofline_sentence
    from topics.serving.measure import batch_roofline

    rows = _measured_rows(bundled_lm)
    here = roofline.DeviceRoof("cpu (measured here, float32 matmul)", 1.6e11, 2.8e10, True)
    h100 = roofline.h100()
    br = batch_roofline(rows, bundled_lm, here, h100)
    fig = batch_roofline_figure(br)
    by = {t.name: t for t in fig.data}
    measured = by["measured here (fp32)"]
    assert list(measured.x) == pytest.approx([r["intensity"] for r in rows])
    assert list(measured.y) == pytest.approx([r["flops"] / (r["decode_ms"] / 1e3) for r in rows])
    ours = by["tinystories-llama, H100 predicted"]
    assert list(ours.x) == pytest.approx([p["intensity"] for p in roofline.batch_roofline(bundled_lm.spec, 68, h100)])
    assert ours.marker.symbol == "circle-open"  # a prediction is drawn open, on a dashed roof
    assert by["NVIDIA H100 SXM's roof (datasheet)"].line.dash == "dash"
    real = by["Llama-3-8B, H100 predicted"]
    assert real.x[0] == pytest.approx(1.0, rel=0.05) and real.x[5] == pytest.approx(32, rel=0.05)  # about B FLOP/byte
    said = batch_roofline_sentence(br)
    first, last = rows[0], rows[-1]
    assert (f"from {first['intensity']:.1f} at B = 1 to {last['intensity']:.1f} at B = 16 (fp32, estimates)"
            in said)
    assert f"this device's ridge of {here.ridge:.1f}" in said
    assert f"(×{last['achieved'] / first['achieved']:.1f} for ×16 the work)" in said
    sat_here = saturating_batch(bundled_lm.spec, 68, 4.0, here.ridge)
    assert f"ridge is reached at B ≈ {sat_here}" in said
    sat_real = saturating_batch(kvcalc.from_table("Llama-3-8B"), 68, 2.0, h100.ridge)
    assert f"Llama-3-8B reaches it at B ≈ {sat_real}" in said and 300 < sat_real < 400
    assert "predicted" in said.lower() and "nothing ran there" in said


def test_the_serving_page_draws_the_measured_batch_passes_on_the_roofline():
    at = serving_page()
    at.button(key="serve_btn_forward").click().run()  # the measurements sit under a started run
    at.button(key="serve_batch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    charts = [str(c.proto.spec) for c in at.get("plotly_chart")]
    assert any("Batch size on the roofline: here, and H100 (bf16) predicted" in c for c in charts)
    said = next(m.value for m in at.markdown if "Each filled point is one decode pass" in m.value)
    rows = at.session_state["serve_measured"][1]
    assert f"at B = {rows[-1]['batch']}" in said.replace("\\", "")


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
