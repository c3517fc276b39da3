"""Scale: what the KV cache costs for the models people serve, and where each step sits on the roofline."""

import pandas as pd
import streamlit as st

from engine import DecodeLabError, Stepper
from engine.measure import kvcalc
from engine.measure import roofline
from engine.measure.profile import decode_breakdown
from ui.frame import POLICY, device_roof, error, frame, plain, scale

st.title("Scale: KV-cache memory and the roofline")
settings, lm = frame(__file__)

# ------------------------------------------------------------------ KV-cache calculator
st.header("KV-cache calculator")
st.caption("The bundled model is tiny; the lesson is about big ones. Every figure below is computed from a model's "
           "published configuration (an estimate); for the live model the same formula gives exactly the bytes the "
           "engine measured on its real tensors. A sliding-window layer stops growing at its window.")
table = kvcalc.table()
LIVE = "live model (sidebar)"
CONFIG = "a model this server offers (config only)…"
choices = ([LIVE] if lm is not None else []) + list(table["name"]) + [CONFIG]
c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
choice = c1.selectbox("model", choices, index=choices.index("Llama-3-8B"), key="scale_model")
tokens = c2.number_input("context length (tokens)", 1, kvcalc.MAX_TOKENS, 8192, key="scale_tokens")
batch = c3.number_input("batch", 1, kvcalc.MAX_BATCH, 1, key="scale_batch")
kv_dtype = c4.selectbox("KV dtype", list(kvcalc.KV_DTYPES), index=1, key="scale_kv_dtype")
elem = kvcalc.KV_DTYPES[kv_dtype]


@st.cache_resource(max_entries=64, show_spinner=False)
def config_spec(source: str):
    """Config only, never weights; a refusal is cached too, so a rerun never repeats the work."""
    try:
        return kvcalc.from_config(source)
    except DecodeLabError as e:
        return e


arch = None
try:
    if choice == LIVE:
        arch = kvcalc.from_live(lm)
    elif choice in set(table["name"]):
        arch = kvcalc.from_table(choice)
    elif POLICY.open:
        src = st.text_input("Hugging Face id or local folder (only config.json is read)", key="scale_src")
        if src.strip():
            arch = config_spec(POLICY.check(src.strip()))
    else:
        src = st.selectbox("model offered by this server", list(POLICY.offered), key="scale_src_offered")
        arch = config_spec(POLICY.check(src))
except DecodeLabError as e:
    arch = e
if isinstance(arch, DecodeLabError):
    error(str(arch))
    arch = None

if arch is not None:
    total = arch.kv_bytes(tokens, batch, elem)
    m = st.columns(4)
    m[0].metric("per token (every layer full)", kvcalc.human(arch.kv_bytes_per_token(elem)))
    m[1].metric("per sequence", kvcalc.human(arch.kv_bytes(tokens, 1, elem)))
    m[2].metric(f"batch of {batch}", kvcalc.human(total))
    mha = arch.as_mha()
    saved = mha.kv_bytes(tokens, batch, elem)
    m[3].metric(f"if it were MHA ({arch.heads} K/V heads)", kvcalc.human(saved),
                delta=f"{arch.attention} saves ×{saved / total:.1f}" if arch.attention != "MHA" else "it is MHA",
                delta_color="off")
    st.code(kvcalc.formula(arch, tokens, batch, elem), language=None)
    if arch.sliding_layers:
        st.info(plain(f"{arch.name}: {arch.layer_pattern()}. A sliding layer keeps only its window (minus the one "
                      "new position each step adds), so past the window only the full layers grow."))
    if arch.mla_dim:
        st.info(plain(f"{arch.name} uses MLA (multi-head latent attention): it caches one compressed latent of "
                      f"{arch.mla_dim} numbers per token per layer instead of K and V for each head."))
    if arch.source.startswith("https://"):
        st.markdown(f"Source: [{arch.name} config.json]({arch.source})")
    else:
        st.caption(plain(f"Source: {arch.source}"))

    st.subheader("Does it fit?")
    acc = kvcalc.accelerators()
    a1, a2, a3 = st.columns([2, 1, 1])
    acc_name = a1.selectbox("accelerator (datasheet figures)", list(acc["name"]) + ["custom"],
                            index=int((acc["name"] == "NVIDIA H100 SXM").idxmax()), key="scale_acc")
    mem = 80.0 if acc_name == "custom" else acc.set_index("name").loc[acc_name, "memory_gb"]
    mem_gb = a2.number_input("memory (GB)", 0.1, 10_000.0, float(mem) if pd.notna(mem) else 16.0,
                             key=f"scale_mem_{acc_name}")
    w_dtype = a3.selectbox("weights dtype", list(kvcalc.KV_DTYPES), index=1, key="scale_w_dtype")
    fit = kvcalc.largest_fit(arch, mem_gb * 1e9, kvcalc.KV_DTYPES[w_dtype], elem, tokens)
    weights = kvcalc.weight_bytes(arch, kvcalc.KV_DTYPES[w_dtype])
    if fit["free_for_kv"] <= 0:
        st.error(f"The weights alone ({kvcalc.human(weights)}) do not fit in {mem_gb:g} GB.")
    else:
        st.write(f"Weights {kvcalc.human(weights)} + KV {kvcalc.human(total)} = "
                 f"**{kvcalc.human(weights + total)}** of {mem_gb:g} GB. "
                 f"Largest batch at {tokens:,} tokens: **{fit['max_batch']:,}**; longest context at batch 1: "
                 f"**{fit['max_tokens_batch1']:,} tokens** (estimates; activations and fragmentation not counted).")

    compare = st.multiselect("compare growth with", list(table["name"]),
                             ["Llama-2-7b", "Llama-3-8B", "gemma-3-270m", "DeepSeek-V3"], key="scale_compare")
    archs = [arch] + [kvcalc.from_table(n) for n in compare if n != arch.name]
    st.plotly_chart(kvcalc.growth_figure(archs, max(tokens, 1024), batch, elem, scale=scale()), key="scale_growth")

# ------------------------------------------------------------------ roofline
st.header("Roofline")
st.caption("A step is compute-bound when it does more FLOPs per byte it moves than the device's ridge, and "
           "memory-bound when it does fewer. The roof is min(peak FLOP/s, intensity × bandwidth). FLOPs and bytes "
           "are estimates, times are measured (medians), so a point below the roof shows costs the estimate does "
           "not count.")

r1, r2 = st.columns([2, 1])
sheets = kvcalc.accelerators().dropna(subset=["memory_bandwidth_gb_s", "peak_tflops_fp32"])
roof_choice = r1.selectbox("roof", ["this device (measured)"] + list(sheets["name"]), key="scale_roof")
if r2.button("Re-run device probe", key="scale_probe"):
    st.session_state["scale_nonce"] = st.session_state.get("scale_nonce", 0) + 1
here = device_roof(st.session_state.get("scale_nonce", 0))
roof = here if roof_choice == "this device (measured)" else roofline.from_datasheet(
    sheets.set_index("name").loc[roof_choice].to_dict() | {"name": roof_choice})
st.write(f"**{roof.name}**: peak {roof.peak_flops / 1e9:,.1f} GFLOP/s, bandwidth {roof.bandwidth / 1e9:,.1f} GB/s, "
         f"ridge at {roof.ridge:.1f} FLOP/byte.")


@st.cache_resource(max_entries=4, show_spinner="No steps yet in this session: measuring a demo run…")
def demo_traces(_lm, name: str):
    """A run to place on the roofline when this session has none: a 100-token prefill, 8 cached decode steps."""
    prompt = " ".join(["Once upon a time, there was a little girl named Lily."] * 12)
    ids = _lm.tokenizer(prompt)["input_ids"][:100]
    s = Stepper(_lm, _lm.tokenizer.decode(ids, skip_special_tokens=True), max_new_tokens=9, stop_on_eos=False)
    s.run()
    return s.traces


stepper = st.session_state.get("step_stepper")
traces = stepper.traces if stepper is not None and stepper.traces else []
if not traces and lm is not None:
    traces = demo_traces(lm, lm.spec.name)
    st.caption("This session has no steps yet, so the points are a demo run made on this server: a 100-token "
               "prefill and 8 cached decode steps. Steps taken on the Step-through page replace them.")
st.plotly_chart(roofline.figure(roof, roofline.place(traces), scale=scale()), key="scale_roofline")
if traces:
    h100 = roofline.h100()
    pre = next((t for t in traces if t.phase == "prefill"), None)
    if pre is not None:
        st.markdown(plain(f"The prefill of {pre.q_len} tokens: {pre.intensity_estimate:.1f} FLOP/byte (estimate): "
                          f"{roofline.bound(pre.intensity_estimate, roof)} on {roof.name} (ridge {roof.ridge:.1f}); on "
                          f"an H100 (ridge {h100.ridge:.0f}) the same step would be "
                          f"{roofline.bound(pre.intensity_estimate, h100)}."))
    st.caption("Each decode step must at least move its bytes once: bytes moved / bandwidth is a lower bound on "
               "its time.")
    st.dataframe(roofline.bound_frame(traces, roof), hide_index=True, height=200)
    if stepper is not None and stepper.traces and not stepper.done and st.button(
            "Where does a decode step's time go? (its matmuls timed alone; ops counted by torch.profiler)",
            key="scale_profile"):
        try:
            st.session_state["scale_breakdown"] = decode_breakdown(stepper, here.bandwidth)
        except DecodeLabError as e:
            error(str(e))
    b = st.session_state.get("scale_breakdown")
    if b:
        st.dataframe(pd.DataFrame([
            {"part": "memory lower bound: bytes moved / measured bandwidth (estimate)", "ms": round(b["memory_bound_ms"], 3)},
            {"part": "the step's matmuls alone, every weight matrix once (measured)", "ms": round(b["matmul_ms"], 3)},
            {"part": f"the rest: {b['ops']} aten ops of attention, norms, RoPE, cache writes, and the Python around them",
             "ms": round(b["rest_ms"], 3)},
            {"part": f"the whole step (median of {b['runs']})", "ms": round(b["wall_ms"], 3)},
        ]), hide_index=True)
        st.caption(plain(f"On {b['device']}: the memory bound is {b['memory_bound_ms'] / b['wall_ms']:.0%} of the step "
                         f"and the matmuls {b['matmul_ms'] / b['wall_ms']:.0%}; the other "
                         f"{b['rest_ms'] / b['wall_ms']:.0%} is the many small operations around them. A bigger model "
                         "makes each matmul longer and that share smaller."))
