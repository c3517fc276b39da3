"""The KV cache on a budget: quantize it or evict from it, and see what each costs in tokens, measured live.

Thin, as every page: read the controls -> topics.budget.measure -> topics.budget.draw. The only file of the topic
that imports streamlit; it never imports torch. pages/budget.py is its door (`show()`).
"""

from __future__ import annotations

import streamlit as st

from drawing.svg import picture_html
from engine import DecodeLabError
from engine.paths import ROOT
from topics.budget import draw, measure
from topics.budget.policies import CAPPED, POLICIES
from topics.budget.records import SHORT_DTYPE
from topics.budget.stories import recorded_stories
from ui.charts import chart
from ui.links import write_link
from ui.setup import page_setup
from ui.style import scale
from ui.text import error, warning

SCENARIOS = {  # one click: (the policies it compares, the first picked; budget; what to look at); the numbers beside
    # it are measured, never written here
    "fp8 forgets nothing": (("fp8",), 64, "The older positions are rounded to 8 bits, not forgotten. Read the "
                                               "bytes twice: against this model's own full cache, and against the "
                                               "bf16 cache a server would hold."),
    "a window drops the start": (("window",), 64, "The window holds the last 64 positions: what the story said "
                                               "before them is gone. Watch where the two texts part."),
    "two heavy scores": (("heavy", "heavy-avg"), 64, "H2O's plain sum favours the oldest positions (more queries have "
                                               "read them). Switch the policy to heavy-avg, kvpress's score per "
                                               "query that could see a position, and compare: the same rule, two "
                                               "scores."),
}
SWEEP_BUDGETS = measure.SWEEP_BUDGETS


def pick(name: str) -> None:
    policies, budget, _ = SCENARIOS[name]
    st.session_state["budget_policy"], st.session_state["budget_budget"] = policies[0], budget
    st.session_state["budget_scenario"] = name


def which(lm) -> tuple:
    """What a kept measurement is of: the model, where it runs and in which dtype (bf16 is another measurement)."""
    return (lm.spec.name, str(lm.device), lm.dtype_name)


@st.cache_data(max_entries=64, show_spinner=False)
def one_policy(_lm, model: tuple, policy: str, budget: int):
    """The policy and the full cache, side by side (cached per model, its device and dtype, policy and budget: a
    rerun is free; another dtype is another measurement)."""
    return measure.compare_policies(_lm, ("full", policy), budget, new_tokens=64)


@st.cache_resource(max_entries=8, show_spinner=False)
def every_policy(_lm, model: tuple):
    """Every policy at every budget, teacher-forced: the divergence charts (once per model per server)."""
    return measure.sweep(_lm, SWEEP_BUDGETS)


@st.cache_resource(max_entries=8, show_spinner=False)
def sinks(_lm, model: tuple):
    return measure.sink_mass(_lm)


def show() -> None:
    """The budget page, drawn (pages/budget.py is its door)."""
    st.title("The KV cache on a budget")
    settings, lm = page_setup("budget", need_model=True)
    st.caption("When the cache does not fit, real systems **quantize** it (fewer bits a number) or **evict** from it "
               "(fewer positions). One budget B for both: the newest B positions in full precision and the rest "
               "rounded, or at most B positions held (snap, as published, holds B prompt positions plus every "
               "decoded one). Measured against the full cache on the same text: bytes from "
               "the tensors, the damage teacher-forced on a held-out story and free-running.")

    limit = min(lm.spec.max_positions or 256, 256)
    wanted_policy, wanted_budget = st.session_state.pop("budget_wanted", (None, None))  # a link's, checked here
    if wanted_policy is not None:
        if wanted_policy in POLICIES:
            st.session_state["budget_policy"] = wanted_policy
        else:
            warning(f"link parameter policy={wanted_policy[:40]!r} ignored: the policies are {', '.join(POLICIES)}")
    if wanted_budget is not None:
        st.session_state["budget_budget"] = min(int(wanted_budget), limit)
    st.session_state.setdefault("budget_policy", "heavy")
    st.session_state.setdefault("budget_budget", 64)
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    bar.selectbox("policy", list(POLICIES), key="budget_policy", persist_state="session", width=150,
                  help="\n\n".join(f"**{k}**: {v}" for k, v in POLICIES.items()))
    bar.slider("budget B (positions)", 1, limit, key="budget_budget", persist_state="session", width=260)
    for name in SCENARIOS:
        bar.button(name, key=f"budget_scenario_{name}", on_click=pick, args=(name,))
    policy, budget = st.session_state["budget_policy"], int(st.session_state["budget_budget"])
    write_link(settings, policy=policy, budget=budget)  # the address bar reopens this policy at this budget
    measured_here = st.session_state.get("budget_sweep")  # every policy: measured here, or recorded in this dtype
    kept = None if measured_here else measure.recorded_sweep(lm)
    if kept is not None and kept.dtype != lm.dtype_name:  # another dtype's damage is not this model's
        kept = None
    policies, at_budget, note = SCENARIOS.get(st.session_state.get("budget_scenario"), ((), None, ""))
    if note and policy in policies and budget == at_budget:  # the tip stays while its comparison is followed
        if len(policies) > 1:  # its policies' figures side by side: switching to the other one took the first away
            try:
                said = [f"{p} {one_policy(lm, which(lm), p, budget)[-1].forced.agreement:.1%}" for p in policies]
                note += f" Top-1 agreement at B = {budget} on this story: {', '.join(said)} (teacher-forced)."
            except DecodeLabError:  # the policy on screen says why, in its own message below
                pass
            note += (" The chart *Damage against the budget* holds both lines." if measured_here or kept else
                     " Measure every policy (the button on the right) to draw both lines.")
        st.info(note, icon=":material/lightbulb:")

    try:
        with st.spinner(f"Measuring {policy} at a budget of {budget} against the full cache…"):
            rows = one_policy(lm, which(lm), policy, budget)
    except DecodeLabError as e:
        error(str(e))
        return
    full, row = rows[0], rows[-1]
    spread = recorded_stories(lm)  # every story with its spread, where recorded for this model

    left, right = st.columns([1, 1], gap="medium")
    with left:
        st.html(picture_html(draw.cache_svg(row.cache, width=draw.COLUMN_W),
                             f"the {policy} cache per layer after the held-out text", "budget-cache",
                             phone=draw.cache_svg(row.cache, width=draw.PHONE_W)))
        parts = "never part" if row.parting_step is None else f"part at step **{row.parting_step}**"
        st.markdown(f"{draw.bytes_words(row)} · top-1 agreement **{row.forced.agreement:.1%}** · mean KL "
                    f"**{row.forced.kl_mean:.4f}** nats · the free-running texts {parts}",
                    help=f"Agreement and KL are teacher-forced: each next token against the full cache's, over "
                         f"{len(row.forced.agree)} steps of a held-out story; KL(full ‖ policy). {POLICIES[policy]}.")
    with right:
        if measured_here or kept is None:
            if not measured_here:
                st.button("Measure every policy at every budget (a minute on a laptop CPU)", key="budget_sweep_go",
                          on_click=lambda: st.session_state.update(budget_sweep=True), type="primary")
                st.dataframe(draw.policy_table(rows), hide_index=True)
                points = None
            else:
                with st.spinner("Every policy at budgets " + ", ".join(map(str, SWEEP_BUDGETS)) + "…"):
                    points = every_policy(lm, which(lm))
                source = "measured on this server"
        else:
            points = kept.points
            source = (f"recorded in {SHORT_DTYPE.get(kept.dtype, kept.dtype)} on {kept.device}, "
                      f"{kept.measured_at[:10]}: agreement and KL are teacher-forced on a fixed text, so they do not "
                      "depend on the machine")
        if points is not None:
            chart(draw.divergence_fig(points, scale=scale()), "budget_divergence")
            at = min(SWEEP_BUDGETS, key=lambda b: (abs(b - budget), b))  # the chart's budget nearest the slider's
            st.caption(f"Eviction policies holding {at} positions"
                       + ("" if at == budget else f" (the sweep's budget nearest the slider's {budget})")
                       + ", by agreement at that budget on one held-out text "
                       + ("(no interval: every story, with its spread, below; " if spread is not None else
                          "(one text, no interval; ")
                       + "=: the same agreement, the lower KL first): "
                       + measure.ranking_words(points, CAPPED, budget=at) + f" (the CLI's `--policy all` ranks the same way; snap, SnapKV as published, holds {at} "
                       f"prompt positions plus every decoded one); {source}.")
        if kept is not None and not measured_here:  # under the chart: the recording first, measuring it again second
            st.button("Measure them on this server", key="budget_sweep_go",
                      on_click=lambda: st.session_state.update(budget_sweep=True))

    st.html(draw.texts_html(row))
    st.caption(draw.step_words(row, full))
    st.page_link(str(ROOT / "pages" / "scale.py"), icon=":material/speed:",
                 label="What it buys in time: a decode step against the cache's bytes, evicted and full (Scale page, "
                       "Bytes are time)")

    if spread is not None:  # the damage over several stories, with its spread: recorded (a few minutes to measure)
        st.subheader(f"Every story: {spread.stories} held-out stories, fp32 and bf16")
        chart(draw.stories_fig(spread, scale=scale()), "budget_stories")
        st.markdown(draw.stories_words(spread, CAPPED))
        st.dataframe(draw.stories_table(spread), hide_index=True)
        st.caption(f"Recorded on {spread.device}, {spread.measured_at[:10]} (`{spread.command}`); teacher-forced "
                   "figures do not depend on the machine's speed.")

    with st.expander("A held key keeps its position; the attention sink, measured"):
        st.markdown(
            ("This model adds a learned position embedding at its input (GPT-2's table), so a held key keeps the "
             "position it was written at inside its own numbers; the next token is numbered by how many positions "
             "the run has seen." if lm.spec.position_table else
             "A held key keeps the RoPE rotation of the position it was written at, and the next token is numbered "
             "by how many positions the run has seen: distances stay the true ones, with gaps where positions were "
             "dropped.")
            + " **StreamingLLM** does it differently for RoPE models: it caches keys before RoPE and rotates them by "
            "their slot in the cache, so the model never sees a distance longer than its window.\n\n"
            "Large trained models (GPT-2, Llama) pour attention onto the first position, a **sink**, and collapse "
            "when it is evicted: on Llama-2-13B StreamingLLM measured a perplexity of 5,158 with a window alone and "
            "5.40 with 4 sinks kept. Below, this model's own measurement: a bar per layer (the heads' mean) and a "
            "dot per head, against a uniform reader's weight. A model loaded from the hub shows its own.")
        sink_rows = sinks(lm, which(lm))
        chart(draw.sink_fig(sink_rows, lm.spec.name, scale=scale()), "budget_sinks")
        st.caption(draw.sink_words(sink_rows))
