"""What one "Next token" click costs in the step-through page (engine + script), via AppTest, and what a new
seed costs in lesson 6 once its story is made (the story is kept, so a seed reruns one sampled prefill).

Run by `python -m engine bench` (or alone: `python -m benchmarks.app_click`). The
context is brought to about 100 tokens first; the first click is a warm-up and
is dropped; the median of the rest is reported, once per view (only the chosen view
is built, so what a click costs depends on which one is shown). The stage is drawn on
every click. Not a test: a measurement.
"""

from __future__ import annotations

import json
import statistics
import sys

from benchmarks.records import AppClick, ViewClicks
from drawing.views import VIEWS  # the step page's seven views, default first: defined once
from engine.timing import timed
from ui.apptest import app_test, page

TEXT = ("Once upon a time, in a small house near the woods, there lived a little boy named Sam. Sam loved to "
        "explore. Every morning he put on his green hat and walked to the river to look for frogs. One sunny day, "
        "he found something strange by the water. It was a big blue box with a red bow. Sam looked at the box and "
        "wondered what was inside. He called his friend Mia and they opened it together.")




def clicks_with_view(prompt: str, view: str, clicks: int) -> list[float]:
    """Fresh session, the given view shown, Prefill, then timed Next-token clicks (first one dropped)."""
    at = app_test().run()
    at.text_input(key="step_prompt").set_value(prompt).run()
    at.session_state["step_view"] = view
    at.button(key="step_btn_prefill").click().run()
    times = []
    for _ in range(clicks):
        times.append(timed(at.button(key="step_btn_next").click().run, repeats=1, warmup=0).forward_ms)
    assert not at.exception, [e.value for e in at.exception]
    return times


def lesson6_seeds(seeds: int = 6) -> list[float]:
    """Lesson 6 opened (its story generated once, not timed), then a new seed set `seeds` times, each timed."""
    from lessons.page import TITLES

    at = app_test().run()
    at.switch_page(page("lessons"))
    at.session_state["lesson_pick"] = TITLES[5]
    at.run()
    times = []
    for seed in range(1, seeds + 1):
        times.append(timed(at.number_input(key="lesson6_seed").set_value(seed).run, repeats=1, warmup=0).forward_ms)
    assert not at.exception, [e.value for e in at.exception]
    return times


def measure(context: int = 100, clicks: int = 11) -> AppClick:
    from engine import load_model

    tok = load_model("default", warmup=False).tokenizer
    ids = tok(TEXT + " " + TEXT)["input_ids"][: context - 1 - clicks // 2]  # the middle click sees ~context
    prompt = tok.decode(ids, skip_special_tokens=True)
    by_view = {}
    for view in VIEWS:
        times = clicks_with_view(prompt, view, clicks)
        by_view[view] = ViewClicks(round(statistics.median(times[1:]), 1), round(times[0], 1))
    default = by_view[VIEWS[0]]
    return AppClick(context_tokens=len(ids) + 1 + clicks // 2, click_ms_median=default.median_ms,
                    warmup_click_ms=default.warmup_click_ms, by_view=by_view,
                    slowest_view=max(by_view, key=lambda v: by_view[v].median_ms),
                    lesson6_seed_ms=round(statistics.median(lesson6_seeds()[1:]), 1))


if __name__ == "__main__":
    json.dump(measure().to_dict(), sys.stdout)  # the JSON edge: the bench reads it back (AppClick.from_dict)
