"""Step through: prefill once, then one click per token, and watch each forward pass on the stage.

Thin page: read state -> call engine -> render. The run, its cursor and its buttons are ui/controller.py's;
the stage is drawing.stage (trace in, SVG out); the seven views are drawing/views.py, placed by
step/page_views.py. Any recorded step can be put back on screen (the scrubber, ← →), and the link in the address
bar carries it.
"""

import html
import json

import streamlit as st

from classroom.page import class_bar
from classroom.page_poll import held_back
from drawing.attention import hardest_look_back
from drawing.first_draw import blank_figure
from drawing.latency import traces_frame
from drawing.palette import legend_html
from drawing.stage_phone import stage_pictures
from drawing.views import VIEWS, StepContext
from engine import Stepper
from step.page_views import show_view
from ui.link_codec import MAX_PROMPT_CHARS, read_link
from ui.links import apply_values, write_link
from ui.presets import PROMPTS, SCENARIOS
from ui.setup import page_setup
from ui.sidebar import DEFAULTS, cache_toggle
from ui.step_state import SET_BY_CODE, set_by_code, step_controller
from ui.style import scale
from ui.text import error, warning

NO_SCENARIO = "a ready-made scenario…"  # the scenario box before a pick


def show() -> None:
    """The step page, drawn (pages/step_through.py is its door)."""
    settings, lm = page_setup("step_through", need_model=True)
    spec = lm.spec


    def new_run() -> Stepper:
        """A run of the prompt on screen with the sidebar's settings (the controller takes its first step: prefill)."""
        return Stepper(lm, st.session_state.get("step_prompt", ""), use_cache=settings.use_cache,
                       sampling=settings.sampling, max_new_tokens=settings.max_new_tokens,
                       stop_strings=settings.stop_strings)


    steps = step_controller(new_run)


    def load_scenario() -> None:
        """A ready-made run in one click: its settings go into the sidebar, then its steps replay (after a full rerun,
        so the sidebar's settings are the scenario's). Presenter mode stays as it was."""
        scenario = next((x for x in SCENARIOS if x["title"] == st.session_state.get("step_scenario")), None)
        if scenario is None:
            return
        st.session_state.update(DEFAULTS)  # start from the defaults, so nothing lingers from before
        values, problems = read_link(scenario["link"])
        st.session_state["link_problems"] = apply_values(values, problems)
        st.session_state.pop("step_replay", None)
        if scenario.get("view"):
            st.session_state["step_view"] = scenario["view"]
        st.session_state["step_focus"] = scenario.get("open")  # "look_back": open on the layer and head that do
        steps.queue_replay(int(values.get("steps", 0)), values.get("at"))


    def pick_preset(widget: str) -> None:
        preset = st.session_state["step_preset"] = st.session_state.get(widget)
        if preset is not None:
            st.session_state["step_prompt"] = next(p["prompt"] for p in PROMPTS if p["title"] == preset)


    def pick_head(widget: str) -> None:
        st.session_state["step_head"] = st.session_state.get(widget)


    # ------------------------------------------------------------------ the control bar and its rows


    def control_bar() -> None:
        # one row at 1280x720, the sidebar open too (presenter mode's larger text included): narrow gaps, and the
        # prompt box gives up width first (ui/style.py: it shrinks to 9rem before the row would wrap)
        bar = st.container(horizontal=True, vertical_alignment="bottom", gap="xsmall")
        bar.text_input("prompt", key="step_prompt",
                       persist_state="session", placeholder="Type a prompt, then Prefill (P)",
                       label_visibility="collapsed", width=250)
        steps.buttons(bar, first_help="Run the whole prompt through the model in one pass (P)",
                      next_help="One decode step: one more token (N)")
        cache_toggle(bar)


    def more(where) -> None:
        """Scenarios, preset prompts, the head on the stage and autoplay, folded away so the bar stays short."""
        ss = st.session_state
        ss.setdefault("step_head", 0)
        # The preset and the head are also set by code (a scenario, a link, a fork, the look-back focus), and a
        # closed popover's widgets never hear of it: the browser would send the old value back with the next click.
        # So their state lives in step_preset and step_head, and each widget's key carries `widgets_set_by_code`
        # (ui/step_state.py): a value set by code makes a new widget, drawn with that value.
        made = ss.get(SET_BY_CODE, 0)
        titles = [p["title"] for p in PROMPTS]
        with where.popover("More", icon=":material/tune:"):
            # a first entry, not index=None: a box with no default is clearable, and Escape (folding the popover
            # away) then cleared the pick just made, before it reached the server
            st.selectbox("scenario", [NO_SCENARIO] + [x["title"] for x in SCENARIOS], key="step_scenario",
                         persist_state="session", on_change=load_scenario)
            preset = ss.get("step_preset")
            st.selectbox("preset prompt", titles, index=titles.index(preset) if preset in titles else None,
                         key=f"step_preset.{made}", on_change=pick_preset, args=(f"step_preset.{made}",),
                         placeholder="(your own prompt)")
            st.number_input("head drawn on the stage", 0, spec.heads - 1, value=int(ss["step_head"]),
                            key=f"step_head.{made}", on_change=pick_head, args=(f"step_head.{made}",),
                            help="The head whose attention row(s) the stage draws")
            steps.autoplay(st)


    def scrub_row() -> None:
        """The scrubber, the layer the stage opens, and the folded extras."""
        row = st.container(horizontal=True, vertical_alignment="center", gap="small")
        if steps.latest > 0:
            row.slider("step", 0, steps.latest, key="step_at",
                       persist_state="session", label_visibility="collapsed", width=300,
                       help="Scrub through the recorded steps: 0 is the prefill (← →)")
        st.session_state.setdefault("step_layer", 0)
        if spec.layers <= 12:
            row.segmented_control("layer", list(range(spec.layers)), key="step_layer",
                                  persist_state="session", format_func=lambda x: f"layer {x}",
                                  label_visibility="collapsed", help="The layer opened on the stage")
        else:
            row.number_input("layer", 0, spec.layers - 1, key="step_layer", persist_state="session", width=100)
        more(row)


    def status(run: Stepper, at: int) -> None:
        t = run.records[at]
        hold = held_back(run)  # a question to the class holds a step back: the projector says nothing of it yet
        latest = steps.latest if hold is None else hold - 1
        new_tokens = len(run.generated_ids) if hold is None else hold  # each step made one token
        showing = "newest" if at == latest else (  # scrubbed back: the count above is the run's, this one the step's
            f"{latest - at} newer recorded; {at + 1} new token{'s' if at else ''} by this step")
        st.markdown(f"**{new_tokens} new token{'s' if new_tokens != 1 else ''}** ({max(0, new_tokens - 1)} from "
                    f"decode steps) · step **{at}** of {latest} ({t.phase}, {showing}) · KV cache "
                    f"**{t.kv_bytes:,} bytes**")
        if run.done and hold is None:
            st.markdown(f"**Finished**: {steps.stopped()}. Reset (X) to start again.")


    def context(run: Stepper, at: int) -> StepContext:
        t = run.records[at]
        ids = run.tokens
        return StepContext(records=tuple(run.records[: at + 1]), ids=tuple(ids), pieces=tuple(run.pieces()),
                           prompt_len=run.prompt_len, prompt=run.prompt, spec=spec,
                           text=lm.tokenizer.decode(ids[: t.kv_len + 1], skip_special_tokens=True),
                           layer=st.session_state.get("step_layer") or 0, head=st.session_state.get("step_head", 0),
                           scale=scale())


    def stage(c: StepContext, run: Stepper) -> None:
        st.html(stage_pictures(c.t, list(c.pieces), run.prompt_len, layer=c.layer, head=c.head))  # a phone's too
        st.html(f'<div class="dl-text" data-testid="dl-text">{html.escape(c.text)}</div>')  # the text so far


    def export(run: Stepper) -> None:
        """The run so far, to keep or to share: JSON (everything) and CSV (one row per step)."""
        c = st.container(horizontal=True, vertical_alignment="center")
        # callables: the files are only built when a button is clicked, never on a Next-token click
        c.download_button("Trace as JSON", lambda: json.dumps(run.report(), default=str, indent=1), "decode-lab-trace.json",
                          "application/json", key="step_export_json", on_click="ignore")
        c.download_button("Steps as CSV", lambda: traces_frame(run.records).to_csv(index=False), "decode-lab-steps.csv",
                          "text/csv", key="step_export_csv", on_click="ignore")
        c.caption("The JSON holds every step's phase, q_len, kv_len, token, per-layer shapes, KV bytes, timings and FLOPs "
                  "estimate; the link in the address bar replays this run and shows this step.")


    @st.fragment
    def stepping() -> None:
        """What a click changes: only this reruns on Next token, ◀ ▶ and the views."""
        if settings.use_cache != st.session_state.get("cache_on", True):
            st.rerun()  # the KV-cache switch sits in this fragment, but the settings (and the link) are the whole app's
        steps.app_rerun_if_asked()  # a scenario was picked in this fragment: the sidebar must take its settings first
        prompt = st.session_state.get("step_prompt", "")
        steps.sync((settings, prompt))
        if steps.replay_queued() and st.session_state.pop("step_focus", None) == "look_back" and steps.started:
            found = hardest_look_back(steps.run.records[steps.at], steps.run.tokens)  # computed from this run
            if found:
                st.session_state["step_layer"], st.session_state["step_head"] = found[0], found[1]
                set_by_code()
        control_bar()
        steps.run_to_end_if_asked(lambda: len(steps.run.generated_ids) / steps.run.max_new_tokens)
        run, at = steps.run, steps.at
        started = steps.started
        ss = st.session_state
        ss["step_layer"] = min(max(0, int(ss.get("step_layer") or 0)), spec.layers - 1)  # a link's, inside the model
        head = min(max(0, int(ss.get("step_head") or 0)), spec.heads - 1)  # a link's, inside the model
        if head != ss.get("step_head"):
            ss["step_head"] = head
            set_by_code()
        view = ss.get("step_view", "Attention")
        write_link(settings, prompt=prompt if len(prompt) <= MAX_PROMPT_CHARS else None,
                   steps=steps.latest if started else None, at=at if started and at != steps.latest else None,
                   view=view if started and view != "Attention" else None,  # the screen: its view, layer, head
                   layer=ss["step_layer"] or None, head=ss["step_head"] or None)
        class_bar(run, at)  # leading a class: every follower sees this step (nothing when no class is running)
        for problem in st.session_state.pop("link_problems", []):
            warning(problem)
        if said := steps.said():
            error(said)
        if notice := steps.notice():
            st.info(notice, icon=":material/replay:")
        if not started:
            more(st)
            st.info("Type a prompt (or pick a scenario under **More**), then press **Prefill** (P): the whole prompt goes "
                    "through the model in one forward pass, and the stage shows it.")
            with st.container(key="step_warm"):  # out of sight (ui/style.py CSS): the browser loads its chart library now
                st.plotly_chart(blank_figure(), key="step_warm_chart", config={"staticPlot": True})
            return
        scrub_row()
        c = context(run, at)
        left, right = st.columns([3, 2], gap="medium")
        with left:
            stage(c, run)
        with right:
            status(run, at)
            st.session_state.setdefault("step_view", "Attention")
            view = st.radio("view", VIEWS, key="step_view",
                            persist_state="session", horizontal=True, label_visibility="collapsed")
            show_view(view, c, run)
        st.html(legend_html())
        export(run)
        steps.autoplay_tick()


    st.session_state.setdefault("step_prompt", PROMPTS[0]["prompt"])
    stepping()
