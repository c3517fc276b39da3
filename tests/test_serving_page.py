"""The Serving page and lesson 10, driven as a person would: scenarios, ▶ ◀, Run to end, bad requests, a projector."""

from __future__ import annotations

import base64
import html
import re

import pytest

from topics.serving.scenarios import SCENARIOS
from ui.apptest import app_test, page
from ui.text import plain

SCENARIO_TITLES = [s["title"] for s in SCENARIOS.values()]  # the topic's own list, in the picker's order


def serving_page():
    at = app_test().run()
    at.switch_page(page("serving")).run()
    assert not at.exception
    return at


def more_widget(at, name: str):
    """More's widget for a sizing knob or the switch (`custom_sizing`): its key carries the times code set it."""
    return next(w for w in [*at.toggle, *at.number_input] if w.key.startswith(f"serve_{name}."))


def svgs(at, testid: str) -> list[str]:
    """The SVG text of every serving picture with this test id on the page (they are <img> data URIs)."""
    out = []
    for block in at.get("html"):
        body = str(block.proto.body)
        if f'data-testid="{testid}"' in body:
            data = re.search(r"base64,([A-Za-z0-9+/=]+)", body).group(1)
            out.append(base64.b64decode(data).decode())
    return out


# Every scenario runs to the end in the slow tier; in the fast one the first does, and the tests below that run
# scenarios 2 to 5 to the end (Run to end on a fresh scenario, the prefix cache, the steps sat out, the preemption
# policy) check the same finished page with `drawn_to_the_end`.
@pytest.mark.parametrize("title", [SCENARIO_TITLES[0]] + [pytest.param(t, marks=pytest.mark.slow)
                                                          for t in SCENARIO_TITLES[1:]])
def test_each_scenario_runs_to_the_end_and_draws_every_step(title):
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(title).run()
    at.button(key="serve_btn_forward").click().run()
    pool = svgs(at, "dl-pool")[0]
    assert pool.count('data-role="block-used"') > 0  # step 0 prefilled someone: blocks taken
    at.button(key="serve_btn_run").click().run()
    drawn_to_the_end(at, title)


def test_the_latency_table_mid_run_reaches_the_browser_without_arrows_fixes():
    """Mid-run the table says "–" where a request has no first token yet; each such column is sent as text, so
    Streamlit never has to repair it (a traceback per rerun in the server's log, on every click)."""
    import logging

    said = []
    catch = logging.Handler()
    catch.emit = lambda record: said.append(record.getMessage())
    log = logging.getLogger("streamlit.dataframe_util")  # Streamlit's own loggers do not propagate to pytest's
    log.addHandler(catch)
    try:
        at = serving_page()
        at.button(key="serve_btn_forward").click().run()
    finally:
        log.removeHandler(catch)
    table = at.dataframe[0].value
    assert "–" in set(map(str, table["TTFT ms"]))  # someone still waiting: the case that needed the repair
    assert not [m for m in said if "Arrow" in m], said


def drawn_to_the_end(at, title: str) -> None:
    """A scenario run to the end, as the page draws it: every step on the timeline, the queue done, every block
    given back (free, or cached), every request done with exactly the tokens it gets alone."""
    assert not at.exception and not at.error
    timeline = svgs(at, "dl-timeline")[0]
    assert timeline.count('data-role="cell-prefill"') >= 1 and timeline.count('data-role="cell-decode"') > 5
    last = at.slider(key="serve_at").max  # the run's last engine step is labelled under the timeline, never cut
    assert max(int(k) for k in re.findall(r">(\d+)</text>", timeline)) == last, last
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
    drawn_to_the_end(at, SCENARIOS["prefix_cache"]["title"])
    steps = at.session_state["serve_run"].records  # the controller's run (ui/controller.py: "{prefix}_run")
    arrive = SCENARIOS["prefix_cache"]["requests"][1].arrive
    between = next(s for s in steps if s.step == arrive - 1)  # r0 done, r1 not arrived: only cached blocks remain
    assert between.status("r0") == "done" and between.status("r1") == NOT_ARRIVED and between.blocks_cached > 0
    at.slider(key="serve_at").set_value(arrive - 1).run()
    pool = svgs(at, "dl-pool")[0]
    assert pool.count('data-role="block-cached"') == between.blocks_cached and 'data-role="block-used"' not in pool
    hit = next(s for s in steps if any(rid == "r1" for rid, _ in s.prefix_hits))
    at.slider(key="serve_at").set_value(hit.step).run()
    assert f"r1 finds {dict(hit.prefix_hits)['r1']} positions' blocks cached" in html.unescape(svgs(at, "dl-pass")[0])


@pytest.mark.slow  # two whole served runs and their reference tokens: ~2 s
def test_the_preemption_policy_is_a_knob_and_both_policies_give_every_request_its_own_tokens():
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS["preemption"]["title"]).run()
    assert at.session_state["serve_preemption"] == "newest"
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    drawn_to_the_end(at, SCENARIOS["preemption"]["title"])
    preempted_runs_match_a_roomy_pool(at)
    assert any("preemption: newest goes" in c.value for c in at.caption)
    at.button(key="serve_policy_compare").click().run()
    assert not at.exception and not at.error
    table = next(t.value for t in at.table if "same tokens as alone" in t.value.columns)
    assert len(table) == 2 and all(v.startswith("yes") for v in table["same tokens as alone"])
    result = at.session_state["serve_measured"]["policies"]
    assert [v.policy for v in result] == ["newest", "most_blocks"] and all(v.preemptions > 0 for v in result)
    for v in result:  # the table says what the runs did
        row = table.loc[next(i for i in table.index if i.startswith(v.policy.replace("_", " ")))]
        assert int(row["preemptions"]) == v.preemptions and int(row["positions computed again"]) == v.recomputed
    at.segmented_control(key="serve_preemption").set_value("most_blocks").run()  # a new run, under the other policy
    assert not at.exception
    at.button(key="serve_btn_forward").click().run()
    assert any("preemption: most blocks go" in c.value for c in at.caption)  # the caption names the policy that ran


# Scenario 4 (preemption) run to the end is also the preemption knob's first half above, which checks its roomy
# pool's "same tokens either way" with `preempted_runs_match_a_roomy_pool`; here it is slow.
@pytest.mark.parametrize("title", [SCENARIO_TITLES[1], pytest.param(SCENARIO_TITLES[3], marks=pytest.mark.slow)])
def test_run_to_end_on_a_fresh_scenario_draws_the_finished_run(title):
    """Run to end (E) before any ▶ step: the run starts and finishes in one press, and the page draws it finished
    (it used to fail on Streamlit refusing a change to the already drawn Autoplay switch)."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(title).run()
    at.button(key="serve_btn_run").click().run()
    drawn_to_the_end(at, title)
    assert any(m.value.startswith("**Finished**") for m in at.markdown)
    requests = len(next(sc for sc in SCENARIOS.values() if sc["title"] == title)["requests"])
    assert any(f"{requests}/{requests} requests done" in m.value for m in at.markdown)
    assert at.button(key="serve_btn_run").disabled  # finished: nothing more to run
    assert 'data-role="queue-done"' in svgs(at, "dl-pass")[0]
    wasted = at.table[0].value["wasted (held, no token), averaged"]  # read as a person reads the table
    assert all(0 <= int(w.rstrip("%")) <= 100 for w in wasted), list(wasted)
    if "preemption" in title:
        preempted_runs_match_a_roomy_pool(at)
    if "shared system prompt" in title:
        said = next(m.value for m in at.markdown if m.value.startswith("Prefix sharing"))
        served, stored = (int(x.replace(",", "")) for x in re.search(
            r"read ([\d,]+) positions' keys and values over the run's \d+ steps, from ([\d,]+) stored", said).groups())
        assert served > stored


def in_order(node) -> list:
    """Every element on the page, in the order a reader meets them."""
    children = getattr(node, "children", None)
    if children is None:
        return [node]
    return [e for key in sorted(children) for e in in_order(children[key])]


def test_the_heading_over_the_memory_table_does_not_call_computed_rows_measured():
    """The table's rows are the blocks this run took and two allocators computed for the same requests: the heading
    over it says so; "Measured on this machine" heads the buttons that measure, after it."""
    at = serving_page()
    at.button(key="serve_btn_forward").click().run()
    page = in_order(at.main)
    table = next(i for i, e in enumerate(page) if e.type == "table" and "source" in e.value.columns)
    heading = max(i for i, e in enumerate(page[:table]) if e.type == "subheader")
    assert "Measured" not in page[heading].value and "KV memory" in page[heading].value
    assert "computed for the same requests" in set(page[table].value["source"])
    measured = next(i for i, e in enumerate(page) if e.type == "subheader" and e.value.startswith("Measured on this"))
    assert measured > table and any(e.type == "button" and e.key == "serve_tp" for e in page[measured:])


def preempted_runs_match_a_roomy_pool(at) -> None:
    """Exactness checked, not only said: the finished preemption run's tokens are a pool that fits all's, and the
    sentence names the requests preempted, first and last."""
    said = next(m.value for m in at.markdown if "same tokens either way" in m.value)
    assert said.endswith("same tokens either way: **yes**.")
    timeline = svgs(at, "dl-timeline")[0]
    preempted = sorted(set(re.findall(r'data-role="cell-preempted" data-request="(r\d+)"', timeline)))
    assert preempted and all(rid in said for rid in preempted[:1] + preempted[-1:])


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
    assert any("step **4** of 0–5" in m.value for m in other.markdown)
    assert (unclocked(svgs(other, "dl-pass")[0]), svgs(other, "dl-pool")[0]) == screen
    other.button(key="serve_btn_forward").click().run()  # and it goes on from there like the original
    assert dict(other.query_params)["steps"] == "5" and "at" not in dict(other.query_params)


def test_a_serving_link_to_no_scenario_is_refused_on_the_serving_page_in_one_line():
    """The link's scenario is checked by the page that owns the scenarios: one warning, the first scenario shown."""
    other = app_test()
    other.query_params = {"scenario": "nonsense", "steps": "3"}
    other.run()
    other.switch_page(page("serving")).run()
    assert not other.exception
    said = "link parameter scenario='nonsense' ignored: no such serving scenario"
    assert [w.value for w in other.warning] == [plain(said)]  # shown inert, as every link value is
    assert other.selectbox(key="serve_scenario").value == SCENARIO_TITLES[0]


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
    assert f"step **{slider.value}** of 0–{int(slider.max)}" in line  # the steps the slider walks, from 0
    slider.set_value(slider.max).run()
    requests = len(SCENARIOS["shared_prefix"]["requests"])
    assert f"{requests}/{requests} requests done" in next(m.value for m in at.markdown if m.value.startswith("step **"))
    timeline = svgs(at, "dl-timeline")[0]
    for r in range(requests):  # every request's row of the timeline has its passes drawn
        assert re.search(rf'data-role="cell-(prefill|decode)" data-request="r{r}"', timeline), f"r{r}'s row is empty"


def drawn_idle(svg: str, pattern: str = "cell-idle") -> dict[int, set[str]]:
    """Step -> the requests drawn sitting it out (dashed) on a timeline picture."""
    out: dict[int, set[str]] = {}
    for rid, step in re.findall(rf'data-role="{pattern}" data-request="(r\d+)" data-step="(\d+)"', svg):
        out.setdefault(int(step), set()).add(rid)
    return out


def test_the_steps_sat_out_are_counted_drawn_and_written_from_the_same_records():
    """Scenario 3, chunked prefill on vs off (issue 42): the table said 'sat out: 1' and the text 'step 6' while the
    'off' timeline also showed r0 and r1 sitting out step 1. Now the table's count, the steps it lists and the
    sentence's steps are exactly the steps drawn dashed on each way's own timeline."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIO_TITLES[2]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    drawn_to_the_end(at, SCENARIO_TITLES[2])
    at.button(key="serve_chunk_compare").click().run()
    assert not at.exception and not at.error
    table = next(t.value for t in at.table if "steps sat out" in t.value.columns)  # index: chunked prefill
    said = next(c.value for c in at.caption if "With chunked prefill off" in c.value)
    arrives = SCENARIOS["long_prompt"]["requests"][3].arrive  # the long prompt, r3
    for way in ("on", "off"):
        (svg,) = svgs(at, f"dl-timeline-{way}")
        drawn = drawn_idle(svg)
        assert int(table.loc[way, "steps sat out"]) == len(drawn), (way, drawn)
        listed = dict(re.findall(r"(\d+) \(([^)]*)\)", table.loc[way, "which (who sat out)"]))
        assert sorted(map(int, listed)) == sorted(drawn), (way, listed, drawn)
        for step, who in drawn.items():
            first, last = sorted(who, key=lambda r: int(r[1:]))[0], sorted(who, key=lambda r: int(r[1:]))[-1]
            assert first in listed[str(step)] and last in listed[str(step)], (way, step, who)
            if way == "off":
                assert f"step {step} (" in said
    off = drawn_idle(svgs(at, "dl-timeline-off")[0])
    assert any(step >= arrives for step in off) and {"r0", "r1", "r2"} <= off[max(off)]  # the long prompt's stall
    assert f"sat out {len(off)} step{'s' if len(off) != 1 else ''}" in said
    assert not drawn_idle(svgs(at, "dl-timeline-on")[0]) and "With it on, they sat out no steps" in said
    # both drawn to one scale (they were 0-40 and 0-41 apart): a step's cell has the same x and width in each
    at_step = r'data-request="r0" data-step="(\d+)" (x="[\d.]+" width="[\d.]+")'
    cells = [dict(re.findall(at_step, svgs(at, f"dl-timeline-{way}")[0])) for way in ("on", "off")]
    assert cells[0]["0"] == cells[1]["0"] and cells[0]["1"] == cells[1]["1"], cells


def test_the_prefix_sharing_sentence_counts_the_tokens_the_status_line_says_were_skipped(bundled_lm):
    """Scenario 5 (issue 42): the status line said 'prompt tokens skipped by sharing: 80' and the sentence under the
    memory table 'Prefix sharing saved nothing here'. Both now say the same count: the system prompt's whole blocks,
    skipped by each request after the first (counted here from the prompts' own token ids)."""
    at = serving_page()
    sc = SCENARIOS["prefix_cache"]
    at.selectbox(key="serve_scenario").set_value(sc["title"]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    assert not at.exception and not at.error
    ids = [bundled_lm.tokenizer(r.prompt)["input_ids"] for r in sc["requests"]]
    common = next(i for i in range(min(map(len, ids))) if len({tuple(x[: i + 1]) for x in ids}) > 1)
    page_size = sc["sizing"]["page_size"]
    expected = (len(ids) - 1) * (common // page_size * page_size)

    def both() -> tuple[int, str]:
        line = next(m.value for m in at.markdown if m.value.startswith("step **"))
        said = next(m.value for m in at.markdown if m.value.startswith("Prefix sharing"))
        return int(re.search(r"skipped by sharing: \*\*(\d+)\*\*", line).group(1)), said

    skipped, said = both()
    assert skipped == expected > 0
    assert f"{expected} positions were not computed when their request was admitted" in said
    assert "saved nothing" not in said
    # its ratio follows from the figures beside it: served over the positions held in whole blocks, both printed
    shared = re.search(r"read ([\d,]+) positions' keys and values .* from [\d,]+ stored \(each once\) in ([\d,]+) "
                       r"positions of whole blocks, so ([\d.]+) positions served per position held", said)
    alone = re.search(r"([\d,]+) positions served from ([\d,]+) held in whole blocks, ([\d.]+) per position held",
                      said)
    served, held, ratio = (shared or alone).groups()
    assert f"{int(served.replace(',', '')) / int(held.replace(',', '')):.2f}" == ratio
    at.slider(key="serve_at").set_value(sc["requests"][1].arrive - 1).run()  # before the first hit: none yet
    skipped, said = both()
    assert skipped == 0 and "no position was skipped" in said


def test_the_status_line_counts_its_steps_from_0_as_the_sentences_under_it_count_them():
    """Scenario 2 at its end: "step 28 of 28" in the status line, "over the run's 29 steps" under it. The status
    line says its steps run from 0, so the two agree."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS["shared_prefix"]["title"]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    line = next(m.value for m in at.markdown if m.value.startswith("step **"))
    last = int(re.search(r"of 0–(\d+) ·", line).group(1))
    steps = re.search(r"over the run's (\d+) steps", " ".join(m.value for m in at.markdown))
    assert steps and int(steps.group(1)) == last + 1 == len(at.session_state["serve_run"].records)


def test_the_status_lines_skipped_tokens_are_the_requests_prefix_hits_added_up():
    """Scenario 4 (a pool too small): its status line said 32 prompt tokens were skipped by sharing while every
    request's "prefix hits" in the table above it said 0; the hits were a preempted request finding its own blocks
    still cached. Each count is now the sum of the other, at the end and at every step scrubbed back to."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS["preemption"]["title"]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    assert not at.exception and not at.error
    run = at.session_state["serve_run"]
    assert run.preemptions > 0  # the scenario does what it says

    def both() -> tuple[int, int]:
        line = next(m.value for m in at.markdown if m.value.startswith("step **"))
        table = next(d.value for d in at.dataframe if "prefix hits" in d.value.columns)
        return int(re.search(r"skipped by sharing: \*\*(\d+)\*\*", line).group(1)), int(table["prefix hits"].sum())

    line, table = both()
    assert line == table > 0
    at.slider(key="serve_at").set_value(len(run.records) // 2).run()
    assert both()[0] <= line


def test_a_preempted_requests_cached_positions_are_never_called_prompt_tokens():
    """Scenario 4: "prompt tokens skipped by sharing: 32" and "r3 shares 32 prompt tokens' blocks" for a request
    whose prompt is 8 tokens: the 32 were its prompt and its generated positions, found still cached when it came
    back from a preemption. The status line, the sentence and the pass picture now count positions."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS["preemption"]["title"]).run()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_btn_run").click().run()
    run = at.session_state["serve_run"]
    table = next(d.value for d in at.dataframe if "prefix hits" in d.value.columns)
    back = table[table["prefix hits"] > table["prompt tokens"]]
    assert len(back), table  # a hit longer than its request's own prompt: positions it generated, not prompt tokens
    line = next(m.value for m in at.markdown if m.value.startswith("step **"))
    assert "positions skipped by sharing" in line and "prompt tokens" not in line
    step = next(s.step for s in run.records if s.prefix_hits)
    at.slider(key="serve_at").set_value(step).run()
    pictures = [base64.b64decode(u).decode() for h in at.get("html")
                for u in re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", str(h.proto.body))]
    said = html.unescape(" ".join(m.value for m in at.markdown) + " ".join(pictures))
    assert "prompt tokens' blocks" not in said and "positions' blocks cached" in said


def slots_by_hand(records, slots: int) -> tuple[int, int]:
    """(rows computing padding, empty slots while a request waited), counted from each step's rows and statuses."""
    padding = empty = 0
    for s in records:
        in_pool = {r.id for r in s.rows} | {rid for rid, st in s.statuses if st == "running"}
        padding += sum(r.phase == "padding" for r in s.rows)
        if any(st in ("waiting", "preempted") for _, st in s.statuses):
            empty += slots - len(in_pool)
    return padding, empty


def test_every_requests_name_reads_on_white_in_the_timeline_and_the_pool(family_model):
    """r6's pale cyan and r5's pale yellow names faded on a phone (contrast 1.5:1 and 1.8:1 on white). Each name
    drawn in a picture is its request's colour darkened to at least WCAG's 4.5:1, worked out here from the formula."""
    from engine.generate.serving import RequestSpec, ServingRun
    from topics.serving.draw import pool_svg, timeline_svg

    def contrast(colour: str) -> float:
        channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)

    specs = [RequestSpec("Once upon a time", 2, i) for i in range(12)]
    run = ServingRun(family_model("llama"), specs, page_size=4, num_blocks=64, stop_on_eos=False)
    run.run()
    ids = [r.id for r in run.requests]
    mid = run.records[len(run.records) // 2]
    for svg in (timeline_svg(run.records, ids, -1), pool_svg(mid, 64, 4)):
        names = re.findall(r'<text[^>]*fill="(#[0-9a-fA-F]{6})"[^>]*>(r\d+)</text>', svg)
        assert names and all(contrast(fill) >= 4.5 for fill, _ in names), [(n, f, contrast(f)) for f, n in names]
    assert {n for _, n in re.findall(r'<text[^>]*fill="(#[0-9a-fA-F]{6})"[^>]*>(r\d+)</text>',
                                     timeline_svg(run.records, ids, -1))} == set(ids)


def test_the_timeline_hatches_the_slots_a_static_batch_wasted(family_model):
    """Six requests for two slots, static and continuous batching: each slot whose row computed padding is hatched
    grey, each slot left empty while a request waited hatched red (none of either for continuous batching), and
    every other slot drawn is a request in the pass or sitting it out."""
    from engine.generate.serving import RequestSpec, ServingRun
    from topics.serving.draw import timeline_svg

    lm = family_model("llama")
    specs = [RequestSpec(p, n, a) for p, n, a in zip(["Once upon a time", "The dog", "One day", "The bird sang", "Tom",
                                                      "A big fish"], [6, 2, 2, 5, 2, 3], [0, 0, 1, 2, 3, 4])]
    runs = {}
    for way in ("static", "continuous"):
        run = runs[way] = ServingRun(lm, specs, page_size=4, num_blocks=32, max_seqs=2, batching=way,
                                     stop_on_eos=False)
        run.run()
        svg = timeline_svg(run.records, [r.id for r in run.requests], -1, slots=2)
        padding, empty = slots_by_hand(run.records, 2)
        assert svg.count('data-role="slot-padding"') == padding and svg.count('data-role="slot-idle-waiting"') == empty
        assert (padding > 0) == (way == "static") and svg.count('data-role="cell-padding"') == padding
        assert svg.count('data-role="slot-held"') == sum(r.phase != "padding" for s in run.records for r in s.rows) + \
            sum(len(v) for v in drawn_idle(svg).values())  # a held slot: in the pass, or sitting it out
        assert "padding: a finished request" in svg and "computed and thrown away" in svg  # the key says so
    # drawn to one scale, as the page draws the two side by side: a step sits at the same x in both, so the run of
    # fewer steps ends short of the edge instead of being stretched to look as long
    steps = {way: len(run.records) for way, run in runs.items()}
    assert steps["static"] > steps["continuous"]

    def cells(way: str, **kw) -> dict[int, tuple[str, str]]:
        svg = timeline_svg(runs[way].records, [r.id for r in runs[way].requests], -1, slots=2, **kw)
        found = re.findall(r'data-slot="0" data-step="(\d+)" x="([\d.]+)" width="([\d.]+)"', svg)
        return {int(k): (x, w) for k, x, w in found}

    static, continuous = cells("static"), cells("continuous", span=steps["static"])
    assert continuous and all(continuous[k] == static[k] for k in continuous), (continuous, static)
    assert cells("continuous") != continuous  # unscaled, the shorter run is stretched across the width


@pytest.mark.xdist_group("queue")  # beside tests/test_serving_orders.py: the queue's spread is scheduled once a run
def test_the_queue_scenario_switched_to_static_batching_shows_its_wasted_slots_on_the_page():
    """Scenario 6: 12 requests for 4 batch slots. The knob starts a static run; by step 11 its first batch's short
    members are done, and their rows are drawn as padding while the queue waits."""
    at = serving_page()
    sc = SCENARIOS["queue"]
    at.selectbox(key="serve_scenario").set_value(sc["title"]).run()
    assert at.session_state["serve_batching"] == "continuous"
    at.segmented_control(key="serve_batching").set_value("static").run()
    for _ in range(12):
        at.button(key="serve_btn_forward").click().run()
    assert not at.exception and not at.error
    assert any("4 slots, static batching" in c.value for c in at.caption)
    run = at.session_state["serve_run"]
    assert run.batching == "static" and len(run.records) == 12
    (timeline,) = svgs(at, "dl-timeline")
    padding, _ = slots_by_hand(run.records, 4)
    assert timeline.count('data-role="slot-padding"') == padding > 0
    assert any(st == "waiting" for _, st in run.records[-1].statuses)  # the queue waits behind the padding


def throughput_record(new_tokens, continuous, static, one, generate=None, passes=None):
    """A Throughput record of given rates (the texts are functions of the record: no server needed)."""
    from topics.serving.record import Throughput

    lengths = new_tokens if isinstance(new_tokens, tuple) else (new_tokens,) * 8
    longest = max(lengths)
    return Throughput(requests=8, new_tokens=new_tokens, rounds=1, sizing={}, ms={},
                      passes=passes or {"continuous": longest, "static_batch": longest, "one_at_a_time": sum(lengths)},
                      same_tokens={}, continuous_tokens_per_s=continuous, one_at_a_time_tokens_per_s=one,
                      static_batch_tokens_per_s=static, generate_batch_tokens_per_s=generate)


MIXED_LENGTHS = (64, 8, 16, 64, 8, 32, 16, 48)
SAME = throughput_record(32, 492, 498, 130, 300)
MIXED = throughput_record(MIXED_LENGTHS, 450, 260, 128)


def test_throughput_is_a_chart_of_both_workloads_and_says_which_way_was_faster():
    from topics.serving.draw import throughput_figure, throughput_sentence

    f = throughput_figure(SAME, MIXED)
    assert [t.name for t in f.data] == ["same length, all at once", "mixed lengths"]
    assert len(f.data[0].x) == 4 and len(f.data[1].x) == 3  # generate_batch takes one length only
    said = throughput_sentence(SAME, MIXED)
    assert "continuous batching made 492 tokens/s, the static batch 498 (static ×1.01 faster, in one round" in said
    assert "50% wasted" in said and "450 tokens/s against 260 (continuous ×1.73 faster, in one round" in said
    assert "dropping finished rows from a pass buys here" not in said  # one round names no cause
    assert "busy" not in said
    assert "its two bars should match: 130 and 128 tokens/s, ×1.02 apart: the same work, so a gap this size is this " \
        "server's noise" in said  # the same work either way, and how far apart it measured, said so
    apart = throughput_sentence(SAME, throughput_record(MIXED_LENGTHS, 450, 260, 159))  # the audit's 22%, once unsaid
    assert "should match: 130 and 159 tokens/s, ×1.22 apart: the same work" in apart
    same = throughput_sentence(SAME, throughput_record(MIXED_LENGTHS, 450, 260, 130))
    assert "should match: 130 and 130 tokens/s." in same
    assert "The mixed lengths have no bar for transformers' generate_batch" in said  # a bar left out is said to be left out


@pytest.mark.parametrize("same, mixed", [
    (throughput_record(32, 517, 426, 130, 300), throughput_record(MIXED_LENGTHS, 262, 259, 128)),  # issue 42's run
    (throughput_record(32, 400, 520, 130, 300), throughput_record(MIXED_LENGTHS, 240, 262, 128)),  # static faster
], ids=["continuous faster", "static faster"])
def test_the_throughput_texts_say_what_the_run_shows_whichever_way_it_came_out(same, mixed):
    """Issue 42: the same-length workload was called 'a static batch's best case' while static lost (426 against
    517), and mixed lengths at ×1.0 were explained by a waste the run did not show. The text says which way was
    faster by how much, and what the workload allowed: with every request in the first pass and no queue, both take
    as many passes as the longest request, so there is no freed slot to refill."""
    from topics.serving.draw import throughput_sentence

    said = throughput_sentence(same, mixed)
    c, s = same.continuous_tokens_per_s, same.static_batch_tokens_per_s
    faster = f"continuous ×{c / s:.2f} faster" if c >= s else f"static ×{s / c:.2f} faster"
    assert f"the static batch {s:,.0f} ({faster}, in one round" in said
    assert "best case" not in said and "(it won)" not in said
    mc, ms = mixed.continuous_tokens_per_s, mixed.static_batch_tokens_per_s
    faster = f"continuous ×{mc / ms:.2f} faster" if mc >= ms else f"static ×{ms / mc:.2f} faster"
    assert f"{mc:,.0f} tokens/s against {ms:,.0f} ({faster}, in one round" in said
    assert "both took 32 passes" in said and "both took 64 passes, as many as the longest request makes" in said
    assert "hid that waste" not in said and "queue waits for batch slots (scenario 6)" in said


def test_a_throughput_round_that_flips_against_the_work_is_called_noise():
    from dataclasses import replace

    from topics.serving.draw import throughput_sentence

    noisy = replace(MIXED, static_batch_tokens_per_s=700)  # more padded work, yet faster: the server moved
    said = throughput_sentence(SAME, noisy)
    assert "The server was busy while these ran: the static batch measured more than ×1.3 faster" in said
    apart = throughput_sentence(SAME, replace(MIXED, one_at_a_time_tokens_per_s=65))  # the same work, half the rate
    assert "130 and 65 tokens/s, ×2.0 apart: the server was busy" in apart


# ---------------------------------------------------------------- batch size on the roofline


def _measured_rows(lm, sizes=(1, 2, 4, 8, 16), context=68, ms=(3.0, 3.5, 4.5, 6.0, 9.0)):
    """A small fixture record of step_time_vs_batch: its intensities from batched.batched_decode, its times given."""
    from physics.batched import batched_decode
    from topics.serving.record import BatchPass, BatchSweep

    rows = []
    for b, t in zip(sizes, ms):
        w = batched_decode(lm.spec, b, context, lm.elem_bytes)
        rows.append(BatchPass(batch=b, decode_ms=t, over_batch_1=t / ms[0], per_sequence_ms=t / b, spread=(t, t),
                              context=context, flops=w.flops, bytes=w.bytes, intensity=w.intensity,
                              achieved=w.flops / (t / 1e3)))
    return BatchSweep(rows=tuple(rows), warmup_ms=1.0, note=None)


def test_the_batch_roofline_places_each_measured_pass_and_a_gpus_prediction_labelled_so(bundled_lm):
    """Each measured pass of B sequences at its batched_decode intensity and FLOPs / measured time on this device's
    roof; beside it an H100's predicted passes (bf16) for the same model and for Llama-3-8B, with the batch where each
    reaches the ridge; the sentence's numbers are the record's."""
    from physics import kvcalc, roofline
    from physics.batched import batched_decode, saturating_batch
    from topics.serving.draw import batch_roofline_figure, batch_roofline_gpu_words, batch_roofline_sentence
    from topics.serving.measure import batch_roofline

    sweep = _measured_rows(bundled_lm)
    rows = sweep.rows
    here = roofline.DeviceRoof("cpu (measured here, float32 matmul)", 1.6e11, 2.8e10, True)
    h100 = roofline.h100()
    br = batch_roofline(sweep, bundled_lm, here, h100)
    fig = batch_roofline_figure(br)
    by = {t.name: t for t in fig.data}
    measured = by["measured here (fp32)"]
    assert list(measured.x) == pytest.approx([r.intensity for r in rows])
    assert list(measured.y) == pytest.approx([r.flops / (r.decode_ms / 1e3) for r in rows])
    ours = by["tinystories-llama, H100 bf16 predicted"]
    assert list(ours.x) == pytest.approx([p.intensity for p in roofline.batch_roofline(bundled_lm.spec, 68, h100)])
    assert ours.marker.symbol == "circle-open"  # a prediction is drawn open, on a dashed roof
    assert by["NVIDIA H100 SXM's roof (datasheet)"].line.dash == "dash"
    ridges = {round(r.x0, 6): r.y1 for r in fig.layout.shapes}  # each ridge's line rises to its own roof's corner,
    assert ridges == pytest.approx({round(here.ridge, 6): here.peak_flops,  # no higher: the other roof's points
                                    round(h100.ridge, 6): h100.peak_flops})  # and names are not struck through
    real = by["Llama-3-8B, H100 bf16 predicted"]
    assert real.x[0] == pytest.approx(1.0, rel=0.05) and real.x[5] == pytest.approx(32, rel=0.05)  # about B FLOP/byte
    said = batch_roofline_sentence(br)
    assert "H100" not in said  # the open points' story is folded under it, in words of its own
    said += " " + batch_roofline_gpu_words(br)
    first, last = rows[0], rows[-1]
    assert (f"from {first.intensity:.1f} at B = 1 to {last.intensity:.1f} at B = 16 (fp32, estimates)"
            in said)
    assert f"this device's ridge of {here.ridge:.1f}" in said
    assert f"(×{last.achieved / first.achieved:.1f} for ×16 the work)" in said
    sat_here = saturating_batch(bundled_lm.spec, 68, 4.0, here.ridge)
    assert f"ridge is reached at B ≈ {sat_here}" in said
    sat_real = saturating_batch(kvcalc.from_table("Llama-3-8B"), 68, 2.0, h100.ridge)
    assert f"Llama-3-8B reaches it at B ≈ {sat_real}" in said and 300 < sat_real < 400
    # and the sooner batch where the step stops being the weights' read: the requests' arithmetic at the peak and
    # their own K/V at the bandwidth (the attention's kernels, apart from the products) add up to the weights' read
    for spec, name in ((bundled_lm.spec, "tinystories-llama"), (kvcalc.from_table("Llama-3-8B"), "Llama-3-8B")):
        one = batched_decode(spec, 1, 68, 2.0)
        knee = next(float(m) for m in re.findall(rf"B ≈ ([0-9.]+)(?: \(under one request\))? for {name}", said))
        own = one.flops / h100.peak_flops + one.kv_bytes / h100.bandwidth
        assert knee * own == pytest.approx(one.weight_bytes / h100.bandwidth, rel=0.01 if knee >= 10 else 0.1)
    assert knee < sat_real  # sooner than the one intensity says
    assert "predicted" in said.lower() and "nothing ran there" in said


@pytest.mark.slow  # the page's own sweep: B = 1 to 16, eight timed passes at ~64 positions each (~3 s)
def test_the_serving_page_draws_the_measured_batch_passes_on_the_roofline():
    draws_the_measured_batch_passes()


def test_the_serving_page_draws_a_small_measured_sweep_on_the_roofline(monkeypatch):
    """The same page, its sweep measured small (two timed passes at ~16 positions for each B): what the page draws
    and says is read off the record it measured, whatever the sweep's size."""
    from topics.serving import measure

    sweep = measure.step_time_vs_batch
    monkeypatch.setattr(measure, "step_time_vs_batch", lambda lm, sizes: sweep(lm, sizes=sizes, steps=2, context=16))
    draws_the_measured_batch_passes()


def test_a_second_measurement_keeps_the_first_beside_it(monkeypatch):
    """The queue's batching comparison, then 'Throughput, four ways': the comparison's table and timelines went, one
    measurement kept at a time. Each stays, the click after it adding its own beside."""
    from topics.serving import measure

    sweep = measure.step_time_vs_batch
    monkeypatch.setattr(measure, "step_time_vs_batch", lambda lm, sizes: sweep(lm, sizes=sizes, steps=2, context=16))
    monkeypatch.setattr(measure, "throughput_side_by_side", lambda *a, **k: {"same": SAME, "mixed": MIXED})
    at = serving_page()
    at.button(key="serve_btn_forward").click().run()
    at.button(key="serve_batch").click().run()
    at.button(key="serve_tp").click().run()
    assert not at.exception
    titles = [str(c.proto.spec) for c in at.get("plotly_chart")]
    assert any("Batch on the roofline" in t for t in titles)  # the first measurement, still drawn
    assert any("same length, all at once" in t for t in titles)  # and the second beside it
    assert set(at.session_state["serve_measured"]) == {"batch", "throughput"}


def draws_the_measured_batch_passes():
    at = serving_page()
    at.button(key="serve_btn_forward").click().run()  # the measurements sit under a started run
    at.button(key="serve_batch").click().run()
    assert not at.exception, [e.value for e in at.exception]
    charts = [str(c.proto.spec) for c in at.get("plotly_chart")]
    drawn = next(c for c in charts if "Batch on the roofline" in c)
    assert "measured here (fp32)" in drawn and "H100 bf16 predicted" in drawn  # what each point is, and where
    said = next(m.value for m in at.markdown if "Each filled point is one decode pass" in m.value)
    rows = at.session_state["serve_measured"]["batch"].rows
    assert f"at B = {rows[-1].batch}" in said.replace("\\", "")
    assert "H100" not in said  # one paragraph beside the chart; the GPU's predictions are folded under it
    (fold,) = [e for e in at.expander if "open points, estimates" in e.label]
    assert any("nothing ran there" in m.value and "that is why servers batch" in m.value for m in fold.markdown)
    caption = next(c.value for c in at.caption if "sequences in one decode pass took" in c.value)
    assert f"({rows[-1].decode_ms:.1f} ms against {rows[0].decode_ms:.1f} ms)" in caption and "warm-up" in caption


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
    ({"edited_rows": {"1": {"max_new_tokens": 300}}}, "(1–256) and an arrival step (0–1,000): request 2's max new "
                                                       "tokens is 300"),  # the table's limit, not the engine's
    ({"edited_rows": {"0": {"arrive": -1}}}, "request 1's arrives at step is -1"),
], ids=["blank cells", "too many rows", "past the table's limit", "before step 0"])
def test_a_table_typed_wrong_gets_a_message_and_keeps_the_last_good_requests(edits, said):
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value("Your own requests").run()
    before = at.session_state.get("serve_own_requests")
    typed(at, "serve_own_editor", edits)
    shown = [e.value.replace("\\", "") for e in at.error]  # the words as the page shows them (markup escaped)
    assert any(said in words for words in shown), shown
    assert at.session_state.get("serve_own_requests") == before


def _queue_record(c_ms, s_ms, c_steps=72, s_steps=176, c_idle=0, s_idle=324):
    from topics.serving.record import BatchingComparison, BatchingWay

    def way(name, ms, steps, idle):
        return BatchingWay(batching=name, tokens_per_s=264 / (sorted(ms)[len(ms) // 2] / 1e3), ms=tuple(ms),
                           engine_steps=steps, passes=steps, tokens=264, idle_slot_steps=idle)

    return BatchingComparison(requests=12, slots=4, lengths=(64, 8), arrivals=(0, 16), rounds=len(c_ms),
                              continuous=way("continuous", c_ms, c_steps, c_idle),
                              static=way("static", s_ms, s_steps, s_idle), same_tokens=True, ids=())


@pytest.mark.parametrize("c_ms, s_ms, busy", [((800, 820, 810), (1700, 1750, 1720), False),
                                              ((800, 1600, 900), (1700, 1750, 1720), True)], ids=["steady", "busy"])
def test_the_queue_comparison_says_its_table_and_flags_rounds_that_spread(c_ms, s_ms, busy):
    from topics.serving.draw import batching_frame, batching_sentence

    q = _queue_record(c_ms, s_ms)
    said = batching_sentence(q)
    table = batching_frame(q).set_index("batching")
    assert table.loc["static", "slot-steps wasted while a request waited"] == 324
    c, s = q.continuous.tokens_per_s, q.static.tokens_per_s
    assert f"continuous batching made {c:,.0f} tokens/s, static batching {s:,.0f} (continuous ×{c / s:.2f} faster" in said
    assert "Static batching took 176 engine steps to continuous batching's 72" in said and "324 slot-steps" in said
    assert ("server was busy" in said) == busy
    if busy:
        assert "continuous batching's rounds ranged 800–1,600 ms" in said
    # the rates' ratio taken apart into the passes' and the time a pass's, which multiply back to it
    m = re.search(r"×([\d.]+) the passes \(176 against 72\) times ×([\d.]+) the time a pass \(([\d.]+) ms against "
                  r"([\d.]+):", said)
    assert m, said
    assert float(m.group(1)) * float(m.group(2)) == pytest.approx(c / s, rel=0.01)
    assert float(m.group(3)) == pytest.approx(sorted(s_ms)[1] / 176, abs=0.05)


def test_a_phones_serving_pictures_draw_the_same_record_reflowed_whole_with_no_text_under_11_px(family_model):
    """The pool, the pass and the timeline drawn for a phone (draw.PHONE wide) hold every block, part, cell and slot
    the wide ones hold; their text is 11 px or more on a 390 px phone's 370 px column, and no line runs past the
    picture's right edge (they wrap). A long run's timeline goes on in bands of columns CELL wide or more."""
    from collections import Counter
    from html import unescape

    from drawing.svg import TEXT, text_width
    from engine.generate.serving import RequestSpec, ServingRun
    from topics.serving.draw import CELL, PHONE, pass_svg, pool_svg, timeline_svg

    lm = family_model("llama")
    specs = [RequestSpec(p, n, a) for p, n, a in zip(["Once upon a time", "The dog", "One day", "The bird sang", "Tom",
                                                      "A big fish"], [30, 2, 12, 5, 2, 24], [0, 0, 1, 2, 3, 4])]
    run = ServingRun(lm, specs, page_size=4, num_blocks=32, max_seqs=2, batching="static", stop_on_eos=False)
    run.run()
    ids, last = [r.id for r in run.requests], len(run.records) - 1
    assert last * CELL > PHONE  # long enough for more than one band

    def roles(svg: str) -> Counter:
        return Counter(re.findall(r'data-role="([\w-]+)"', svg))

    def past_the_edge(svg: str) -> list[str]:
        out = []
        for attrs, said in re.findall(r"<text ([^>]*)>([^<]*)</text>", svg):
            a, said = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs)), unescape(said)
            width = text_width(said, float(a["font-size"]) / TEXT, a["font-weight"] == "bold", "monospace" in a["font-family"])
            left = float(a["x"]) - {"start": 0, "middle": width / 2, "end": width}[a["text-anchor"]]
            if left < 0 or left + width > PHONE + 1:
                out.append(said)
        return out

    for at in (3, last):
        step = run.records[at]
        for draw, args in ((pool_svg, (step, 32, 4)), (pass_svg, (step, lm.spec.d_model)),
                           (timeline_svg, (run.records, ids, at, None, 2))):
            wide, phone = draw(*args), draw(*args, width=PHONE)
            assert roles(phone) == roles(wide), (draw.__name__, at)
            assert f'viewBox="0 0 {PHONE} ' in phone
            assert min(float(f) for f in re.findall(r'font-size="([\d.]+)"', phone)) * 370 / PHONE >= 11
            assert not past_the_edge(phone), (draw.__name__, at, past_the_edge(phone))
    bands = timeline_svg(run.records, ids, last, slots=2, width=PHONE)
    assert bands.count(" >0</text>") == 1  # one band starts at step 0...
    assert f'data-step="{last}"' in bands and bands.count('data-role="current-step"') == 1  # ...the last, the run's end
    assert bands.count(">slot 0</text>") >= 2  # the slots drawn under each band's requests


def test_the_batch_rooflines_words_agree_with_the_cache_roof_its_points_are_drawn_under():
    """The sentence put B = 16 at 7.3 FLOP/byte "still left of this device's ridge of 8.6" beside the chart's dashed
    roof, "the cache's roof (these passes fit it)", whose ridge sat near 6.3: past it. Where the passes fit the
    cache, the words now give that roof's ridge and the first batch past it; where they do not, nothing."""
    from types import SimpleNamespace

    from physics import roofline
    from topics.serving.draw import _cache_ridge_words

    mib = 2**20
    roof = roofline.DeviceRoof("test", peak_flops=1e11, bandwidth=15e9, measured=True,
                               bandwidths=((16 * mib, 15e9), (64 * mib, 15e9), (1024 * mib, 11e9)))
    rows = [SimpleNamespace(batch=b, intensity=ai, bytes=17 * mib) for b, ai in ((1, 0.5), (4, 2.0), (8, 4.0),
                                                                                (12, 6.8), (16, 7.3))]
    said = _cache_ridge_words(rows, roof)
    assert f"meets the matmul peak at {1e11 / 15e9:.1f} FLOP/byte: from B = 12 they are right of that ridge." in said
    assert roof.ridge > 8.5  # THE ridge, which the sentence still quotes before: all five are left of it
    low = [SimpleNamespace(batch=r.batch, intensity=r.intensity / 4, bytes=r.bytes) for r in rows]
    assert "none of them reaches that ridge either." in _cache_ridge_words(low, roof)
    big = [SimpleNamespace(batch=r.batch, intensity=r.intensity, bytes=900 * mib) for r in rows]
    assert _cache_ridge_words(big, roof) == ""


def test_the_sharing_ratio_is_the_served_positions_over_the_held_ones_it_prints():
    """The shared-prompt scenario read "4,294 positions ... from 2,374 stored, so 1.63 positions served per position
    held": 4,294 / 2,374 is 1.81; the 1.63 divided by the positions of whole blocks held, which it never printed."""
    from types import SimpleNamespace

    from topics.serving.draw import sharing_sentence

    sh = SimpleNamespace(steps=20, served=4294, stored=2374, held=2634, saved=4294 - 2374,
                         served_per_held=4294 / 2634, skipped=0)
    said = sharing_sentence(SimpleNamespace(sharing=sh))
    assert "from 2,374 stored (each once) in 2,634 positions of whole blocks, so 1.63 positions served" in said


@pytest.mark.parametrize("c_ms, s_ms, words, cause", [
    ((1000,), (1100,), "continuous ×1.10 faster, in one round: too few to tell from the server's noise", False),
    ((1000, 1000, 1000), (1100, 950, 1080), "no clear difference: ×1.08 continuous over static by medians, but the "
                                            "rounds ran ×0.95 to ×1.10", False),
    ((1000, 1000, 1000), (1100, 1050, 1080), "continuous ×1.08 faster in every round (×1.05 to ×1.10)", True),
], ids=["one round", "rounds straddle x1", "every round"])
def test_a_throughput_ranking_from_rounds_that_disagree_is_no_clear_difference(c_ms, s_ms, words, cause):
    """'static ×1.10 faster' and 'continuous ×1.08 faster: all that dropping finished rows from a pass buys here'
    were read off one round, beside a control (one request at a time, the same work) 3 % apart. A difference is now
    called one only where every timed round agrees on its side of ×1, and only then is a cause named."""
    from dataclasses import replace
    from statistics import median

    from topics.serving.draw import throughput_sentence

    tokens = sum(MIXED_LENGTHS)
    mixed = replace(MIXED, rounds=len(c_ms), ms={"continuous": c_ms, "static_batch": s_ms},
                    continuous_tokens_per_s=tokens / (median(c_ms) / 1e3),
                    static_batch_tokens_per_s=tokens / (median(s_ms) / 1e3))
    said = throughput_sentence(SAME, mixed)
    assert f"({words})" in said
    assert ("all that dropping finished rows from a pass buys here" in said) == cause


def test_the_chunked_prefills_first_token_is_counted_as_the_table_counts_its_steps():
    """'Its first token came 4 steps after it arrived instead of 1' beside a table where it arrived at step 6 and
    chose its first token at step 9, three steps later (TTFT steps count both ends). Now: in the 4th step counting
    the one it arrived in, instead of the 1st."""
    from types import SimpleNamespace

    from topics.serving.draw import _nth, chunking_frame, chunking_sentence
    from topics.serving.record import Stall

    def stall(ttft_steps):
        return Stall(sat_out={}, filled_by={}, longest_gap_ms=3.0, long_id="r3", long_ttft_steps=ttft_steps,
                     long_ttft_ms=12.5, prefill_passes=ttft_steps, long_prompt_tokens=120)

    result = SimpleNamespace(on=SimpleNamespace(stall=stall(9 - 6 + 1)), off=SimpleNamespace(stall=stall(1)),
                             same_tokens=True)
    said = chunking_sentence(result)
    assert "its first token came in the 4th step counting the one it arrived in, instead of the 1st." in said
    assert "steps after it arrived" not in said
    assert list(chunking_frame(result)["long prompt's first token"]) == ["in step 4 counting its arrival's, 12.5 ms",
                                                                          "in step 1 counting its arrival's, 12.5 ms"]
    assert [_nth(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


@pytest.mark.parametrize("whole_ms, alike", [(8.0, True), (30.0, False)], ids=["overhead-sized", "token-sized"])
def test_a_chunked_run_that_waited_longer_in_ms_says_its_pass_times_not_a_busy_server(whole_ms, alike):
    """'Measured in ms the chunked run waited as long or longer: the server was busy' was said whenever it did, with
    nothing measured to show a busy server; on a small model a pass costs about the same whatever its tokens. The
    sentence now gives the long prompt's passes, whole and in pieces, from the runs' own records."""
    from types import SimpleNamespace

    from topics.serving.draw import chunking_sentence
    from topics.serving.record import Stall

    def stall(sat_out, gap, passes):
        return Stall(sat_out=sat_out, filled_by={}, longest_gap_ms=gap, long_id="r3", long_ttft_steps=passes,
                     long_ttft_ms=12.5, prefill_passes=passes, long_prompt_tokens=166)

    def step(tokens, ms, long_prefill=True):
        rows = (SimpleNamespace(id="r3" if long_prefill else "r0", phase="prefill" if long_prefill else "decode"),)
        return SimpleNamespace(tokens=tokens, forward_ms=ms, rows=rows)

    off = SimpleNamespace(stall=stall({"r0": (6,)}, 7.0, 1), steps=(step(3, 4.0, False), step(169, whole_ms)))
    on = SimpleNamespace(stall=stall({}, 9.0, 3), steps=(step(64, 7.5), step(64, 7.9), step(41, 7.6)))
    said = chunking_sentence(SimpleNamespace(on=on, off=off, same_tokens=True))
    assert "server was busy" not in said
    assert (f"the pass with the whole prompt took {whole_ms:.1f} ms (169 tokens), a pass with a piece of it 7.6 ms "
            "(median of 3)") in said
    assert ("costs about the same whatever its tokens" in said) == alike


@pytest.mark.parametrize("title", [SCENARIO_TITLES[0], SCENARIO_TITLES[1]])
def test_before_the_first_step_the_page_lists_the_requests_the_run_then_serves(title):
    """A fresh scenario is not a blank page: who arrives when, with how many prompt tokens, is listed before ▶ step.
    The click after: the run's own latency table gives the same requests the same arrivals and prompt lengths."""
    from transformers import AutoTokenizer

    from engine.load.load import MODELS_DIR

    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(title).run()
    before = next(d.value for d in at.dataframe if "arrives at step" in d.value.columns)
    spec = next(s for s in SCENARIOS.values() if s["title"] == title)["requests"]
    tok = AutoTokenizer.from_pretrained(str(MODELS_DIR / "tinystories-llama"))  # the app's default, read apart
    assert list(before["request"]) == [f"r{i}" for i in range(len(spec))]
    assert list(before["arrives at step"]) == [r.arrive for r in spec]
    assert list(before["prompt"]) == [r.prompt for r in spec]
    assert list(before["prompt tokens"]) == [len(tok(r.prompt)["input_ids"]) for r in spec]
    assert any("all free" in c.value for c in at.caption)
    at.button(key="serve_btn_run").click().run()
    assert not at.exception
    assert not any("arrives at step" in d.value.columns for d in at.dataframe)  # the run's own tables replace it
    after = next(d.value for d in at.dataframe if "TTFT (steps)" in d.value.columns)
    assert list(after["arrives"]) == list(before["arrives at step"])
    assert list(after["prompt tokens"]) == list(before["prompt tokens"])


def test_switching_chunking_off_as_the_scenario_says_serves_the_long_prompt_in_one_pass():
    """Scenario 3 says "Switch chunking off". The knobs under More show the sizing in use (the scenario's, not the
    last scenario's), and switching one is used at once: the long prompt is then prefilled in a single pass, all its
    tokens in one row of the timeline, where chunked it took several."""
    sc = SCENARIOS["long_prompt"]
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(sc["title"]).run()
    for knob in ("page_size", "num_blocks", "max_batch_tokens", "prefix_sharing", "chunking"):
        assert at.session_state[f"serve_{knob}"] == sc["sizing"][knob], knob  # what More shows is what runs
    long_id = f"r{len(sc['requests']) - 1}"

    def long_prefills(at) -> int:
        at.button(key="serve_btn_run").click().run()
        assert not at.exception and not at.error
        return len(re.findall(rf'data-role="cell-prefill" data-request="{long_id}"', svgs(at, "dl-timeline")[0]))

    assert long_prefills(at) > 1  # chunked: pieces that fit the token budget
    more_widget(at, "chunking").set_value(False).run()
    assert any("chunked prefill off" in c.value for c in at.caption)
    assert long_prefills(at) == 1  # the whole prompt in one pass
    more_widget(at, "custom_sizing").set_value(False).run()  # back to the scenario's own sizing
    assert at.session_state["serve_chunking"] is True and any("chunked prefill on" in c.value for c in at.caption)


def test_a_scenario_picked_after_another_was_sized_by_hand_steps_on_its_own_sizing():
    """Scenario 4 sized by hand (chunking off) kept its 14 blocks for scenario 3 picked next: its 166-token prompt
    fit no pool, an error stood under the story of chunked prefill and ▶ step was greyed. A pick brings the
    scenario's own sizing, and the click after it steps."""
    small, long = SCENARIOS["preemption"], SCENARIOS["long_prompt"]
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(small["title"]).run()
    more_widget(at, "chunking").set_value(False).run()
    assert at.session_state["serve_custom_sizing"] and any("chunked prefill off" in c.value for c in at.caption)
    at.selectbox(key="serve_scenario").set_value(long["title"]).run()
    for knob in ("page_size", "num_blocks", "max_batch_tokens", "prefix_sharing", "chunking"):
        assert at.session_state[f"serve_{knob}"] == long["sizing"][knob], knob
    blocks = long["sizing"]["num_blocks"]
    assert any(f"{blocks} blocks of" in c.value and "chunked prefill on" in c.value for c in at.caption)
    at.button(key="serve_btn_forward").click().run()  # the click after the pick
    assert not at.exception and not at.error
    assert svgs(at, "dl-pool")[0].count('data-role="block-used"') > 0  # step 0 ran: blocks taken


@pytest.mark.parametrize("policy", ["newest", "most_blocks"])
def test_the_pool_check_calls_recomputed_only_the_requests_whose_timeline_recomputes(bundled_lm, policy):
    """'r2–r4 were preempted and recomputed' under 'most blocks', beside a timeline where r3 had no recompute cell:
    its positions' blocks were still cached when it came back. The sentence names who was computed again as the
    run's own rows do."""
    from engine.generate.serving.run import ServingRun
    from topics.serving.draw import roomy_sentence
    from topics.serving.measure import roomy_check

    sc = SCENARIOS["preemption"]
    sizing = {**sc["sizing"], "preemption": policy}
    run = ServingRun(bundled_lm, sc["requests"], **sizing)
    run.run()
    rows = [(row.id, str(row.phase)) for s in run.records for row in s.rows]
    preempted = {rid for s in run.records for rid in s.preempted}
    again = {rid for rid, phase in rows if phase == "recompute"}
    said = roomy_sentence(roomy_check(run, sc["requests"], sizing))
    assert preempted and again <= preempted
    cached = sorted(preempted - again)
    assert ("preempted and recomputed" in said) == (not cached), said
    for rid in cached:
        assert re.search(rf"{rid}[^;]* found (its|their) positions' blocks still cached", said), said


def test_the_preemption_sentence_names_each_policy_as_its_table_row_does():
    """The sentence under the policy table said 'most_blocks', a code name, beside a table row reading 'most
    blocks (the biggest holder goes)'."""
    from topics.serving.draw import policy_frame, policy_sentence
    from topics.serving.record import PolicyRun

    runs = (PolicyRun("newest", 40, 3, ((9, "r4"),), 24, {"r0": True}),
            PolicyRun("most_blocks", 38, 2, ((9, "r0"),), 30, {"r0": True}))
    said, rows = policy_sentence(runs), list(policy_frame(runs)["policy"])
    for name, row in zip(("newest", "most blocks"), rows):
        assert row.startswith(name) and f"'{name}'" in said, (said, rows)
    assert "_" not in said


def test_a_timeline_band_labels_its_first_and_last_step_and_never_two_neighbours():
    """'16 17' under a phone's band: the last step is always labelled, and it took the place of a label one step
    before it only when closer than half the spacing, so two neighbours were labelled, the current step's box over
    both. Every spacing now lies between 2 steps and one and a half times the band's."""
    from topics.serving.draw import step_ticks

    for every in range(2, 7):
        for start in (0, 18, 97):
            for n in range(2, 40):
                ticks = step_ticks(range(start, start + n), every)
                gaps = [b - a for a, b in zip(ticks, ticks[1:])]
                assert ticks[0] == start and ticks[-1] == start + n - 1, (every, n, ticks)
                assert all(2 <= g <= 1.5 * every for g in gaps) or n <= 2, (every, n, ticks)
