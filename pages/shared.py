"""The sidebar every page shares, and the one model cache of the server.

The model is loaded once per server (st.cache_resource) and shared read-only by
every session; each session's run lives in st.session_state under page-prefixed keys.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from engine import DecodeLabError, LoadedModel, Sampling, bundled_models, load_model

OTHER = "Other: Hugging Face id or folder…"
PROMPTS = json.loads((Path(__file__).resolve().parent.parent / "assets" / "prompts.json").read_text())
BUNDLED_ONLY = os.environ.get("DECODE_LAB_BUNDLED_ONLY") == "1"  # a teacher can lock the model list


@dataclass(frozen=True)
class Settings:
    """Everything the sidebar decides, in one value: a change in it resets a run."""

    source: str
    device: str
    dtype: str
    sampling: Sampling
    max_new_tokens: int
    stop_strings: tuple[str, ...]
    use_cache: bool


@st.cache_resource(max_entries=4, show_spinner=False)
def get_model(source: str, device: str, dtype: str) -> LoadedModel:
    return load_model(source, device=None if device == "auto" else device, dtype=None if dtype == "auto" else dtype)


def sidebar() -> tuple[Settings, LoadedModel | None]:
    """Draw the shared sidebar; return the settings and the loaded model (None if it failed)."""
    sb = st.sidebar
    sb.header("Model")
    names = bundled_models()
    choice = sb.selectbox("model", names + ([] if BUNDLED_ONLY else [OTHER]), key="side_model",
                          help="Bundled models work offline. The first is the default: Llama with GQA.")
    source = choice
    if choice == OTHER:
        typed = sb.text_input("Hugging Face id or local folder", key="side_custom",
                              placeholder="e.g. HuggingFaceTB/SmolLM2-135M or /path/to/model")
        if sb.button("Load", key="side_load") and typed.strip():
            st.session_state["side_custom_loaded"] = typed.strip()
        source = st.session_state.get("side_custom_loaded") or (names[0] if names else "default")
    c1, c2 = sb.columns(2)
    device = c1.selectbox("device", ["auto", "cpu", "cuda", "mps"], key="side_device")
    dtype = c2.selectbox("dtype", ["auto", "float32", "float16", "bfloat16"], key="side_dtype")

    sb.header("Next-token choice")
    mode = sb.radio("rule", ["greedy", "sample"], horizontal=True, key="side_mode")
    sample = mode == "sample"
    temperature = sb.slider("temperature", 0.0, 2.0, 0.8, 0.05, key="side_temperature", disabled=not sample)
    top_k = sb.number_input("top-k (0 = off)", 0, 1_000_000, 0, key="side_top_k", disabled=not sample)
    top_p = sb.slider("top-p (1 = off)", 0.01, 1.0, 1.0, 0.01, key="side_top_p", disabled=not sample)
    rep = sb.slider("repetition penalty (1 = off)", 0.5, 2.0, 1.0, 0.05, key="side_rep")
    seed = sb.number_input("seed", 0, 2**31 - 1, 0, key="side_seed")
    sb.header("Run")
    max_new = sb.number_input("max new tokens", 1, 512, 40, key="side_max_new")
    stops_text = sb.text_input("stop strings (comma-separated)", key="side_stops",
                               help="Generation stops when the new text contains any of these.")
    use_cache = sb.toggle("KV cache", value=True, key="side_cache",
                          help="Off: every decode step recomputes the whole sequence.")

    settings = Settings(
        source=source, device=device, dtype=dtype,
        sampling=Sampling(greedy=not sample, temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                          repetition_penalty=float(rep), seed=int(seed)),
        max_new_tokens=int(max_new),
        stop_strings=tuple(s for s in (x.strip() for x in stops_text.split(",")) if s),
        use_cache=use_cache,
    )
    try:
        with st.spinner(f"Loading {source}…"):
            lm = get_model(source, device, dtype)
    except (DecodeLabError, ValueError) as e:
        sb.error(str(e))
        return settings, None
    sb.caption(f"{lm.summary.architecture} · {lm.summary.parameters:,} params · {lm.summary.attention} · "
               f"{lm.summary.dtype} on {lm.summary.device}")
    return settings, lm
