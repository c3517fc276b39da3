"""Scale: what the KV cache costs for the models people serve, and where each step sits on the roofline."""

import pandas as pd
import streamlit as st

from pages.shared import frame

from engine import DecodeLabError, kvcalc, roofline
from engine.device import pick_device, pick_dtype

st.title("Scale: KV-cache memory and the roofline")
settings, lm = frame()

# ------------------------------------------------------------------ KV-cache calculator
st.header("KV-cache calculator")
st.caption("The bundled model is tiny; the lesson is about big ones. Every figure below is computed from a model's "
           "published configuration (an estimate); for the live model the same formula gives exactly the bytes the "
           "engine measured on its real tensors.")
table = kvcalc.table()
LIVE = "live model (sidebar)"
choices = ([LIVE] if lm is not None else []) + list(table["name"]) + ["Hugging Face id or folder (config only)…"]
c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
choice = c1.selectbox("model", choices, index=choices.index("Llama-3-8B"), key="scale_model")
tokens = c2.number_input("context length (tokens)", 1, 10_000_000, 8192, key="scale_tokens")
batch = c3.number_input("batch", 1, 100_000, 1, key="scale_batch")
kv_dtype = c4.selectbox("KV dtype", list(kvcalc.KV_DTYPES), index=1, key="scale_kv_dtype")
elem = kvcalc.KV_DTYPES[kv_dtype]

arch = None
try:
    if choice == LIVE:
        arch = kvcalc.from_summary(lm.summary)
    elif choice in set(table["name"]):
        arch = kvcalc.from_table(choice)
    else:
        src = st.text_input("Hugging Face id or local folder (only config.json is read)", key="scale_src")
        if src.strip():
            arch = kvcalc.from_config(src.strip())
except DecodeLabError as e:
    st.error(str(e))

if arch is not None:
    total = kvcalc.kv_bytes(arch, tokens, batch, elem)
    m = st.columns(4)
    m[0].metric("per token", kvcalc.human(kvcalc.bytes_per_token(arch, elem)))
    m[1].metric("per sequence", kvcalc.human(kvcalc.kv_bytes(arch, tokens, 1, elem)))
    m[2].metric(f"batch of {batch}", kvcalc.human(total))
    mha = arch.as_mha()
    saved = kvcalc.kv_bytes(mha, tokens, batch, elem)
    m[3].metric(f"if it were MHA ({arch.heads} K/V heads)", kvcalc.human(saved),
                delta=f"{arch.attention} saves ×{saved / total:.1f}" if arch.attention != "MHA" else "it is MHA",
                delta_color="off")
    st.code(kvcalc.formula(arch, tokens, batch, elem), language=None)
    if arch.mla_dim:
        st.info(f"{arch.name} uses MLA (multi-head latent attention): it caches one compressed latent of "
                f"{arch.mla_dim} numbers per token per layer instead of K and V for each head.")
    st.caption(f"Source: {arch.source}")

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
                             ["Llama-2-7b", "Llama-3-8B", "falcon-7b", "DeepSeek-V3"], key="scale_compare")
    archs = [arch] + [kvcalc.from_table(n) for n in compare if n != arch.name]
    st.plotly_chart(kvcalc.growth_figure(archs, max(tokens, 1024), batch, elem), key="scale_growth")

# ------------------------------------------------------------------ roofline
st.header("Roofline")
st.caption("A step is compute-bound when it does many FLOPs per byte it moves (prefill: every weight is used for all "
           "s positions), and memory-bound when it does few (a cached decode step reads every weight to compute one "
           "position). The roof is min(peak FLOP/s, intensity × bandwidth). Points are this session's traced steps "
           "on the Step-through page: FLOPs and bytes are estimates, times are measured, so a point below the roof "
           "shows overheads the estimate does not count.")


@st.cache_resource(show_spinner=False)
def device_roof(device_name: str, _nonce: int) -> roofline.DeviceRoof:
    device = pick_device(device_name)
    return roofline.probe(device, pick_dtype(device))


r1, r2 = st.columns([2, 1])
sheets = kvcalc.accelerators().dropna(subset=["memory_bandwidth_gb_s", "peak_tflops_fp32"])
roof_choice = r1.selectbox("roof", ["this device (measured)"] + list(sheets["name"]), key="scale_roof")
if r2.button("Re-run device probe", key="scale_probe"):
    st.session_state["scale_nonce"] = st.session_state.get("scale_nonce", 0) + 1
if roof_choice == "this device (measured)":
    with st.spinner("Measuring matmul FLOP/s and memory bandwidth (a few seconds, once per server)…"):
        roof = device_roof(settings.device, st.session_state.get("scale_nonce", 0))
else:
    roof = roofline.from_datasheet(sheets.set_index("name").loc[roof_choice].to_dict() | {"name": roof_choice})
st.write(f"**{roof.name}**: peak {roof.peak_flops / 1e9:,.1f} GFLOP/s, bandwidth {roof.bandwidth / 1e9:,.1f} GB/s, "
         f"ridge at {roof.ridge:.1f} FLOP/byte.")
stepper = st.session_state.get("step_stepper")
traces = stepper.traces if stepper is not None else []
st.plotly_chart(roofline.figure(roof, roofline.place(traces)), key="scale_roofline")
if not traces:
    st.info("Run some steps on the Step-through page to place them on the roofline.")
else:
    st.caption("Each decode step must at least move its bytes once: bytes moved / bandwidth is a lower bound on "
               "its time.")
    st.dataframe(roofline.bound_frame(traces, roof), hide_index=True, height=240)
