"""What one "Next token" click costs in the step-through page (engine + script), via AppTest.

Run by `python -m engine bench` (or alone: `python -m benchmarks.app_click`). The
context is brought to about 100 tokens first; the first click is a warm-up and
is dropped; the median of the rest is reported. Not a test: a measurement.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from tests.appdriver import app_test

TEXT = ("Once upon a time, in a small house near the woods, there lived a little boy named Sam. Sam loved to "
        "explore. Every morning he put on his green hat and walked to the river to look for frogs. One sunny day, "
        "he found something strange by the water. It was a big blue box with a red bow. Sam looked at the box and "
        "wondered what was inside. He called his friend Mia and they opened it together.")


def measure(context: int = 100, clicks: int = 11) -> dict:
    from engine import load_model

    tok = load_model("default", warmup=False).tokenizer
    ids = tok(TEXT)["input_ids"][: context - clicks // 2]
    prompt = tok.decode(ids, skip_special_tokens=True)
    at = app_test().run()
    at.text_area(key="step_prompt").set_value(prompt).run()
    at.button(key="step_btn_prefill").click().run()
    times = []
    for _ in range(clicks):
        t0 = time.perf_counter()
        at.button(key="step_btn_next").click().run()
        times.append((time.perf_counter() - t0) * 1e3)
    assert not at.exception, [e.value for e in at.exception]
    kept = times[1:]  # the first click is a warm-up
    return {"context_tokens": len(ids) + clicks, "click_ms_median": statistics.median(kept),
            "click_ms_all": [round(t, 1) for t in kept], "warmup_click_ms": round(times[0], 1)}


if __name__ == "__main__":
    json.dump(measure(), sys.stdout)
