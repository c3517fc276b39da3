"""Race: the same prompt and seed with the KV cache on (left) and off (right), and the proof they agree."""

import pandas as pd
import streamlit as st

from engine import DecodeLabError
from engine import race
from engine.compare import compare
from pages.shared import PROMPTS, frame

st.title("Race: KV cache on vs off")
st.caption("Both runs get the same prompt, the same seed and the same sampling settings (from the sidebar). They "
           "take turns, one step each, so neither has the machine to itself. With the cache, each decode step "
           "computes one position; without it, every step recomputes all of them. Both choose the same tokens.")
settings, lm = frame()
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()

c1, c2 = st.columns([3, 1])
preset = c1.selectbox("preset prompt", [p["title"] for p in PROMPTS], key="race_preset")
prompt = c1.text_area("prompt", next(p["prompt"] for p in PROMPTS if p["title"] == preset), key=f"race_prompt_{preset}",
                      height=70)
room = max(2, lm.summary.max_positions - len(lm.tokenizer(prompt)["input_ids"]))
steps = c2.number_input("tokens", 2, min(room, 2048), min(100, room), key="race_steps",
                        help=f"Up to the model's context limit ({lm.summary.max_positions} positions).")
start = c2.button("Start race", type="primary", key="race_start")
c2.button("Stop", key="race_stop", help="Stops the race where it is.")

if start:
    st.session_state.pop("race_result", None)
    cols = st.columns(2)
    live = {}
    for col, mode in zip(cols, race.MODES):
        name, colour = race.MODES[mode]
        col.markdown(f"### <span style='color:{colour}'>{name}</span>", unsafe_allow_html=True)
        live[mode] = {"bar": col.progress(0.0), "ms": col.empty(), "text": col.empty(), "chart": col.empty(),
                      "pieces": [], "lat": []}

    def on_step(mode, t):
        box = live[mode]
        box["pieces"].append(t.token)
        box["lat"].append(t.latency_ms)
        box["bar"].progress(len(box["pieces"]) / steps, text=f"{len(box['pieces'])} / {steps} tokens")
        box["ms"].markdown(f"#### step {t.step}: {t.latency_ms:.1f} ms (q_len = {t.q_len})")
        box["text"].markdown(f"<div style='font-size:1.2rem'>{prompt}<b>{''.join(box['pieces'])}</b></div>",
                             unsafe_allow_html=True)
        if t.step % 5 == 0:
            box["chart"].line_chart(pd.DataFrame({"ms": box["lat"]}), height=160, color=race.MODES[mode][1])

    try:
        report = compare(lm, prompt, int(steps), sampling=settings.sampling, on_step=on_step, stop_on_eos=False)
    except DecodeLabError as e:
        st.error(str(e))
        st.stop()
    df = race.race_frame(report)
    report.pop("steppers")  # traces are summarised in df; free them now
    st.session_state["race_result"] = {"df": df, "summary": race.summary(report, df)}
    st.rerun()

result = st.session_state.get("race_result")
if result:
    df, s = result["df"], result["summary"]
    tokens = {m: len(df[df["mode"] == m]) for m in race.MODES}
    if s["identical"]:
        st.success(f"**Identical tokens:** both runs chose the same {tokens['cache']} tokens. Largest logit "
                   f"difference: {s['max_logit_diff']:.2g} (floating-point rounding; the computation order differs).",
                   icon=":material/check_circle:")
    else:
        st.error(f"**The runs differ** from step {s['first_divergence_step']}. Largest logit difference before that: "
                 f"{s['max_logit_diff']:.2g}. The two modes add up the same numbers in a different order; in low "
                 "precision (fp16/bf16 on a GPU) that can flip a near-tie between two tokens. Nothing is hidden: "
                 "the tables below show both runs.", icon=":material/error:")
    m = st.columns(4)
    if s["median_ratio"]:
        m[0].metric("speed-up (total decode time)", f"×{s['total_ratio']:.1f}")
        m[1].metric("median decode step", f"×{s['median_ratio']:.1f}")
    m[2].metric("cache: total decode", f"{s['cache_total_ms']:.0f} ms")
    m[3].metric("no cache: total decode", f"{s['nocache_total_ms']:.0f} ms")
    st.caption(f"Prefill is the same work in both modes and is timed separately: {s['cache_prefill_ms']:.1f} ms "
               f"(cache on) and {s['nocache_prefill_ms']:.1f} ms (cache off). The warm-up pass ran when the model "
               "loaded and is excluded. Every clock read follows a device sync.")
    st.plotly_chart(race.latency_figure(df), key="race_latency")
    c1, c2 = st.columns(2)
    c1.plotly_chart(race.cumulative_figure(df), key="race_cumulative")
    c2.plotly_chart(race.flops_figure(df), key="race_flops")
    fits = ", ".join(f"{race.MODES[m][0]}: measured ~n^{s[f'{m}_exponent']:.2f}, estimate ~n^{s[f'{m}_flops_exponent']:.2f}"
                     for m in race.MODES if s[f"{m}_exponent"] is not None)
    st.markdown(f"**Growth of total decode time with n tokens** (least-squares fit in log-log): {fits}. "
                "Linear is n^1, quadratic n^2. On a small model, fixed per-step costs hide part of the quadratic "
                "growth until n is large.")
    st.download_button("Download the race as CSV (one row per step per mode)", df.to_csv(index=False),
                       file_name="race.csv", mime="text/csv", key="race_csv")
    with st.expander("Both runs, step by step"):
        st.dataframe(df, hide_index=True, width="stretch")

st.divider()
st.subheader("Sweep: how the gap grows with length")
st.caption("Both modes at several lengths; each point is the median of repeated runs. With the cache, time per "
           "token stays flat; without it, it grows with the length, and total time grows like n².")
lengths = st.multiselect("lengths (new tokens)", [16, 32, 64, 128, 256, 512], [32, 64, 128, 256], key="race_lengths")
repeats = st.number_input("repeats per length", 1, 7, 3, key="race_repeats")
if st.button("Run sweep", key="race_sweep"):
    usable = [n for n in sorted(lengths) if n < room]
    bar = st.progress(0.0, text="sweeping…")
    try:
        st.session_state["race_sweep_df"] = race.sweep(lm, prompt, usable, int(repeats), settings.sampling,
                                                       on_progress=lambda f, txt: bar.progress(f, text=txt))
    except DecodeLabError as e:
        st.error(str(e))
    bar.empty()
sweep_df = st.session_state.get("race_sweep_df")
if sweep_df is not None:
    c1, c2 = st.columns(2)
    c1.plotly_chart(race.sweep_figure(sweep_df, "ms_per_token", "Time per token"), key="race_sweep_tpt")
    c2.plotly_chart(race.sweep_figure(sweep_df, "total_ms", "Total decode time"), key="race_sweep_total")
    st.dataframe(sweep_df, hide_index=True)
