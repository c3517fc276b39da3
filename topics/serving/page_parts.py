"""What the Serving page and lesson 10 both show: a serving run's pool, its pass, its timeline, its numbers.

Pictures come from topics/serving/draw.py (records in, SVG out), shown as <img> like the stage: each drawn twice,
for the page's width and for a phone's (ui/style.py shows the one that fits the screen).
"""

from __future__ import annotations

import numbers
from functools import partial

import pandas as pd
import streamlit as st

from drawing.stage import stage_html
from engine.generate.serving import RequestSpec, ServingRun
from engine.generate.serving.run import MAX_REQUESTS
from topics.serving import draw as draw
from topics.serving.measure import prefix_skipped
from ui.text import error

MAX_OWN_NEW_TOKENS = 256  # a typed request's max new tokens: the table's own limit, and the check's
MAX_OWN_ARRIVAL = 1000  # the step a typed request may arrive at, at the latest
MAX_PAGE_REQUESTS = 16  # a browser session serves at most this many requests in one run (the engine caps at 64)


def pictures(run: ServingRun, at: int) -> None:
    """The block pool and tables beside the step's one pass and the queue; the timeline under both."""
    step = run.records[at]
    left, right = st.columns([1, 1], gap="small")
    with left:
        st.html(_whole(partial(draw.pool_svg, step, run.num_blocks, run.page_size), pool_alt(step, run), "dl-pool"))
    with right:
        st.html(_whole(partial(draw.pass_svg, step, run.lm.spec.d_model), pass_alt(step), "dl-pass"))
    with st.container(key="serve_timeline"):
        st.html(_whole(partial(draw.timeline_svg, run.records, [r.id for r in run.requests], at, slots=run.max_seqs),
                       f"timeline of {len(run.records)} engine steps, step {at} marked", "dl-timeline"))


def chunking_result(result: dict) -> None:
    """The chunked-prefill comparison (topics.serving.measure.chunking_comparison): its table, and the timelines
    of the two runs the table was read from, so the stall the table reports is the one the picture shows."""
    st.table(draw.chunking_frame(result).set_index("chunked prefill"))
    span = max(len(result.on.steps), len(result.off.steps))  # both timelines on one scale, as the batching ones
    for way in ("on", "off"):
        st.markdown(f"**Chunked prefill {way}**")
        steps = getattr(result, way).steps
        st.html(_whole(partial(draw.timeline_svg, list(steps), list(getattr(result, way).ids), -1, span=span),
                       f"timeline of {len(steps)} engine steps, chunked prefill {way}", f"dl-timeline-{way}"))
    st.caption(draw.chunking_sentence(result))


def batching_result(result) -> None:
    """The queue served with continuous and static batching (topics.serving.measure.batching_comparison): its table,
    and both runs' timelines with their batch slots, so the idle slots the table counts are the ones drawn."""
    st.table(draw.batching_frame(result).set_index("batching"))
    st.markdown(draw.batching_sentence(result))
    span = max(len(result.continuous.steps), len(result.static.steps))
    st.caption(f"Both timelines are drawn to one scale, {span} engine steps across: the shorter run ends where its "
               "steps end.")
    for way in (result.continuous, result.static):
        st.markdown(f"**{way.batching.capitalize()} batching**: {way.engine_steps} engine steps, "
                    f"{way.tokens_per_s:,.0f} tokens/s")
        st.html(_whole(partial(draw.timeline_svg, list(way.steps), list(result.ids), -1, slots=result.slots, span=span),
                       f"timeline of {len(way.steps)} engine steps, {way.batching} batching, {result.slots} batch slots",
                       f"dl-timeline-{way.batching}"))


def _whole(picture, alt: str, testid: str) -> str:
    """A serving picture as <img>s, like the stage: `picture(width=...)` drawn for the column of a wide screen and
    again for a phone's (draw.PHONE), which ui/style.py shows instead on a phone: whole, its lines wrapped and its
    smallest text 11 px, so nothing scrolls sideways. The wide one comes first."""
    return (f'<div class="dl-serve" data-testid="{testid}">'
            f'{stage_html(picture(), alt, phone=picture(width=draw.PHONE))}</div>')


def pool_alt(step, run: ServingRun) -> str:
    saved = sum(len(t) for _, t in step.tables) - step.blocks_used
    return (f"block pool after step {step.step}: {step.blocks_used} of {run.num_blocks} blocks used, "
            f"{step.blocks_shared} shared ({saved} blocks saved by sharing), {step.blocks_cached} cached (free to "
            f"evict), {step.blocks_free - step.blocks_cached} free")


def pass_alt(step) -> str:
    parts = ", ".join(f"{r.id} {r.phase} {r.q_len}" for r in step.rows) or "no pass"
    return f"step {step.step}: one forward pass of {step.tokens} tokens: {parts}"


def summary(run: ServingRun, at: int) -> str:
    """One line for the status bar: what the run has done up to the step shown."""
    step = run.records[at]
    done = sum(1 for _, s in step.statuses if s == "done")
    skipped = prefix_skipped(run.records[: at + 1])  # the same count the sharing sentence says
    preempted = sum(len(s.preempted) for s in run.records[: at + 1])
    return (f"step **{at}** of 0–{len(run.records) - 1} · {done}/{len(run.requests)} requests done · positions "
            f"skipped by sharing: **{skipped}** · preemptions: **{preempted}**")


def requests_editor(key: str, default: list[RequestSpec]) -> list[RequestSpec] | None:
    """A table of requests a user can edit: prompt, max new tokens, arrival step. None (and a message) if bad."""
    frame = pd.DataFrame([{"prompt": r.prompt, "max_new_tokens": r.max_new_tokens, "arrive": r.arrive}
                          for r in default])
    edited = st.data_editor(frame, key=key, num_rows="dynamic", width="stretch", hide_index=True,
                            column_config={"prompt": st.column_config.TextColumn("prompt", max_chars=2000),
                                           "max_new_tokens": st.column_config.NumberColumn("max new tokens",
                                                                                           min_value=1,
                                                                                           max_value=MAX_OWN_NEW_TOKENS,
                                                                                           step=1),
                                           "arrive": st.column_config.NumberColumn("arrives at step", min_value=0,
                                                                                   max_value=MAX_OWN_ARRIVAL, step=1)})
    rows = [row for row in edited.to_dict("records") if isinstance(row.get("prompt"), str) and row["prompt"].strip()]
    if len(rows) > MAX_PAGE_REQUESTS:
        error(f"{len(rows)} requests is more than one run may serve on this page ({MAX_PAGE_REQUESTS}).")
        return None
    for n, row in enumerate(rows, 1):
        for column, label, low, high in (("max_new_tokens", "max new tokens", 1, MAX_OWN_NEW_TOKENS),
                                         ("arrive", "arrives at step", 0, MAX_OWN_ARRIVAL)):
            value = row.get(column)
            whole = isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer()
            if not whole or not low <= value <= high:
                error(f"Every request needs a whole number of max new tokens (1–{MAX_OWN_NEW_TOKENS}) and an "
                      f"arrival step (0–{MAX_OWN_ARRIVAL:,}): request {n}'s {label} is {_cell(value)}.")
                return None
    return [RequestSpec(str(r["prompt"]), int(r["max_new_tokens"]), int(r["arrive"])) for r in rows]


def _cell(value) -> str:
    """A cell's value as the table showed it: blank, or the number typed (never rounded)."""
    if value is None or (isinstance(value, float) and value != value):
        return "blank"
    return f"{float(value):g}" if isinstance(value, numbers.Real) else str(value)


def new_serving_run(lm, requests: list[RequestSpec], sizing: dict, sampling) -> ServingRun:
    """A new run of these requests, capped for a browser session; DecodeLabError (a plain message) if refused."""
    return ServingRun(lm, requests, sampling=sampling, max_requests=min(MAX_REQUESTS, MAX_PAGE_REQUESTS), **sizing)
