"""Sentences held to the numbers beside them: a cause is named only where the measurement supports it, a rule is
written as words a class reads, and a tie is called a tie."""

from __future__ import annotations

from drawing.latency import ttft_tpot_sentence
from topics.race.measure import Growth, GrowthFit, headline
from topics.serving.draw import _faster


def test_the_per_token_gap_is_not_put_on_weight_reads_alone_where_the_step_is_overhead_bound():
    """The Latency view said 'because the prefill shares each weight it reads' beside a decode step it called
    overhead-bound (5 % of the bandwidth): what a prefill shares is every fixed cost of a pass, weights among them."""
    said = ttft_tpot_sentence({"prompt_tokens": 19, "ttft_ms": 6.0, "tpot_ms": 3.0, "prefill_ms_per_token": 0.3})
    assert "×10" in said and "fixed costs" in said and "launching its kernels" in said
    assert "shares each weight" not in said


def test_a_race_whose_time_grows_slower_than_its_work_does_not_blame_fixed_costs_alone():
    """The 112 M race measured ×4.7 against the rule's ×5.0 (weight reads, not overhead) and still said 'fixed
    per-step costs… still dominate'."""
    said = headline(Growth(GrowthFit(1.02, 0.98, 1.06), GrowthFit(1.45, 1.40, 1.50)))
    assert "measurably grows faster" in said and "reading the weights" in said and "rule below" in said
    assert "still dominate" not in said


def test_a_tie_in_throughput_is_called_a_tie_not_x1_00_faster():
    assert _faster(100.0, 100.3, "continuous", "static") == "continuous and static at the same rate (×1.00)"
    assert _faster(121.0, 100.0, "continuous", "static") == "continuous ×1.21 faster"
    assert _faster(100.0, 125.0, "continuous", "static") == "static ×1.25 faster"


def test_the_next_token_view_says_how_the_token_was_chosen_in_words(bundled_lm):
    """'Chosen: ·the (id 262) by sampled (temperature 1.2…)' read as a typo on a projector."""
    from drawing.views import VIEWS, StepContext, view_blocks
    from engine import Sampling, Stepper

    for sampling in (Sampling(greedy=True), Sampling(greedy=False, temperature=1.2, top_k=40, seed=7)):
        run = Stepper(bundled_lm, "Once upon a time", sampling=sampling, max_new_tokens=3)
        run.prefill()
        t = run.decode()
        ctx = StepContext(records=tuple(run.records), ids=tuple(run.tokens), pieces=tuple(run.pieces()),
                          prompt_len=run.prompt_len, prompt=run.prompt, spec=bundled_lm.spec, text="", layer=0,
                          head=0, scale=1.0)
        chosen = next(b.value for b in view_blocks(VIEWS[1], ctx) if str(b.value).startswith("Chosen:"))
        assert f"(id {t.token_id}), {sampling.describe()}." in chosen and " by " not in chosen


def test_the_prefill_lesson_judges_its_busy_note_from_the_prefill_it_quotes(monkeypatch):
    """Lesson 2's busy warning cited 'step 1' (a decode step the lesson never shows) in a lesson about the prefill."""
    from lessons import course
    from tests.test_lessons import lesson

    judged = []
    monkeypatch.setattr(course.caveats, "latency_note", lambda traces, *_: judged.append([t.phase for t in traces]))
    lesson(2)
    assert judged and all(phases == ["prefill"] for phases in judged), judged
