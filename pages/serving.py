"""Serving: many requests on one model, one engine step at a time.

Thin page: the engine is engine/generate/serving (ServingRun.step: arrivals -> schedule -> one paged pass ->
tokens -> a frozen record); the pictures are engine/draw/serving.py, placed by ui/serving.py. Any recorded
step can be put back on screen (◀ ▶, the scrubber); ▶ at the newest step computes the next one.
"""

import time

import streamlit as st

from engine import DecodeLabError
from engine.draw import serving as draw
from engine.generate.serving import DEFAULTS
from engine.generate.serving.scenarios import SCENARIOS
from engine.load.device import release_memory
from engine.measure import serving as measure
from ui.frame import error, frame, scale
from ui.serving import MAX_PAGE_REQUESTS, pictures, requests_editor, start, summary

settings, lm = frame(__file__)
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()
OWN = "Your own requests"
CHOICES = [sc["title"] for sc in SCENARIOS.values()] + [OWN]
BY_TITLE = {sc["title"]: name for name, sc in SCENARIOS.items()}


# ------------------------------------------------------------------ run state


def current_run():
    return st.session_state.get("serve_run")


def drop_run() -> None:
    old = st.session_state.pop("serve_run", None)
    if old is not None:
        old.free()
        release_memory()
    st.session_state["serve_autoplay"] = False
    st.session_state.pop("serve_measured", None)


def chosen() -> tuple[list | None, dict]:
    """The requests and the sizing on screen: a scenario's, or the user's own table with the sizing knobs."""
    title = st.session_state.get("serve_scenario", CHOICES[0])
    name = BY_TITLE.get(title)
    sizing = dict(SCENARIOS[name]["sizing"]) if name else {**DEFAULTS, "prefix_sharing": True, "chunking": True}
    for knob in ("page_size", "num_blocks", "max_batch_tokens", "prefix_sharing", "chunking"):
        if f"serve_{knob}" in st.session_state and st.session_state.get("serve_custom_sizing"):
            sizing[knob] = st.session_state[f"serve_{knob}"]
    requests = SCENARIOS[name]["requests"] if name else st.session_state.get("serve_own_requests")
    return requests, sizing


def forward() -> None:
    """▶: show the next recorded step, or at the newest compute one more engine step (the first creates the run)."""
    run = current_run()
    if run is None:
        requests, sizing = chosen()
        if requests is None:
            return
        run = start(lm, requests, sizing, settings.sampling)
        if run is None:
            return
        st.session_state["serve_run"] = run
    at = st.session_state.get("serve_at", -1)
    if at < len(run.steps) - 1:
        st.session_state["serve_at"] = at + 1
        return
    if not run.done:
        advance(run, 1)


def advance(run, steps: int | None) -> None:
    """Run engine steps (None: until every request is done) and show the newest; a refusal becomes a message."""
    try:
        run.run(steps)
    except DecodeLabError as e:
        st.session_state["serve_error"] = str(e)
    st.session_state["serve_at"] = len(run.steps) - 1


def back() -> None:
    st.session_state["serve_at"] = max(0, st.session_state.get("serve_at", 0) - 1)


def run_to_end() -> None:
    if current_run() is None:
        forward()
    if current_run() is not None:
        advance(current_run(), None)


def pick_scenario() -> None:
    drop_run()
    st.session_state["serve_at"] = -1
    st.session_state["serve_custom_sizing"] = False


# ------------------------------------------------------------------ the page

run = current_run()
started = run is not None and bool(run.steps)
at = max(-1, min(st.session_state.get("serve_at", -1), len(run.steps) - 1 if started else -1))
bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
bar.selectbox("scenario", CHOICES, key="serve_scenario", on_change=pick_scenario, label_visibility="collapsed",
              width=380)
bar.button("◀", key="serve_back", on_click=back, disabled=not started or at <= 0, shortcut="left",
           help="Show the previous engine step (←)")
bar.button("▶ step", key="serve_forward", on_click=forward, type="primary",
           disabled=started and run.done and at == len(run.steps) - 1, shortcut="right",
           help="Show the next step; at the newest, run one more engine step: one forward pass (→)")
bar.button("Run to end", key="serve_run_all", on_click=run_to_end, disabled=started and run.done, shortcut="E",
           help="Run engine steps until every request has finished (E)")
bar.button("Reset", key="serve_reset", on_click=pick_scenario, shortcut="X", help="Forget this run (X)")
with bar.popover("More", icon=":material/tune:"):
    st.toggle("Autoplay", key="serve_autoplay", disabled=started and run.done)
    st.slider("autoplay speed (steps/s)", 0.5, 5.0, 2.0, 0.5, key="serve_speed")
    requests, sizing = chosen()
    st.markdown("**Sizing** (changes start a new run)")
    st.toggle("use these settings instead of the scenario's", key="serve_custom_sizing", on_change=drop_run)
    c1, c2, c3 = st.columns(3)
    c1.number_input("page size", 1, 256, sizing["page_size"], key="serve_page_size", on_change=drop_run)
    c2.number_input("blocks", 1, 4096, sizing["num_blocks"], key="serve_num_blocks", on_change=drop_run)
    c3.number_input("tokens per pass", 1, 4096, sizing["max_batch_tokens"], key="serve_max_batch_tokens",
                    on_change=drop_run)
    st.toggle("prefix sharing", sizing["prefix_sharing"], key="serve_prefix_sharing", on_change=drop_run)
    st.toggle("chunked prefill", sizing["chunking"], key="serve_chunking", on_change=drop_run)

requests, sizing = chosen()
name = BY_TITLE.get(st.session_state.get("serve_scenario", CHOICES[0]))
st.caption(f"**Serving many requests on one model** · page {sizing['page_size']} positions · {sizing['num_blocks']} "
           f"blocks · {sizing['max_batch_tokens']} tokens per pass · prefix sharing "
           f"{'on' if sizing['prefix_sharing'] else 'off'} · chunked prefill {'on' if sizing['chunking'] else 'off'} · "
           "timings measured")
if st.session_state.get("serve_error"):
    error(st.session_state.pop("serve_error"))

if name is None:
    with st.expander("Your requests (prompt, max new tokens, the engine step it arrives at)", expanded=not started):
        own = requests_editor("serve_own_editor", st.session_state.get("serve_own_requests")
                              or SCENARIOS["arrivals"]["requests"][:3])
        if own is not None and own != st.session_state.get("serve_own_requests"):
            st.session_state["serve_own_requests"] = own
            drop_run()
        st.caption(f"Up to {MAX_PAGE_REQUESTS} requests; arrivals in order.")

run = current_run()
started = run is not None and bool(run.steps)
if not started:
    if name:
        st.info(SCENARIOS[name]["why"] + " Press **▶ step** (→) to run engine step 0: one forward pass.")
    else:
        st.info("Edit the requests above, then press **▶ step** (→).")
    st.stop()

at = max(0, min(st.session_state.get("serve_at", 0), len(run.steps) - 1))
st.session_state["serve_at"] = at
row = st.container(horizontal=True, vertical_alignment="center", gap="medium")
if len(run.steps) > 1:
    row.slider("engine step", 0, len(run.steps) - 1, key="serve_at", label_visibility="collapsed", width=300)
row.markdown(summary(run, at))  # the engine's numbers only: nothing typed by a user
pictures(run, at)

if st.session_state.get("serve_autoplay") and not run.done:
    time.sleep(1 / st.session_state.get("serve_speed", 2.0))
    try:
        run.step()
        st.session_state["serve_at"] = len(run.steps) - 1
    except DecodeLabError as e:
        st.session_state["serve_error"] = str(e)
        st.session_state["serve_autoplay"] = False
    st.rerun()

st.subheader("Each request: time to first token, time per output token")
st.dataframe(draw.latency_frame(run), hide_index=True, width="stretch")
st.caption("TTFT counts engine steps from the one the request arrives at to the one that chose its first token, and "
           "the measured time of those steps; TPOT is the measured time between its first and last tokens over the "
           "tokens in between. Arrivals are in engine steps.")
if name:
    st.caption(SCENARIOS[name]["why"])

st.subheader("Measured on this machine, side by side")
memory = measure.memory(run)
st.dataframe(draw.memory_frame(memory), hide_index=True, width="stretch")
st.caption(f"KV memory of this run so far, averaged over its steps: what the paged pool really held (whole blocks) "
           f"against what the same requests would hold if each reserved the model's whole context "
           f"({memory['max_length']} positions), or waited in one padded batch for the longest. Wasted = held but "
           "holding no token's keys and values.")
if name == "long_prompt":
    if st.button("Compare chunked prefill on and off", key="serve_chunk_compare"):
        with st.spinner("Serving the scenario twice…"):
            st.session_state["serve_measured"] = ("chunking", measure.chunking_comparison(
                lm, SCENARIOS[name]["requests"], SCENARIOS[name]["sizing"]))
c = st.container(horizontal=True)
if c.button("Throughput: continuous batching vs one at a time vs static vs generate_batch", key="serve_tp"):
    with st.spinner("Serving the same requests four ways (one round, after a warm-up)…"):
        prompts = [r.prompt for r in (requests or [])][:8] or measure.PROMPTS
        st.session_state["serve_measured"] = ("throughput", measure.throughput(lm, prompts, new_tokens=32, rounds=1,
                                                                              log=lambda *a: None))
    release_memory()
if c.button("Decode pass time against batch size", key="serve_batch"):
    with st.spinner("Timing decode passes shared by 1 to 16 sequences…"):
        st.session_state["serve_measured"] = ("batch", measure.step_time_vs_batch(lm, sizes=(1, 2, 4, 8, 16)))
    release_memory()
kind, result = st.session_state.get("serve_measured", (None, None))
if kind == "throughput":
    st.dataframe(draw.throughput_frame(result), hide_index=True)
    st.caption(f"{result['requests']} requests × {result['new_tokens']} new tokens, the same in every way; continuous "
               f"batching ×{result['continuous_over_one_at_a_time']:.1f} the tokens/s of one request at a time and "
               f"×{result['continuous_over_generate_batch']:.2f} transformers' generate_batch (its setup included). One "
               "round after a warm-up: `python -m engine bench` gives medians of several.")
elif kind == "batch":
    st.plotly_chart(draw.batch_time_figure(result, scale=scale()), key="serve_batch_chart")
    top = result[-1]
    st.caption(f"{top['batch']} sequences in one decode pass took ×{top['over_batch_1']:.1f} the time of one "
               f"({top['decode_ms']:.1f} ms against {result[0]['decode_ms']:.1f} ms): "
               f"{top['per_sequence_ms']:.2f} ms per sequence. Medians of 8 passes, measured here.")
elif kind == "chunking":
    on, off = result["on"], result["off"]
    st.dataframe([{"chunked prefill": k, "decode steps skipped": v["skipped_steps"],
                   "longest wait between two tokens (ms)": round(v["longest_gap_ms"], 1),
                   "long prompt's prefill passes": v["prefill_passes"],
                   "long prompt's TTFT (steps)": v["long_ttft_steps"],
                   "long prompt's TTFT (ms)": round(v["long_ttft_ms"], 1)} for k, v in (("on", on), ("off", off))],
                 hide_index=True)
    st.caption("Requests already decoding when the long prompt arrived: with chunking off they skip a step while one "
               "pass prefills the whole prompt; with it on they get a token every step and the prompt takes several "
               f"passes. Same tokens either way: {'yes' if on['same_tokens'] else 'no'}.")
