"""Step through: prefill once, then one click per token, and watch each forward pass on the stage.

Thin page: read state -> call engine -> render. The stage is engine.draw.stage (trace in, SVG out);
every chart comes from engine.draw.figures. Any recorded step can be put back on screen (the
scrubber, ← →); the views follow it, and the link in the address bar carries it.
"""

import html
import json
import time

import streamlit as st
from streamlit.errors import StreamlitAPIException

from engine import DecodeLabError, Stepper
from engine.draw import figures as fig
from engine.generate.compare import kv_reuse
from engine.load.device import release_memory
from engine.errors import Busy
from engine.share import MAX_PROMPT_CHARS, read_link
from engine.draw.stage import caption, stage_html, stage_svg
from engine.draw.warm import blank_figure
from ui.follow import class_bar
from ui.frame import (DEFAULTS, PROMPTS, SCENARIOS, apply_values, cache_toggle, error, frame, plain, scale,
                          warning, write_link)

settings, lm = frame(__file__)
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()
spec = lm.spec
VIEWS = ["Attention", "Next token", "Matmuls", "Shapes", "KV cache", "Latency", "Tokens"]
BUSY_WAITS = (0.5, 1, 2, 4, 8)  # seconds between retries when the server is busy: back off, never spin
STEP_COLUMNS = ["step", "phase", "q_len", "kv_len", "token", "latency_ms"]  # the Latency view's table (the CSV has all)


# ------------------------------------------------------------------ run state


def stepper() -> Stepper | None:
    return st.session_state.get("step_stepper")


def drop_run() -> None:
    old = st.session_state.pop("step_stepper", None)
    if old is not None:
        old.free()
        release_memory()
    st.session_state["step_autoplay"] = False


def do(action) -> bool:
    """Run one engine action; a refusal becomes a plain message on the page, never a traceback."""
    try:
        action()
        return True
    except DecodeLabError as e:
        st.session_state["step_error"] = str(e)
        return False


def start() -> None:
    run = Stepper(lm, st.session_state.get("step_prompt", ""), use_cache=settings.use_cache, sampling=settings.sampling,
                max_new_tokens=settings.max_new_tokens, stop_strings=settings.stop_strings)
    st.session_state["step_stepper"] = run
    run.prefill()
    st.session_state["step_at"] = 0


def latest(run: Stepper | None) -> int:
    return len(run.traces) - 1 if run is not None and run.traces else -1


def next_token() -> None:
    """Decode one more token and show it (from wherever the scrubber was)."""
    run = stepper()
    if do(run.decode):
        st.session_state["step_at"] = latest(run)


def forward() -> None:
    """→: replay the next recorded step, or at the newest one compute a new token."""
    run = stepper()
    if run is None or not run.traces:
        do(start)
    elif st.session_state.get("step_at", 0) < latest(run):
        st.session_state["step_at"] += 1
    elif not run.done:
        next_token()


def back() -> None:
    st.session_state["step_at"] = max(0, st.session_state.get("step_at", 0) - 1)


def load_scenario() -> None:
    """A ready-made run in one click: its settings go into the sidebar, then its steps replay."""
    scenario = next((x for x in SCENARIOS if x["title"] == st.session_state.get("step_scenario")), None)
    if scenario is None:
        return
    st.session_state.update(DEFAULTS)  # start from the defaults, so nothing lingers from before
    values, problems = read_link(scenario["link"])
    st.session_state["link_problems"] = apply_values(values, problems)
    if scenario.get("view"):
        st.session_state["step_view"] = scenario["view"]
    drop_run()


def pick_preset() -> None:
    preset = st.session_state.get("step_preset")
    if preset is not None:
        st.session_state["step_prompt"] = next(p["prompt"] for p in PROMPTS if p["title"] == preset)


def replay(steps: int) -> None:
    """A shared link said 'prefill, then this many Next-token clicks': do exactly that."""
    if not do(start):
        return
    run = stepper()
    for _ in range(steps):
        if run.done or not do(run.decode):
            break
    at = st.session_state.pop("step_at_wanted", None)
    st.session_state["step_at"] = latest(run) if at is None else max(0, min(at, latest(run)))


def run_to_end(run: Stepper) -> None:
    """Decode until the run stops; when the server is busy, wait (longer each time) and say so."""
    bar = st.progress(0.0, text="running…")
    waits = list(BUSY_WAITS)
    while not run.done:
        try:
            run.decode()
        except Busy as e:
            if not waits:
                st.session_state["step_error"] = f"{e} Run to end stopped; press it again when the class is quieter."
                break
            pause = waits.pop(0)
            bar.progress(len(run.generated_ids) / run.max_new_tokens, text=f"server busy: waiting {pause:g} s…")
            time.sleep(pause)
            continue
        except DecodeLabError as e:
            st.session_state["step_error"] = str(e)
            break
        waits = list(BUSY_WAITS)
        bar.progress(len(run.generated_ids) / run.max_new_tokens, text=f"{len(run.generated_ids)} tokens")
    st.session_state["step_at"] = latest(run)
    bar.empty()


# ------------------------------------------------------------------ the control bar


def control_bar(run: Stepper | None) -> None:
    started = run is not None and bool(run.traces)
    done = started and run.done
    at = st.session_state.get("step_at", 0)
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    bar.text_input("prompt", key="step_prompt", placeholder="Type a prompt, then Prefill (P)",
                   label_visibility="collapsed", width=250)
    # callbacks run before the rerun, so every button below is drawn in its new state
    bar.button("Prefill", type="primary", disabled=started, key="step_btn_prefill", on_click=do, args=(start,),
               shortcut="P", help="Run the whole prompt through the model in one pass (P)")
    bar.button("◀", disabled=not started or at == 0, key="step_btn_back", on_click=back, shortcut="left",
               help="Show the previous step (←)")
    bar.button("▶", disabled=not started or (done and at == latest(run)), key="step_btn_forward", on_click=forward,
               shortcut="right", help="Show the next recorded step; at the newest, compute one more token (→)")
    bar.button("Next token", type="primary", disabled=not started or done, key="step_btn_next",
               on_click=next_token, shortcut="N", help="One decode step: one more token (N)")
    run_all = bar.button("Run to end", disabled=not started or done, key="step_btn_run", shortcut="E",
                         help="Decode until the run stops (E)")
    bar.button("Reset", key="step_btn_reset", on_click=drop_run, shortcut="X", help="Forget this run (X)")
    cache_toggle(bar)
    if run_all:
        run_to_end(stepper())


def more(where, run: Stepper | None) -> None:
    """Scenarios, preset prompts, the head on the stage and autoplay, folded away so the bar stays short."""
    started = run is not None and bool(run.traces)
    st.session_state.setdefault("step_head", 0)
    with where.popover("More", icon=":material/tune:"):
        st.selectbox("scenario", [x["title"] for x in SCENARIOS], index=None, key="step_scenario",
                     on_change=load_scenario, placeholder="a ready-made scenario…")
        st.selectbox("preset prompt", [p["title"] for p in PROMPTS], key="step_preset", on_change=pick_preset,
                     placeholder="(your own prompt)")
        st.number_input("head drawn on the stage", 0, spec.heads - 1, key="step_head",
                        help="The head whose attention row(s) the stage draws")
        st.toggle("Autoplay", key="step_autoplay", disabled=not started or run.done)
        st.slider("autoplay speed (tokens/s)", 0.5, 5.0, 2.0, 0.5, key="step_speed")


# ------------------------------------------------------------------ the views (each shows step `at`)


def scrub_row(run: Stepper, at: int) -> None:
    """The scrubber, the layer and head the stage opens, and the folded extras."""
    row = st.container(horizontal=True, vertical_alignment="center", gap="small")
    if latest(run) > 0:
        row.slider("step", 0, latest(run), key="step_at", label_visibility="collapsed", width=300,
                   help="Scrub through the recorded steps: 0 is the prefill (← →)")
    st.session_state.setdefault("step_layer", 0)
    if spec.layers <= 12:
        row.segmented_control("layer", list(range(spec.layers)), key="step_layer", format_func=lambda x: f"layer {x}",
                              label_visibility="collapsed", help="The layer opened on the stage")
    else:
        row.number_input("layer", 0, spec.layers - 1, key="step_layer", width=100)
    more(row, run)


def status(run: Stepper, at: int) -> None:
    t = run.traces[at]
    new_tokens = len(run.generated_ids)
    by_decode = max(0, new_tokens - 1)
    showing = "newest" if at == latest(run) else f"{latest(run) - at} newer recorded"
    st.markdown(f"**{new_tokens} new token{'s' if new_tokens != 1 else ''}** ({by_decode} from Next token) · "
                f"step **{at}** of {latest(run)} ({t.phase}, {showing}) · KV cache **{t.kv_bytes:,} bytes**"
                + (f" · stopped: **{run.stop_reason}**" if run.done else ""))


def stage(run: Stepper, at: int, pieces: list[str]) -> None:
    t = run.traces[at]
    layer = st.session_state.get("step_layer") or 0
    svg = stage_svg(t, pieces, run.prompt_len, layer=layer, head=st.session_state.get("step_head", 0))
    st.html(stage_html(svg, caption(t)))
    text = lm.tokenizer.decode(run.ids[0, : t.kv_len + 1].tolist(), skip_special_tokens=True)
    st.html(f'<div class="dl-text" data-testid="dl-text">{html.escape(text)}</div>')  # the text so far


def tokens_view(run: Stepper, t, pieces: list[str]) -> None:
    ids = run.ids[0].tolist()
    known = ids[: t.kv_len + 1]
    fed = set(range(t.past, t.kv_len))
    st.caption("Text in, tokens out: the tokenizer cut the prompt into pieces (blue), each with an id. The model "
               "only ever sees the ids. Generated tokens are orange; the ones fed to this step's pass are outlined.")
    chips = [(i, pieces[p]) for p, i in enumerate(known)]
    st.html(fig.token_chips_html(chips[: run.prompt_len], chips[run.prompt_len:], fed))
    st.text(lm.tokenizer.decode(known, skip_special_tokens=True))


def matmuls_view(run: Stepper, t, layer: int) -> None:
    no_cache = t.kv_len if t.phase == "decode" else t.q_len
    st.caption(f"Layer {layer}'s matmuls at this step (FLOPs are estimates). q is the rows each weight matrix "
               f"multiplies: {t.q_len if run.use_cache or t.phase == 'prefill' else 1} with the cache, {no_cache} "
               "without.")
    st.table(fig.matmul_frame(t, spec, layer).set_index("matmul"))  # a table wraps: nothing runs off the side
    st.caption("The cache removes the projections of old positions (Q, K, V, W_o and the MLP run on the fed rows "
               "only); QKᵀ and ·V still grow with the context. Scores count the (query, key) pairs the mask lets "
               "through; eager attention also computes the masked ones and throws them away.")
    proof = None
    if run.use_cache and run.cache is not None:  # one extra pass per cache length, not one per rerun
        key = (id(run), run.cache.get_seq_length())
        if st.session_state.get("step_proof_key") != key:
            st.session_state["step_proof"] = kv_reuse(lm, run.ids, run.cache)
            st.session_state["step_proof_key"] = key
        proof = st.session_state["step_proof"]
    if proof is not None:
        st.markdown(f"**Why K and V are cached and Q is not**, checked on this run: recomputing all "
                    f"{proof['positions']} positions with no cache gives keys within **{proof['max_key_diff']:.1g}** "
                    f"and values within **{proof['max_value_diff']:.1g}** of what the cache holds (float rounding): "
                    "old K and V never change. Every step's q has query_pos = "
                    f"{'1' if t.phase == 'decode' else t.q_len} (the fed rows only): no later step reads an old Q.")
    elif not run.use_cache:
        st.info("The cache is off: every step computes K and V of all positions again, and throws them away.")


def shapes_view(run: Stepper, t) -> None:
    st.caption("The tensors of this pass, named by where they live; 'measured' shapes were read off the real "
               "tensors. At prefill pos is the prompt length s; at a cached decode step it is 1.")
    st.table(fig.shapes_frame(t).set_index("tensor"))
    if spec.kv_heads != spec.heads:
        st.info(f"{spec.attention}: {spec.heads} query heads share {spec.kv_heads} key/value heads "
                f"({spec.heads // spec.kv_heads} queries per K/V head), so the cache is {spec.heads // spec.kv_heads}× "
                "smaller than with one K/V head per query head.")
    st.markdown("**The articles' GPT-2 beside this model**, each counting the prompt with its own tokenizer (GPT-2: "
                "12 heads, head_dim 64, its bundled tokenizer; the article's \"A red jacket compliments any outfit.\" "
                "is 7 GPT-2 tokens):")
    st.table(fig.gpt2_shapes_frame(t, spec, run.prompt, run.prompt_len).set_index("tensor"))


def attention_view(run: Stepper, t, layer: int, labels: list[str]) -> None:
    if t.layers[layer].pattern is None:
        st.info(t.attention_note)
        return
    every = False
    if t.pattern_rows > 1:
        every = st.toggle("every query row (one panel per head)", key="step_att_every")
    st.plotly_chart(fig.heads_figure(t, layer, labels, scale=scale(), cols=2, newest_only=not every),
                    key="step_att_heads")
    newest = t.kv_len - 1
    piece = labels[newest].split(" ", 1)[-1]
    earlier = [p for p in range(newest) if labels[p].split(" ", 1)[-1] == piece]
    if earlier:
        ranked = fig.look_back(t, layer, earlier[-1])
        if ranked:
            head, weight = ranked[0]
            st.markdown(plain(f"The newest query {piece} appeared before, at position {earlier[-1]}: in layer {layer}, "
                              f"head {head} gives it the most weight ({weight:.2f})."))
    st.caption("Each row is a query, each column a key it may look at; a row sums to 1. Grey is masked (the future, "
               "or outside a sliding window): masked, not zero. One row per head for the newest query, so the head "
               "that looks back at a name stands out.")
    if st.toggle("one head, every step so far", key="step_att_assembled",
                 help="The prefill square plus one row per decode step"):  # built only when asked: a click stays cheap
        z = fig.assembled_attention(run.traces[: st.session_state.get('step_at', 0) + 1], layer,
                                    st.session_state.get("step_head", 0))
        st.plotly_chart(fig.attention_heatmap(z, labels[: z.shape[0]], labels[: z.shape[1]],
                                              f"layer {layer}, head {st.session_state.get('step_head', 0)}",
                                              scale=scale()), key="step_att_all")


def kv_view(run: Stepper, t, at: int) -> None:
    st.caption("Per layer, the cache keeps the keys and values of the positions seen so far (a sliding-window "
               "layer only its window), so a decode step only computes K and V for the new position. Bytes are "
               "measured from the real tensors.")
    st.latex(r"\begin{aligned}\text{KV bytes}=\sum_{\text{layer}} 2&\times batch\times kv\_head\\"
             r"&\times pos_{\text{kept}}\times head\_dim\\&\times\text{bytes per element}\end{aligned}")  # 3 short lines
    if not run.use_cache:
        st.warning("The KV cache is off: nothing is stored between steps (0 bytes), so every decode step "
                   "recomputes keys and values for all positions.")
        return
    st.table(fig.kv_frame(t).set_index("layer"))
    st.plotly_chart(fig.kv_grid_figure(run.traces[: at + 1], spec.layers, scale=scale()), key="step_kv_grid")
    st.plotly_chart(fig.kv_growth_figure(run.traces[: at + 1], scale=scale()), key="step_kv_growth")


def next_token_view(t) -> None:
    st.plotly_chart(fig.next_token_figure(t, scale=scale()), key="step_next")
    st.markdown(plain(f"Chosen: {fig.show_piece(t.token)} (id {t.token_id}) by {t.rule}."))
    st.caption("The last position's output is a score (logit, the numbers on the bars) for every token. Softmax turns "
               "them into probabilities; the warpers (temperature, top-k, top-p, repetition penalty) reshape them; "
               "then a rule picks one.")


def latency_view(run: Stepper, at: int) -> None:
    traces = run.traces[: at + 1]
    st.plotly_chart(fig.latency_figure(traces, scale=scale()), key="step_latency")
    call = fig.timing_callout(traces)
    c = st.columns(2)
    c[0].metric("time to first token", f"{call['ttft_ms']:.1f} ms",
                help="The prefill pass plus choosing its token")
    c[1].metric("time per output token", f"{call['tpot_ms']:.1f} ms" if call["tpot_ms"] else "—",
                help="Median decode step")
    if call["tpot_ms"]:
        st.caption(f"Prefill: {call['prefill_ms_per_token']:.2f} ms per prompt token ({call['prompt_tokens']} tokens "
                   f"in one pass); decode: {call['tpot_ms']:.2f} ms per token, one pass each.")
    trend = fig.latency_trend(traces)
    repeats = traces[-1].timing.repeats
    if trend["climbs"] is None:
        what = "Take six or more decode steps to see how their time changes."
    elif trend["climbs"]:
        what = (f"Decode steps climb: the first three took {trend['first_ms']:.2f} ms on average, the last three "
                f"{trend['last_ms']:.2f} ms.")
    else:
        what = (f"Decode steps stay about flat: the first three took {trend['first_ms']:.2f} ms on average, the last "
                f"three {trend['last_ms']:.2f} ms. At this length the fixed cost of a pass hides the growing work"
                + (" even with the cache off." if not run.use_cache else "."))
    st.caption(f"Each bar is the median of {repeats} timed runs of the same pass (whisker: fastest to slowest); the "
               f"run before them is a warm-up, excluded. {what} The dashed line is a FLOPs estimate, not a measurement. "
               "A whisker far above the rest is marked with its time instead of stretching the axis.")
    st.dataframe(fig.traces_frame(traces)[STEP_COLUMNS], hide_index=True, width="stretch", height=200)


def views(run: Stepper, at: int, pieces: list[str]) -> None:
    t = run.traces[at]
    layer = st.session_state.get("step_layer") or 0
    st.session_state.setdefault("step_view", "Attention")
    view = st.radio("view", VIEWS, key="step_view", horizontal=True, label_visibility="collapsed")  # wraps on a phone
    labels = fig.axis_labels(pieces)
    if view == "Tokens":
        tokens_view(run, t, pieces)
    elif view == "Matmuls":
        matmuls_view(run, t, layer)
    elif view == "Shapes":
        shapes_view(run, t)
    elif view == "Attention":
        attention_view(run, t, layer, labels)
    elif view == "KV cache":
        kv_view(run, t, at)
    elif view == "Next token":
        next_token_view(t)
    else:
        latency_view(run, at)


def export(run: Stepper) -> None:
    """The run so far, to keep or to share: JSON (everything) and CSV (one row per step)."""
    c = st.container(horizontal=True, vertical_alignment="center")
    # callables: the files are only built when a button is clicked, never on a Next-token click
    c.download_button("Trace as JSON", lambda: json.dumps(run.report(), default=str, indent=1), "decode-lab-trace.json",
                      "application/json", key="step_export_json", on_click="ignore")
    c.download_button("Steps as CSV", lambda: fig.traces_frame(run.traces).to_csv(index=False), "decode-lab-steps.csv",
                      "text/csv", key="step_export_csv", on_click="ignore")
    c.caption("The JSON holds every step's phase, q_len, kv_len, token, per-layer shapes, KV bytes, timings and FLOPs "
              "estimate; the link in the address bar replays this run and shows this step.")


@st.fragment
def stepping() -> None:
    if settings.use_cache != st.session_state.get("cache_on", True):
        st.rerun()  # the KV-cache switch sits in this fragment, but the settings (and the link) are the whole app's
    prompt = st.session_state.get("step_prompt", "")
    run_key = (settings, prompt)
    if st.session_state.get("step_run_key") != run_key:  # new prompt, model or setting: a fresh run
        drop_run()
        st.session_state["step_run_key"] = run_key
    control_bar(stepper())
    run = stepper()
    if st.session_state.pop("step_follow", False):  # autoplay took a step after the scrubber was drawn
        st.session_state["step_at"] = latest(run)
    at = max(0, min(st.session_state.get("step_at", 0), latest(run)))
    st.session_state["step_at"] = at
    write_link(settings, prompt=prompt if len(prompt) <= MAX_PROMPT_CHARS else None,
               steps=latest(run) if run is not None and run.traces else None,
               at=at if run is not None and run.traces and at != latest(run) else None)
    class_bar(run, at)  # leading a class: every follower sees this step (nothing when no class is running)
    for problem in st.session_state.pop("link_problems", []):
        warning(problem)
    if st.session_state.get("step_error"):
        error(st.session_state.pop("step_error"))
    if run is None or not run.traces:
        more(st, run)
        st.info("Type a prompt (or pick a scenario under **More**), then press **Prefill** (P): the whole prompt goes "
                "through the model in one forward pass, and the stage shows it.")
        with st.container(key="step_warm"):  # out of sight (ui/frame.py CSS): the browser loads its chart library now
            st.plotly_chart(blank_figure(), key="step_warm_chart", config={"staticPlot": True})
        return
    scrub_row(run, at)
    pieces = run.pieces()
    left, right = st.columns([3, 2], gap="medium")
    with left:
        stage(run, at, pieces)
    with right:
        status(run, at)
        views(run, at, pieces)
    st.html(fig.legend_html())
    export(run)
    if st.session_state.get("step_autoplay") and not run.done:
        time.sleep(1 / st.session_state.get("step_speed", 2.0))
        try:
            run.decode()
            st.session_state["step_follow"] = True
        except Busy as e:
            st.session_state["step_error"] = f"{e} Autoplay waits and tries again."
            time.sleep(BUSY_WAITS[-1])
        except DecodeLabError as e:
            st.session_state["step_error"] = str(e)
            st.session_state["step_autoplay"] = False
        try:
            st.rerun(scope="fragment")
        except StreamlitAPIException:  # this run is the whole app's (a sidebar change, presenter mode): rerun it all
            st.rerun()


st.session_state.setdefault("step_prompt", PROMPTS[0]["prompt"])
if "step_replay" in st.session_state and stepper() is None:
    st.session_state["step_run_key"] = (settings, st.session_state.get("step_prompt", ""))
    replay(st.session_state.pop("step_replay"))
stepping()
