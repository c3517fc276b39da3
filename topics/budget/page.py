"""The KV cache on a budget: quantize it or evict from it, and see what each costs in tokens, measured live.

Thin, as every page: read the controls -> topics.budget.measure -> topics.budget.draw. The only file of the topic
that imports streamlit; it never imports torch. pages/budget.py is its door (`show()`).
"""

from __future__ import annotations

import streamlit as st

from engine import DecodeLabError
from drawing.svg import picture_html
from engine.units import human_bytes
from topics.budget import draw, measure
from topics.budget.policies import POLICIES
from ui.setup import page_setup
from ui.style import scale
from ui.text import error

SCENARIOS = {  # one click: (policy, budget, what to look at); measured on the bundled model's held-out story
    "fp8 halves it for free": ("fp8", 64, "Bytes fall to under half and the texts never part: the older positions "
                                          "are rounded to 8 bits, not forgotten."),
    "a window forgets the name": ("window", 64, "The window holds the last 64 positions: the girl the story named "
                                                "early has fallen out, and a few tokens in the window's text gives "
                                                "her line to someone else."),
    "heavy hitters keep it": ("heavy", 64, "Heavy hitters keep the positions the model kept reading, next to a "
                                           "recent window: the name is still there, and the texts agree for longer. "
                                           "Teacher-forced, though, it agrees least: two measures, two verdicts."),
}
SWEEP_BUDGETS = (8, 16, 32, 64, 128)


def pick(name: str) -> None:
    policy, budget, _ = SCENARIOS[name]
    st.session_state["budget_policy"], st.session_state["budget_budget"] = policy, budget
    st.session_state["budget_scenario"] = name


@st.cache_data(max_entries=64, show_spinner=False)
def one_policy(_lm, model: str, policy: str, budget: int):
    """The policy and the full cache, side by side (cached per model, policy and budget: a rerun is free)."""
    return measure.compare_policies(_lm, ("full", policy), budget, new_tokens=64)


@st.cache_resource(max_entries=8, show_spinner=False)
def every_policy(_lm, model: str):
    """Every policy at every budget, teacher-forced: the divergence charts (once per model per server)."""
    return measure.sweep(_lm, SWEEP_BUDGETS)


@st.cache_resource(max_entries=8, show_spinner=False)
def sinks(_lm, model: str):
    return measure.sink_mass(_lm)


def show() -> None:
    """The budget page, drawn (pages/budget.py is its door)."""
    st.title("The KV cache on a budget")
    settings, lm = page_setup("budget", need_model=True)
    st.caption("When the cache does not fit, real systems **quantize** it (fewer bits a number) or **evict** from it "
               "(fewer positions). One budget B for both: the newest B positions in full precision and the rest "
               "rounded, or at most B positions held. Measured against the full cache on the same text: bytes from "
               "the tensors, the damage teacher-forced on a held-out story and free-running.")

    limit = min(lm.spec.max_positions or 256, 256)
    st.session_state.setdefault("budget_policy", "heavy")
    st.session_state.setdefault("budget_budget", 64)
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    bar.selectbox("policy", list(POLICIES), key="budget_policy", width=150,
                  help="\n\n".join(f"**{k}**: {v}" for k, v in POLICIES.items()))
    bar.slider("budget B (positions)", 1, limit, key="budget_budget", width=300)
    for name in SCENARIOS:
        bar.button(name, key=f"budget_scenario_{name}", on_click=pick, args=(name,))
    policy, budget = st.session_state["budget_policy"], int(st.session_state["budget_budget"])
    note = SCENARIOS.get(st.session_state.get("budget_scenario"), (None, None, ""))[2]
    if note and SCENARIOS[st.session_state["budget_scenario"]][:2] == (policy, budget):
        st.info(note, icon=":material/lightbulb:")

    try:
        with st.spinner(f"Measuring {policy} at a budget of {budget} against the full cache…"):
            rows = one_policy(lm, lm.spec.name, policy, budget)
    except DecodeLabError as e:
        error(str(e))
        return
    full, row = rows[0], rows[-1]

    left, right = st.columns([1, 1], gap="medium")
    with left:
        st.html(picture_html(draw.cache_svg(row.cache), f"the {policy} cache per layer after the held-out text",
                             "budget-cache"))
        parts = "never" if row.parting_step is None else f"at step **{row.parting_step}**"
        st.markdown(f"Holds **{human_bytes(row.cache.bytes_held)}** of the full cache's "
                    f"{human_bytes(row.cache.bytes_full)} (**{row.cache.ratio:.0%}**, measured) · top-1 agreement "
                    f"**{row.forced.agreement:.1%}** · mean KL **{row.forced.kl_mean:.4f}** nats · the free-running "
                    f"texts part {parts}",
                    help=f"Agreement and KL are teacher-forced: each next token against the full cache's, over "
                         f"{len(row.forced.agree)} steps of a held-out story; KL(full ‖ policy).")
    with right:
        measured_here = st.session_state.get("budget_sweep")
        kept = None if measured_here else measure.recorded_sweep(lm)
        if measured_here or kept is None:
            if not measured_here:
                st.button("Measure every policy at every budget (a minute on a laptop CPU)", key="budget_sweep_go",
                          on_click=lambda: st.session_state.update(budget_sweep=True), type="primary")
                st.dataframe(draw.policy_table(rows), hide_index=True)
                points = None
            else:
                with st.spinner("Every policy at budgets " + ", ".join(map(str, SWEEP_BUDGETS)) + "…"):
                    points = every_policy(lm, lm.spec.name)
                source = "measured on this server"
        else:
            points, about = kept
            source = (f"recorded on {about['device']}, {about['measured_at'][:10]}: agreement and KL are teacher-forced "
                      "on a fixed text, so they do not depend on the machine")
            st.button("Measure them on this server", key="budget_sweep_go",
                      on_click=lambda: st.session_state.update(budget_sweep=True))
        if points is not None:
            st.plotly_chart(draw.divergence_fig(points, scale=scale()), key="budget_divergence")
            at = budget if budget in SWEEP_BUDGETS else 64
            st.caption(f"Eviction policies by agreement at a budget of {at}: " +
                       " > ".join(measure.ranking(points, budget=at)) +
                       f" (the CLI's `--policy all` ranks the same way); {source}.")

    st.html(draw.texts_html(row))
    ms, low, high = row.greedy.timing()
    fms, flow, fhigh = full.greedy.timing()
    st.caption(f"Time per decode step, median of {len(row.greedy.step_ms) - row.greedy.warmup_steps} steps after "
               f"{row.greedy.warmup_steps} warm-up (quartiles): {policy} {ms:.1f} ms ({low:.1f}–{high:.1f}), full "
               f"{fms:.1f} ms ({flow:.1f}–{fhigh:.1f}). On a small model a step is overhead-bound: rounding and "
               "scoring cost time here; on a big one, reading fewer bytes is what makes a step faster.")

    with st.expander("Positions keep their rotation; the attention sink, measured"):
        st.markdown(
            "A held key keeps the RoPE rotation of the position it was written at, and the next token is numbered by "
            "how many positions the run has seen: distances stay the true ones, with gaps where positions were "
            "dropped. **StreamingLLM** does it differently: it caches keys before RoPE and rotates them by their slot "
            "in the cache, so the model never sees a distance longer than its window.\n\n"
            "Large trained models (GPT-2, Llama) pour attention onto the first position, a **sink**, and collapse "
            "when it is evicted: on Llama-2-13B StreamingLLM measured a perplexity of 5,158 with a window alone and "
            "5.40 with 4 sinks kept. The bundled models have no sink: below, the weight on position 0 is about what "
            "a uniform reader would give it, so *sinks* behaves like a plain *window* on them. A model loaded from "
            "the hub shows its own measurement here.")
        st.plotly_chart(draw.sink_fig(sinks(lm, lm.spec.name), lm.spec.name, scale=scale()), key="budget_sinks")
