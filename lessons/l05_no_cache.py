"""Lesson 5. Without the cache

Its first screen (1280x720, presenter mode) holds the claim, the stage of the slider's last step with the cache off
and the work per step beside it; what the cache saves and why the cost is quadratic fold below."""

from __future__ import annotations

import streamlit as st

from drawing import caveats
from drawing.latency import work_per_step_figure
from lessons.course import Course, show_stage
from physics import roofline
from topics.race.measure import cache_rule, cache_rule_sentence, race_frame
from ui.charts import chart
from ui.model import device_roof
from ui.presets import PROMPTS
from ui.style import scale
from ui.text import plain

TITLE = '5. Without the cache'


WORK_HEIGHT = 290  # the work-per-step chart beside the stage, before scale: both fit a projector's first screen


def show(course: Course) -> None:
    first = st.empty()  # the takeaway, once both modes are measured
    stage, work = st.columns([0.92, 1.08], gap="medium")
    with work:
        steps = st.slider("try it: decode steps (the stage shows the last one)", 5, 60, 30, 5, key="lesson5_steps",
                          persist_state="session")
    prompt = PROMPTS[0]["prompt"]
    rep = course.compare(prompt, steps + 1, 0)  # prefill + `steps` decode steps, each mode
    cache, nocache = rep.runs["cache"].records, rep.runs["nocache"].records
    note = caveats.compare_note(cache, nocache)
    if note:  # a busy server flipped the comparison: measure once more (a second or two), then say what remains
        rep = course.compare(prompt, steps + 1, 1)
        cache, nocache = rep.runs["cache"].records, rep.runs["nocache"].records
        note = caveats.compare_note(cache, nocache)
    with stage:  # the slider's last step, drawn: its passes timed once each (the measured comparison is `rep`, above)
        show_stage(course.greedy_run(prompt, decode_steps=steps, use_cache=False, repeats=1), steps,
                   enlarge="lesson5_enlarge")
    with work:
        fig = work_per_step_figure(cache, nocache, scale=scale(), note=note, height=WORK_HEIGHT)
        fig.update_layout(title_text="Work per step, and the time it took")  # whole in half the width
        chart(fig, key="lesson5_work")
    sum_q = {name: sum(t.q_len for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    flops = {name: sum(t.flops_estimate for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    decode_flops = {name: sum(t.flops_estimate for t in tr if t.phase == "decode")
                    for name, tr in (("cache", cache), ("nocache", nocache))}
    sp = rep.speedup
    course.takeaway(first, f"Without the cache: {'the same' if rep.identical else 'different'} tokens, "
                           f"{sum_q['nocache']} positions computed instead of {sum_q['cache']}, and "
                           f"×{sp.total_ratio:.1f} the decode time here"
                           + (", timed while the server was busy (the note below)." if note else "."))
    with st.expander("The numbers, in full: the work and the time, with and without the cache"):
        st.markdown("Without the cache nothing is kept between steps, so every decode step recomputes keys and "
                    "values for **all** positions so far. **The tokens come out the same; the work does not.** On "
                    "the stage, the red columns and rows are work done again.")
        st.markdown(f"Same tokens with and without the cache: **{'yes' if rep.identical else 'no'}** (largest logit "
                    f"difference {rep.max_logit_diff:.1g}). Over {len(cache)} forward passes (prefill and {steps} "
                    f"decode steps) the cached run computed **{sum_q['cache']} positions**; the uncached one "
                    f"**{sum_q['nocache']}**. Total work (estimate), the prefill included: "
                    f"{flops['nocache'] / flops['cache']:.1f}× more without the cache; over the {steps} decode steps "
                    f"alone, {decode_flops['nocache'] / decode_flops['cache']:.1f}×. Measured decode time, one run "
                    f"of each, its {steps} steps added up: {sp.nocache_total_ms:.0f} ms without the cache, "
                    f"{sp.cache_total_ms:.0f} ms with it (×{sp.total_ratio:.1f}; each step is a bar in the chart).")
    if note:
        st.warning(note + " (Measured twice.)", icon=":material/speed:")
    with st.expander("What the cache saves on this device and on an H100, and why the work grows as n²"):
        rule = cache_rule(race_frame(rep), sp.total_ratio, device_roof(), roofline.h100())
        if rule:
            st.markdown(plain(cache_rule_sentence(rule)))
        st.markdown("Step *i* without the cache computes about *s + i* positions, so *n* steps cost about "
                    "*n·s + n²/2* position-passes: **quadratic** in n. With the cache each step computes one: "
                    "**linear**. On a model this small, fixed per-step costs hide part of the gap in the measured "
                    "times; the Race page measures it at longer lengths.")
