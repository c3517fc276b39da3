"""Step through: prefill once, then one click per token, and see what each forward pass did.

Thin page: read state -> call engine -> render. All figures come from engine.figures.
"""

import json
import time

import streamlit as st

from engine import DecodeLabError, Stepper
from engine import figures as fig
from engine.share import MAX_PROMPT_CHARS, read_link
from pages.shared import DEFAULTS, PROMPTS, SCENARIOS, apply_values, frame, write_link

st.title("Step through prefill and decode")
settings, lm = frame()
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()

# ------------------------------------------------------------------ prompt and run identity

def load_scenario() -> None:
    """A ready-made run in one click: its settings go into the sidebar, then its steps replay."""
    scenario = next((x for x in SCENARIOS if x["title"] == st.session_state.get("step_scenario")), None)
    if scenario is None:
        return
    st.session_state.update(DEFAULTS)  # start from the defaults, so nothing lingers from before
    values, problems = read_link(scenario["link"])
    st.session_state["link_problems"] = apply_values(values, problems)
    old = st.session_state.pop("step_stepper", None)
    if old is not None:
        old.free()


st.selectbox("scenario", [x["title"] for x in SCENARIOS], index=None, key="step_scenario", on_change=load_scenario,
             placeholder="Pick a ready-made scenario (prompt, model, settings and steps)…")
if st.session_state.get("step_scenario"):
    st.caption(next(x["why"] for x in SCENARIOS if x["title"] == st.session_state["step_scenario"]))
for problem in st.session_state.pop("link_problems", []):
    st.warning(problem)
preset = st.selectbox("preset prompt", [p["title"] for p in PROMPTS], key="step_preset",
                      placeholder="(your own prompt)")
if preset is not None and st.session_state.get("step_preset_used") != preset:
    st.session_state["step_prompt"] = next(p["prompt"] for p in PROMPTS if p["title"] == preset)
    st.session_state["step_preset_used"] = preset
prompt = st.text_area("prompt", key="step_prompt", height=80)

run_key = (settings, prompt)
if st.session_state.get("step_run_key") != run_key:  # new prompt, model or setting: a fresh run
    old = st.session_state.pop("step_stepper", None)
    if old is not None:
        old.free()
    st.session_state["step_run_key"] = run_key
    st.session_state["step_autoplay"] = False


def stepper() -> Stepper | None:
    return st.session_state.get("step_stepper")


def do(action) -> None:
    """Run one engine action; show a plain message instead of a traceback if it is refused."""
    try:
        action()
    except DecodeLabError as e:
        st.session_state["step_error"] = str(e)


def start() -> None:
    s = Stepper(lm, prompt, use_cache=settings.use_cache, sampling=settings.sampling,
                max_new_tokens=settings.max_new_tokens, stop_strings=settings.stop_strings)
    st.session_state["step_stepper"] = s
    s.prefill()


def replay(steps: int) -> None:
    """A shared link said 'prefill, then this many Next-token clicks': do exactly that."""
    do(start)
    s = stepper()
    for _ in range(steps):
        if s is None or not s.traces or s.done:
            break
        do(s.decode)


def reset() -> None:
    s = st.session_state.pop("step_stepper", None)
    if s is not None:
        s.free()
    st.session_state["step_autoplay"] = False


# ------------------------------------------------------------------ controls and views


def controls(s: Stepper | None) -> None:
    started = s is not None and bool(s.traces)
    done = started and s.done
    c = st.columns([1, 1.4, 1.4, 1, 2])
    # callbacks run before the rerun, so every button below is drawn in its new state
    c[0].button("Prefill", type="primary", disabled=started, key="step_btn_prefill", on_click=do, args=(start,),
                shortcut="P")
    c[1].button("Next token", type="primary", disabled=not started or done, key="step_btn_next",
                on_click=do, args=(lambda: stepper().decode(),), shortcut="N")
    run_all = c[2].button("Run to end", disabled=not started or done, key="step_btn_run", shortcut="E")
    c[3].button("Reset", key="step_btn_reset", on_click=reset, shortcut="X")
    c[4].toggle("Autoplay", key="step_autoplay", disabled=not started or done)
    c[4].slider("autoplay speed (tokens/s)", 0.5, 5.0, 2.0, 0.5, key="step_speed")
    if run_all:
        s = stepper()
        st.button("Stop", key="step_btn_stop")  # a click reruns the script, which ends this loop
        bar = st.progress(0.0, text="running…")
        while not s.done:
            do(s.decode)
            bar.progress(len(s.generated_ids) / s.max_new_tokens, text=f"{len(s.generated_ids)} tokens")
        st.rerun(scope="fragment")


def views(s: Stepper) -> None:
    t = s.traces[-1]
    new_tokens = len(s.generated_ids)
    by_decode = max(0, new_tokens - 1)
    st.markdown(f"**{new_tokens} new token{'s' if new_tokens != 1 else ''}** ({by_decode} from Next token) · step {t.step} ({t.phase}) · "
                f"KV cache **{t.kv_bytes:,} bytes** · last step {t.latency_ms:.1f} ms"
                + (f" · stopped: **{s.stop_reason}**" if s.done else ""))
    shown = {"Tokens": tokens_view, "This step": this_step_view, "Shapes": shapes_view, "Attention": attention_view,
             "KV cache": kv_view, "Next token": next_token_view, "Latency": latency_view}
    # on_change="rerun" makes the tabs lazy: only the open one is built, so a click stays cheap
    for tab, view in zip(st.tabs(list(shown), key="step_view", on_change="rerun"), shown.values()):
        if tab.open:
            with tab:
                view(s)


def tokens_view(s: Stepper) -> None:
    t, tok = s.traces[-1], lm.tokenizer
    prompt_ids, gen_ids = s.ids[0, : s.prompt_len].tolist(), s.generated_ids
    pieces = lambda ids: [(i, tok.decode([i])) for i in ids]  # noqa: E731
    fed_from = s.ids.shape[1] - 1 - len(t.fed_ids)
    st.caption("Text in, tokens out: the tokenizer cut the prompt into pieces (blue), each with an id. The model "
               "only ever sees the ids. Generated tokens are orange; the ones fed to the last forward pass are "
               "outlined. Detokenizing the ids gives back the text below.")
    st.markdown(fig.token_chips_html(pieces(prompt_ids), pieces(gen_ids),
                                     set(range(fed_from, fed_from + len(t.fed_ids)))), unsafe_allow_html=True)
    st.text(s.text)


def this_step_view(s: Stepper) -> None:
    st.caption("Prefill runs every prompt position through the model at once. Each decode step adds one "
               "position. q_len counts the positions computed in this pass; kv_len the positions attended to.")
    st.markdown(fig.step_story(s.traces[-1], s.prompt_len))
    st.latex(r"\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_{head}}}+M\right)V"
             r"\qquad Q\in\mathbb{R}^{q\_len\times d_{head}},\;K,V\in\mathbb{R}^{kv\_len\times d_{head}}")


def shapes_view(s: Stepper) -> None:
    st.caption("The tensors of this forward pass. At prefill the middle dimension is the prompt length s; at a "
               "cached decode step it is 1. 'measured' shapes were read off the real tensors; 'derived' ones come "
               "from the config.")
    st.dataframe(fig.shapes_frame(s.traces[-1]), hide_index=True, width="stretch")
    m = lm.summary
    if m.kv_heads != m.heads:
        st.info(f"{m.attention}: {m.heads} query heads share {m.kv_heads} key/value heads "
                f"({m.heads // m.kv_heads} queries per K/V head), so the cache is {m.heads // m.kv_heads}× "
                "smaller than with one K/V head per query head.")


def kv_view(s: Stepper) -> None:
    st.caption("Per layer, the cache keeps the keys and values of every position seen so far, so a decode step "
               "only computes K and V for the new position. Bytes are measured from the real tensors.")
    st.latex(r"\text{KV bytes}=\sum_{\text{layers}} 2\times batch\times kv\_head\times pos\times head\_dim"
             r"\times\text{bytes per element}")
    if not s.use_cache:
        st.warning("The KV cache is off: nothing is stored between steps (0 bytes), so every decode step "
                   "recomputes keys and values for all positions.")
    else:
        st.dataframe(fig.kv_frame(s.traces[-1]), hide_index=True, width="stretch")
        st.plotly_chart(fig.kv_grid_figure(s.traces, lm.summary.layers), key="step_kv_grid")
    st.plotly_chart(fig.kv_growth_figure(s.traces), key="step_kv_growth")


def next_token_view(s: Stepper) -> None:
    t = s.traces[-1]
    st.caption("The model's last position gives a score (logit) for every token in the vocabulary. Softmax turns "
               "them into probabilities; the warpers (temperature, top-k, top-p, repetition penalty) reshape "
               "them; then a rule picks one. Bars: the 10 most likely tokens before and after the warpers.")
    st.latex(r"p_i=\frac{e^{z_i/T}}{\sum_j e^{z_j/T}}")
    st.plotly_chart(fig.next_token_figure(t), key="step_next")
    st.write(f"Chosen: **{fig.show_piece(t.token)}** (id {t.token_id}) by {t.rule}.")


def latency_view(s: Stepper) -> None:
    st.caption("Forward time of every step, measured with a clock read after a device sync; sampling time is "
               "included. The warm-up pass at load is excluded. With the cache off, decode bars climb because "
               "each step recomputes more positions. The purple line is a FLOPs estimate, not a measurement.")
    st.plotly_chart(fig.latency_figure(s.traces), key="step_latency")
    st.dataframe(fig.traces_frame(s.traces), hide_index=True, width="stretch", height=240)


def attention_view(s: Stepper) -> None:
    m = lm.summary
    st.caption("Each row is a query position, each column a key position it may look at; a row sums to 1. "
               "The upper triangle is zero: a token cannot see the future (the causal mask M). A decode step adds "
               "one row; the rows before it stay as they were.")
    c1, c2, c3 = st.columns(3)
    layer = c1.number_input("layer", 0, m.layers - 1, 0, key="step_layer")
    head = c2.number_input("head", 0, m.heads - 1, 0, key="step_head")
    view = c3.radio("show", ["assembled matrix", "this step", "all heads"], horizontal=True, key="step_att_view")
    all_pieces = [lm.tokenizer.decode([i]) for i in s.ids[0].tolist()]
    labels = fig.axis_labels(all_pieces)
    t = s.traces[-1]
    if t.attention is None:
        st.info(t.attention_note)
        return
    if view == "assembled matrix":
        z = fig.assembled_attention(s.traces, layer, head)
        st.plotly_chart(fig.attention_heatmap(z, labels[: z.shape[0]],
                                              labels[: z.shape[1]], f"layer {layer}, head {head}: prefill square + "
                                              "one row per decode step"), key="step_att_all")
    elif view == "this step":
        z = t.attention[layer, head].float().numpy()
        rows = labels[t.kv_len - z.shape[0]: t.kv_len]
        st.plotly_chart(fig.attention_heatmap(z, rows, labels[: t.kv_len], f"layer {layer}, head {head}: "
                                              f"{t.attention_note}"), key="step_att_step")
    else:
        st.plotly_chart(fig.heads_grid(t.attention[layer].float().numpy(), f"layer {layer}: every head, this step"),
                        key="step_att_heads")


def export(s: Stepper) -> None:
    """The run so far, to keep or to share: JSON (everything) and CSV (one row per step)."""
    c = st.columns([1, 1, 3])
    # callables: the files are only built when a button is clicked, never on a Next-token click
    c[0].download_button("Trace as JSON", lambda: json.dumps(s.report(), default=str, indent=1), "decode-lab-trace.json",
                         "application/json", key="step_export_json", on_click="ignore")
    c[1].download_button("Steps as CSV", lambda: fig.traces_frame(s.traces).to_csv(index=False), "decode-lab-steps.csv",
                         "text/csv", key="step_export_csv", on_click="ignore")
    c[2].caption("The JSON holds every step's phase, q_len, kv_len, token, shapes, KV bytes, latency and FLOPs "
                 "estimate; the link in the address bar replays this run.")


@st.fragment
def stepping() -> None:
    controls(stepper())
    s = stepper()
    write_link(settings, prompt=prompt if len(prompt) <= MAX_PROMPT_CHARS else None,
               steps=len(s.traces) - 1 if s is not None and s.traces else None)
    if st.session_state.get("step_error"):
        st.error(st.session_state.pop("step_error"))
    s = stepper()
    if s is None or not s.traces:
        st.info("Press **Prefill** to run the whole prompt through the model in one forward pass.")
        return
    views(s)
    export(s)
    if st.session_state.get("step_autoplay") and not s.done:
        time.sleep(1 / st.session_state.get("step_speed", 2.0))
        do(s.decode)
        st.rerun(scope="fragment")


if "step_replay" in st.session_state and stepper() is None:
    replay(st.session_state.pop("step_replay"))
stepping()
