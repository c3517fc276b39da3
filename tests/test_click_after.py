"""The click after a change: a control that sets what a page shows keeps it through the next action (a click, the
scrubber, the page's own link opened again). The step page's scenarios are held in a real browser
(tests/test_browser.py); these run the pages in AppTest."""

from __future__ import annotations

import re

import pytest

from topics.serving.scenarios import SCENARIOS
from ui.apptest import app_test, page


def serving_page():
    at = app_test().run()
    at.switch_page(page("serving")).run()
    assert not at.exception
    return at


def said(at) -> list[str]:
    return [m.value for m in at.markdown]


def test_a_serving_link_at_an_earlier_step_of_a_finished_run_says_which_step_it_shows_not_finished():
    """A Serving link with at= showed 'step 20 of 56 · 0/5 requests done' above 'Finished: every request has
    finished.'"""
    at = serving_page()
    scenario = SCENARIOS["prefix_cache"]  # three short requests, far apart: the smallest run with an early step to show
    at.selectbox(key="serve_scenario").set_value(scenario["title"]).run()
    at.button(key="serve_btn_run").click().run()
    latest = len(at.session_state["serve_run"].records) - 1
    assert any(m.startswith("**Finished**") for m in said(at))
    at.slider(key="serve_at").set_value(3).run()
    link = dict(at.query_params)
    assert link["at"] == "3" and link["steps"] == str(latest)
    for screen in (at, opened(link)):
        lines = said(screen)
        status = next(m for m in lines if m.startswith("step **3** of"))
        done = int(re.search(r"(\d+)/\d+ requests done", status).group(1))
        assert done < len(scenario["requests"])  # at step 3 not every request is done
        assert not any(m.startswith("**Finished**") for m in lines), lines
        assert any(f"went on to step {latest}" in m for m in lines), lines
    at.button(key="serve_btn_forward").click().run()  # the click after: one step on, still not the end
    assert any(m.startswith("step **4** of") for m in said(at))
    assert not any(m.startswith("**Finished**") for m in said(at))


@pytest.mark.parametrize("scenario, knob, value", [("preemption", "preemption", "most_blocks"),
                                                    ("queue", "batching", "static")])
def test_a_serving_link_reopens_the_scenarios_policy_not_its_default(scenario, knob, value):
    """The pool-too-small scenario's preemption policy and the queue's batching were held by the next click but not
    by the address: a link reopened the scenario with its default and replayed other steps. The link now carries
    the choice, the reopened page runs with it, and a value the scenario does not take is refused plainly."""
    at = serving_page()
    at.selectbox(key="serve_scenario").set_value(SCENARIOS[scenario]["title"]).run()
    at.session_state[f"serve_{knob}"] = value
    at.run()
    for _ in range(3):
        at.button(key="serve_btn_forward").click().run()
    link = dict(at.query_params)
    assert link[knob] == value and link["scenario"] == scenario
    run = at.session_state["serve_run"]
    other = opened(link)
    assert other.session_state[f"serve_{knob}"] == value
    again = other.session_state["serve_run"]
    assert getattr(again, knob).value == getattr(run, knob).value == value
    assert [s.rows for s in again.records] == [s.rows for s in run.records]  # the same steps, replayed
    bad = app_test()
    bad.query_params = {**link, knob: "<b>oldest</b>"}
    bad.run()
    bad.switch_page(page("serving")).run()
    assert not bad.exception and any(f"{knob}=" in w.value and "ignored" in w.value for w in bad.warning)
    assert bad.session_state[f"serve_{knob}"] != "<b>oldest</b>"


def opened(link: dict):
    other = app_test()
    other.query_params = link
    other.run()
    other.switch_page(page("serving")).run()
    assert not other.exception and not other.error
    return other


@pytest.fixture
def small_measures(monkeypatch):
    """The budget page measuring 64 held-out positions and 8 free tokens instead of 256 and 64 (~0.2 s a policy, not
    ~1.2 s): these tests read the page's controls and its link, whatever the size of the measurement under them. The
    page's cache is emptied before and after, so no other test reads a small measurement (as tests/test_lessons.py's
    small_budget_lesson does for lesson 11)."""
    from topics.budget import measure
    from topics.budget.page import one_policy

    policies = measure.compare_policies
    monkeypatch.setattr(measure, "compare_policies",
                        lambda *args, **kw: policies(*args, **{**kw, "context": 64, "new_tokens": 8}))
    one_policy.clear()
    yield
    one_policy.clear()


def budget_page(link: dict | None = None):
    at = app_test()
    if link:
        at.query_params = link
    at.run()
    at.switch_page(page("budget")).run(timeout=300)
    assert not at.exception
    return at


def test_the_two_heavy_scores_tip_stays_when_followed_with_both_scores_figures(small_measures):
    """'Switch the policy to heavy-avg … and compare': once switched, the tip went and heavy's agreement left the
    screen, leaving nothing to compare. The tip stays while either score is picked, with both scores' agreement as
    the page showed each."""
    def agreement(at) -> str:
        said = next(m.value for m in at.markdown if m.value.startswith("Holds "))
        return re.search(r"top-1 agreement \*\*([\d.]+%)\*\*", said).group(1)

    at = budget_page()
    at.button(key="budget_scenario_two heavy scores").click().run(timeout=300)
    heavy = agreement(at)
    at.selectbox(key="budget_policy").set_value("heavy-avg").run(timeout=300)  # the click the tip asks for
    tip = next(i.value for i in at.info if "H2O's plain sum" in i.value)
    assert f"heavy {heavy}, heavy-avg {agreement(at)} (teacher-forced)" in tip
    at.selectbox(key="budget_policy").set_value("window").run(timeout=300)  # another comparison: the tip goes
    assert not any("H2O's plain sum" in i.value for i in at.info)


def test_the_budget_pages_policy_and_budget_survive_the_next_click_and_open_again_from_its_link(small_measures):
    """The budget page's policy was held nowhere but the session: the next click kept it, a reload of the page's
    link forgot it. The link now carries the policy and the budget, and a bad policy is refused plainly."""
    at = budget_page()
    at.slider(key="budget_budget").set_value(32).run(timeout=300)
    at.selectbox(key="budget_policy").set_value("window").run(timeout=300)  # the next click: the budget stays
    assert at.slider(key="budget_budget").value == 32
    link = dict(at.query_params)
    assert (link.get("policy"), link.get("budget")) == ("window", "32")
    other = budget_page(link)
    assert other.selectbox(key="budget_policy").value == "window" and other.slider(key="budget_budget").value == 32
    assert not other.warning
    bad = budget_page({**link, "policy": "<b>evict-all</b>"})
    assert bad.selectbox(key="budget_policy").value == "heavy"  # the default: a link never sets an unknown policy
    assert any("policy=" in w.value and "ignored" in w.value for w in bad.warning)


def test_the_scale_pages_choices_survive_a_visit_to_another_page():
    """A lecturer sets the KV calculator (a model, a context) and the roof on the Scale page, opens a lesson, and comes
    back: the page shows what they set, not its defaults (a page not drawn keeps its widgets' state)."""
    at = app_test().run()
    at.switch_page(page("scale")).run(timeout=300)
    assert not at.exception
    at.selectbox(key="scale_model").set_value("Llama-2-7b").run(timeout=300)
    at.number_input(key="scale_tokens").set_value(4096).run(timeout=300)
    roofs = at.selectbox(key="scale_roof").options
    at.selectbox(key="scale_roof").set_value(roofs[1]).run(timeout=300)
    at.switch_page(page("lessons")).run(timeout=300)
    at.switch_page(page("scale")).run(timeout=300)
    assert not at.exception
    assert at.selectbox(key="scale_model").value == "Llama-2-7b"
    assert at.number_input(key="scale_tokens").value == 4096
    assert at.selectbox(key="scale_roof").value == roofs[1]
    assert any("Llama-2-7b" in m.value and "4,096" in m.value for m in at.markdown), "the calculator reads the pick"


def test_the_speculative_pages_drafter_k_and_round_open_again_from_its_link():
    """Speculative decoding wrote no link: a lecturer who shared the page's address shared the step page's prompt and
    none of its own. Its link now carries the prompt, the drafter, k and the round on screen, and opens the same
    rounds (the same proposals, kept and cut); a drafter the page does not have is refused plainly."""
    at = app_test().run()
    at.switch_page(page("speculative")).run()
    at.text_input(key="speculative_prompt").set_value("Tom had a red ball. Tom had a red").run()
    at.selectbox(key="speculative_drafter").set_value("prompt lookup (n-gram ≤ 2)").run()
    at.number_input(key="speculative_k").set_value(3).run()
    at.button(key="speculative_btn_prefill").click().run()
    for _ in range(3):
        at.button(key="speculative_btn_next").click().run()
    at.button(key="speculative_btn_back").click().run()  # the round on screen: 2 of 3
    assert not at.exception, [e.value for e in at.exception]
    link = dict(at.query_params)
    assert (link["drafter"], link["k"], link["steps"], link["at"]) == ("lookup2", "3", "3", "2")
    run = at.session_state["speculative_run"]
    other = app_test()
    other.query_params = link
    other.run()
    other.switch_page(page("speculative")).run()
    assert not other.exception and not other.error, [e.value for e in other.error]
    assert other.text_input(key="speculative_prompt").value == "Tom had a red ball. Tom had a red"
    assert other.selectbox(key="speculative_drafter").value == "prompt lookup (n-gram ≤ 2)"
    assert other.number_input(key="speculative_k").value == 3
    again = other.session_state["speculative_run"]
    assert [(r.proposed_ids, r.accepted, r.new_ids) for r in again.records] == \
        [(r.proposed_ids, r.accepted, r.new_ids) for r in run.records]  # the same rounds, replayed
    assert other.slider(key="speculative_at").value == 2
    bad = app_test()
    bad.query_params = {**link, "drafter": "<b>oracle</b>"}
    bad.run()
    bad.switch_page(page("speculative")).run()
    assert not bad.exception and any("drafter=" in w.value and "ignored" in w.value for w in bad.warning)


def test_the_races_prompt_tokens_and_size_open_again_from_its_link():
    """The Race wrote no link either: its link now carries its prompt, its tokens and its model size (a race is
    measured again when opened: the settings come back, not the timings)."""
    at = app_test().run()
    at.switch_page(page("race")).run()
    prompt_box = next(t for t in at.text_area if t.key.startswith("race_prompt"))
    prompt_box.set_value("The dog ran to the park").run()
    at.number_input(key="race_steps").set_value(37).run()
    at.selectbox(key="race_size").set_value("26M").run()
    assert not at.exception, [e.value for e in at.exception]
    link = dict(at.query_params)
    assert (link["prompt"], link["tokens"], link["size"]) == ("The dog ran to the park", "37", "26M")
    other = app_test()
    other.query_params = link
    other.run()
    other.switch_page(page("race")).run()
    assert not other.exception and not other.error, [e.value for e in other.error]
    assert next(t for t in other.text_area if t.key.startswith("race_prompt")).value == "The dog ran to the park"
    assert other.number_input(key="race_steps").value == 37 and other.selectbox(key="race_size").value == "26M"
