"""Scale: what the KV cache costs for the models people serve, and where each step sits on the roofline."""

import streamlit as st

from engine import DecodeLabError
from physics import kvcalc, roofline
from physics.units import human_bytes
from topics.ladder import scale_draw as scale_draw
from topics.ladder import tables
from topics.ladder.page_ladder import grow_the_model
from topics.ladder.profile import DemoRun, breakdown_frame, breakdown_note, decode_breakdown, where_time_goes
from ui import model
from ui.charts import chart
from ui.model import device_roof
from ui.setup import page_setup
from ui.style import scale
from ui.text import error, plain, warning


def show(beside_curve=None) -> None:
    """The Scale page, drawn (pages/scale.py is its door; `beside_curve(lm)` draws below the pass-of-n curve)."""
    st.title("Scale: the model grown, KV memory, the roofline")
    settings, lm = page_setup("scale")
    ladder = grow_the_model(lm, settings) if lm is not None else None  # the size ladder, measured here
    if beside_curve is not None:  # topics/bytes: fewer bytes, faster decode (a topic the door hands in)
        beside_curve(lm)

    # ------------------------------------------------------------------ KV-cache calculator
    st.header("KV-cache calculator")
    st.caption("The bundled model is tiny; the lesson is about big ones. Every figure below is computed from a model's "
               "published configuration (an estimate); for the live model the same formula gives exactly the bytes the "
               "engine measured on its real tensors. A sliding-window layer stops growing at its window.")


    @st.cache_resource(show_spinner=False)
    def _table():
        """The bundled tables, read once per server, not on every rerun for every model shown."""
        return kvcalc.model_names(), kvcalc.accelerators()


    @st.cache_resource(max_entries=256, show_spinner=False)
    def _spec(name: str):
        return kvcalc.from_table(name)


    names, _accelerators = _table()
    LIVE = "live model (sidebar)"
    CONFIG = "a model this server offers (config only)…"
    choices = ([LIVE] if lm is not None else []) + list(names) + [CONFIG]
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    choice = c1.selectbox("model", choices, index=choices.index("Llama-3-8B"), key="scale_model",
                         persist_state="session")
    tokens = c2.number_input("context length (tokens)", 1, kvcalc.MAX_TOKENS, 8192, key="scale_tokens",
                            persist_state="session")
    batch = c3.number_input("batch", 1, kvcalc.MAX_BATCH, 1, key="scale_batch", persist_state="session")
    kv_dtype = c4.selectbox("KV dtype", list(kvcalc.KV_DTYPES), index=1, key="scale_kv_dtype", persist_state="session")
    elem = kvcalc.KV_DTYPES[kv_dtype]


    @st.cache_resource(max_entries=64, show_spinner=False)
    def config_spec(source: str):
        """Config only, never weights; a refusal is cached too, so a rerun never repeats the work."""
        try:
            return kvcalc.from_source(source)
        except DecodeLabError as e:
            return e


    arch = None
    try:
        if choice == LIVE:
            arch = kvcalc.from_live(lm)
        elif choice in set(names):
            arch = _spec(choice)
        elif model.POLICY.open:
            src = st.text_input("Hugging Face id or local folder (only config.json is read)", key="scale_src",
                                persist_state="session")
            if src.strip():
                arch = config_spec(model.POLICY.check(src.strip()))
        else:
            src = st.selectbox("model offered by this server", list(model.POLICY.offered), key="scale_src_offered",
                               persist_state="session")
            arch = config_spec(model.POLICY.check(src))
    except DecodeLabError as e:
        arch = e
    if isinstance(arch, DecodeLabError):
        error(str(arch))
        arch = None

    if arch is not None:
        too_long = kvcalc.context_note(arch, tokens)
        if too_long:
            warning(too_long)
        total = arch.kv_bytes(tokens, batch, elem)
        m = st.columns(4)
        m[0].metric("per token (every layer full)", human_bytes(arch.kv_bytes_per_token(elem)))
        m[1].metric("per sequence", human_bytes(arch.kv_bytes(tokens, 1, elem)))
        m[2].metric(f"batch of {batch}", human_bytes(total))
        mha = arch.as_mha()
        saved = mha.kv_bytes(tokens, batch, elem)
        m[3].metric(f"if it were MHA ({arch.heads} K/V heads)", human_bytes(saved),
                    delta=f"{arch.attention} saves ×{saved / total:.1f}" if arch.attention != "MHA" else "it is MHA",
                    delta_color="off")
        st.code(kvcalc.formula(arch, tokens, batch, elem), language=None, wrap_lines=True)  # whole on a phone
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
        a1, a2, a3 = st.columns([2, 1, 1])
        cards = [a.name for a in _accelerators]
        acc_name = a1.selectbox("accelerator (datasheet figures)", cards + ["custom"],
                                index=cards.index("NVIDIA H100 SXM"), key="scale_acc", persist_state="session")
        mem = 80.0 if acc_name == "custom" else kvcalc.accelerator(acc_name).memory_gb
        mem_gb = a2.number_input("memory (GB)", 0.1, 10_000.0, float(mem) if mem is not None else 16.0,
                                 key=f"scale_mem_{acc_name}", persist_state="session")
        w_dtype = a3.selectbox("weights dtype", list(kvcalc.KV_DTYPES), index=1, key="scale_w_dtype",
                                persist_state="session")
        fit = kvcalc.largest_fit(arch, mem_gb * 1e9, kvcalc.KV_DTYPES[w_dtype], elem, tokens)
        weights = kvcalc.weight_bytes(arch, kvcalc.KV_DTYPES[w_dtype])
        if fit.free_for_kv <= 0:
            st.error(f"The weights alone ({human_bytes(weights)}) do not fit in {mem_gb:g} GB "
                     f"({human_bytes(mem_gb * 1e9)}).")
        else:
            st.write(f"Weights {human_bytes(weights)} + KV {human_bytes(total)} = "
                     f"**{human_bytes(weights + total)}** of {mem_gb:g} GB ({human_bytes(mem_gb * 1e9)}, in the "
                     "same binary units). "
                     f"Largest batch at {tokens:,} tokens: **{fit.max_batch:,}**; longest context at batch 1: "
                     f"**{fit.max_tokens_batch1:,} tokens** (estimates; activations and fragmentation not counted)"
                     + (f", though {arch.name} reads at most **{fit.context_limit:,}**."
                        if fit.context_limit and fit.max_tokens_batch1 > fit.context_limit else "."))

        compare = st.multiselect("compare growth with", list(names),
                                 ["Llama-2-7b", "Llama-3-8B", "gemma-3-270m", "DeepSeek-V3"], key="scale_compare",
                                 persist_state="session")
        archs = [arch] + [_spec(n) for n in compare if n != arch.name]
        chart(scale_draw.kv_growth_figure(archs, max(tokens, 1024), batch, elem, scale=scale()), key="scale_growth")

    # ------------------------------------------------------------------ roofline
    st.header("Roofline")
    st.caption("Each step sits at its arithmetic intensity (FLOPs per byte it moves, both estimates): right of the "
               "device's ridge is the compute side, left of it the memory side (a prediction). The roof is min(peak "
               "FLOP/s, intensity × bandwidth). Times are measured here (medians) on the readable path (transformers' "
               "eager code: the steps a class takes), and each says how near its roof it "
               "ran: the share of the bandwidth (MBU) or of the matmul peak (MFU). Compute- or memory-bound when that "
               "bound is most of the time (half or more), that side but not bound by it from a third to a half, "
               "overhead-bound below a third. A datasheet roof is a card nothing ran on: its points are predictions, "
               "in its own dtype.")

    BOUND_COLUMNS = {  # short headers a projector shows whole; the long names stay in the help and in the CSV
        "side of the ridge (predicted)": st.column_config.TextColumn("side (predicted)",
                                                                     help="the step's intensity against the ridge"),
        "what the measurement shows": st.column_config.TextColumn("verdict (measured)", help=roofline.VERDICT_RULE),
        "share of its roof (measured)": st.column_config.TextColumn("share of its roof",
                                                                    help="the larger bound over the measured time"),
        "measured ms (median)": st.column_config.NumberColumn("measured ms", help="median of the timed repeats"),
        "memory bound ms (bytes / bandwidth)": st.column_config.NumberColumn("memory ms (est.)",
                                                                             help="the memory bound, in ms: bytes / "
                                                                                  "bandwidth, an estimate"),
        "compute bound ms (FLOPs / peak)": st.column_config.NumberColumn("compute ms (est.)",
                                                                           help="the compute bound, in ms: FLOPs / "
                                                                                "peak, an estimate"),
        "measured / larger bound": st.column_config.NumberColumn("× bound", help="measured / the larger bound"),
        "FLOP/byte (estimate)": st.column_config.NumberColumn("FLOP/byte (est.)", help="arithmetic intensity (estimate)"),
    }
    HERE, BESIDE = "this device (measured)", " (predicted beside it)"
    r1, r2 = st.columns([2, 1])
    sheets = [a for a in _accelerators if a.bandwidth_gb_s is not None and a.peak_tflops_fp32 is not None]
    roof_choice = r1.selectbox("roof", [HERE] + [f"{a.name}{BESIDE}" for a in sheets], key="scale_roof",
                                 persist_state="session")
    if r2.button("Re-run device probe", key="scale_probe"):
        st.session_state["scale_nonce"] = st.session_state.get("scale_nonce", 0) + 1
    here = device_roof(st.session_state.get("scale_nonce", 0))
    card = roof_choice.removesuffix(BESIDE)
    gpu = None if roof_choice == HERE else roofline.from_datasheet(kvcalc.accelerator(card))
    st.write(plain(scale_draw.roof_sentence(here)))
    apart = scale_draw.ridges_apart(here, ladder)
    if apart:  # two ridges on one page for one kind of device: why, in numbers
        st.caption(plain(apart))
    if gpu is not None:
        st.write(plain(f"{gpu.name}: peak {gpu.peak_flops / 1e12:,.0f} TFLOP/s in {gpu.dtype}, bandwidth "
                       f"{gpu.bandwidth / 1e12:,.2f} TB/s, ridge at {gpu.ridge:.0f} FLOP/byte (~{gpu.ridge_tokens:.0f} "
                       f"tokens). Nothing ran there: its points are PREDICTED, each pass counted in {gpu.dtype}."))


    @st.cache_resource(max_entries=4, show_spinner="Measuring a demo run and taking one of its decode steps apart "
                                                    "(once per server)…")
    def demo(_lm, model: tuple, _bandwidth: float) -> DemoRun:
        """topics.ladder.profile.where_time_goes: a 100-token prefill, 8 decode steps, the next step taken apart.

        Kept per model, not per bandwidth: a new device probe only moves the memory bound (see `at_bandwidth`), so
        it does not run the demo again."""
        return where_time_goes(_lm, _bandwidth)


    run = st.session_state.get("step_run")
    traces = run.records if run is not None and run.records else []
    spec = run.lm.spec if traces else (lm.spec if lm is not None else None)
    shown = None
    if lm is not None:
        shown = demo(lm, (settings.source, settings.device, settings.dtype), here.bandwidth)
        if not traces:
            traces = list(shown.traces)
            st.caption("This session has no steps yet, so the points are a demo run made on this server: a 100-token "
                       "prefill and 8 cached decode steps. Steps taken on the Step-through page replace them.")
    measured = scale_draw.roofline_figure(here, roofline.place(traces), scale=scale())
    if gpu is None or not traces:
        chart(measured, key="scale_roofline")
    else:  # this device's measured points beside the card's predictions: neither judged by the other's roof
        left, right = st.columns(2, gap="small")
        chart(on=left, fig=measured, key="scale_roofline")
        chart(on=right, fig=scale_draw.roofline_figure(gpu, roofline.predicted_points(traces, spec, gpu), scale=scale(),
                                                      predicted=True), key="scale_roofline_predicted")
    if traces:
        pre = next((t for t in traces if t.phase == "prefill"), None)
        if pre is not None:
            st.markdown(plain(scale_draw.prefill_sentence(pre, spec, here, gpu or roofline.h100())))
        st.caption("Every step must at least move its bytes once (bytes / bandwidth) and do its arithmetic once "
                   "(FLOPs / peak): the larger of the two is a lower bound on its time.")
        st.dataframe(tables.bound_frame(traces, here), hide_index=True, height=240, width="stretch",
                     column_config=BOUND_COLUMNS)
        if gpu is not None:
            st.caption(plain(f"Predicted on the {roofline.short_name(gpu)} ({gpu.dtype}, datasheet figures): the same "
                             "passes, nothing measured there, so no verdict."))
            st.dataframe(tables.prediction_frame(traces, spec, gpu), hide_index=True, height=240, width="stretch")

    st.subheader("Where does a decode step's time go?")
    st.caption("A readable-path decode step (transformers' eager code), taken apart: its matmuls are timed alone "
               "(every weight matrix once); torch.profiler counts the operations of the whole step. Shown for the "
               "demo run until you measure the next step of your own run.")
    if run is not None and run.records and not run.done and st.button(
            "Take the next step of my run apart", key="scale_profile"):
        try:
            st.session_state["scale_breakdown"] = decode_breakdown(run, here.bandwidth)
        except DecodeLabError as e:
            error(str(e))
    mine = st.session_state.get("scale_breakdown")
    b = mine or (shown.breakdown.at_bandwidth(here.bandwidth) if shown else None)
    if b:
        st.dataframe(breakdown_frame(b), hide_index=True)
        which = ("your run's next step, measured now" if mine else
                 f"the demo run's next decode step (after {shown.traces[-1].kv_len} positions), measured on this "
                 "server once (not the ladder's recording above: another step, with a split of its own)")
        st.caption(plain(breakdown_note(b, which)))
