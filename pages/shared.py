"""The sidebar every page shares, and the one model cache of the server.

The model is loaded once per server (st.cache_resource) and shared read-only by
every session; each session's run lives in st.session_state under page-prefixed keys.
"""

from __future__ import annotations

import gc
import json
import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from engine import DecodeLabError, LoadedModel, Sampling, bundled_models, load_model
from engine.device import use_serving_threads
from engine.share import make_link, read_link

OTHER = "Other: Hugging Face id or folder…"
ASSETS = Path(__file__).resolve().parent.parent / "assets"
PROMPTS = json.loads((ASSETS / "prompts.json").read_text())
SCENARIOS = json.loads((ASSETS / "scenarios.json").read_text())  # ready-made runs: a title, a why, a link
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


# Sidebar widgets take their starting values from here (not from value=...), so a shared
# link can set them first without streamlit warning about two sources of truth.
DEFAULTS = {"side_mode": "greedy", "side_temperature": 0.8, "side_top_k": 0, "side_top_p": 1.0, "side_rep": 1.0,
            "side_seed": 0, "side_max_new": 40, "side_stops": "", "side_cache": True,
            "side_presenter": False}
# Presenter mode: everything larger, for the back row of a classroom.
PRESENTER_CSS = """<style>
html { font-size: 22px; }
[data-testid="stMainBlockContainer"] { max-width: 100%; padding-left: 2rem; padding-right: 2rem; }
[data-testid="stMarkdownContainer"] p, [data-testid="stCaptionContainer"] { font-size: 1.1rem; }
</style>"""
# link setting -> sidebar widget key
LINK_KEYS = {"rule": "side_mode", "temperature": "side_temperature", "top_k": "side_top_k", "top_p": "side_top_p",
             "repetition_penalty": "side_rep", "seed": "side_seed", "max_new_tokens": "side_max_new",
             "stop": "side_stops"}


def apply_link() -> list[str]:
    """Once per session, before any widget is drawn: load settings from the URL.

    Returns one plain reason per link value that was refused (and so ignored).
    """
    if st.session_state.get("link_read"):
        return []
    st.session_state["link_read"] = True
    values, problems = read_link(st.query_params.to_dict())
    return apply_values(values, problems)


def apply_values(values: dict, problems: list[str]) -> list[str]:
    """Put checked link values (from a URL or a scenario) into the widgets' state; call before they are drawn."""
    for name, key in LINK_KEYS.items():
        if name in values:
            st.session_state[key] = values[name]
    if "cache" in values:
        st.session_state["side_cache"] = values["cache"] == "on"
    if "presenter" in values:
        st.session_state["side_presenter"] = values["presenter"] == "on"
    model = values.get("model")
    if model in bundled_models():
        st.session_state["side_model"] = model
    elif model and BUNDLED_ONLY:
        problems.append(f"link model {model!r} ignored: this server only offers its bundled models")
    elif model:
        st.session_state.update(side_model=OTHER, side_custom=model, side_custom_loaded=model)
    if "prompt" in values:
        st.session_state["step_prompt"] = values["prompt"]
        # the preset box names the preset this prompt is, or shows "(your own prompt)"
        same = next((x["title"] for x in PROMPTS if x["prompt"] == values["prompt"]), None)
        st.session_state["step_preset_used"] = st.session_state["step_preset"] = same
    if "steps" in values:
        st.session_state["step_replay"] = values["steps"]
    if "lesson" in values:
        st.session_state["lesson_wanted"] = values["lesson"]
    return problems


def write_link(settings: "Settings", **extra) -> None:
    """Put the settings (and a page's extras, such as prompt and steps) in the URL, replacing what was there."""
    sp = settings.sampling
    st.query_params.from_dict(make_link({
        "model": settings.source, "rule": "greedy" if sp.greedy else "sample", "temperature": sp.temperature,
        "top_k": sp.top_k, "top_p": sp.top_p, "repetition_penalty": sp.repetition_penalty, "seed": sp.seed,
        "max_new_tokens": settings.max_new_tokens, "stop": ",".join(settings.stop_strings),
        "cache": "on" if settings.use_cache else "off",
        "presenter": "on" if st.session_state.get("side_presenter") else None, **extra,
    }))


@st.cache_resource(max_entries=4, show_spinner=False)
def get_model(source: str, device: str, dtype: str) -> LoadedModel:
    lm = load_model(source, device=None if device == "auto" else device, dtype=None if dtype == "auto" else dtype)
    if lm.device.type == "cpu":
        use_serving_threads(lm.summary.parameters)  # see engine/device.py: the browser needs a core too
    gc.freeze()  # the loaded libraries and weights live for the whole server: keep them out of every GC pass
    return lm


def sidebar() -> tuple[Settings, LoadedModel | None]:
    """Draw the shared sidebar; return the settings and the loaded model (None if it failed)."""
    sb = st.sidebar
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)
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
    temperature = sb.slider("temperature", 0.0, 2.0, step=0.05, key="side_temperature", disabled=not sample)
    top_k = sb.number_input("top-k (0 = off)", 0, 1_000_000, key="side_top_k", disabled=not sample)
    top_p = sb.slider("top-p (1 = off)", 0.01, 1.0, step=0.01, key="side_top_p", disabled=not sample)
    rep = sb.slider("repetition penalty (1 = off)", 0.5, 2.0, step=0.05, key="side_rep")
    seed = sb.number_input("seed", 0, 2**31 - 1, key="side_seed")
    sb.header("Run")
    max_new = sb.number_input("max new tokens", 1, 512, key="side_max_new")
    stops_text = sb.text_input("stop strings (comma-separated)", key="side_stops",
                               help="Generation stops when the new text contains any of these.")
    use_cache = sb.toggle("KV cache", key="side_cache",
                          help="Off: every decode step recomputes the whole sequence.")

    sb.header("Classroom")
    if sb.toggle("presenter mode", key="side_presenter",
                 help="Larger text for a projector. Keys: P prefill, N next token, E run to end, X reset. "
                      "A link with presenter=on opens with the sidebar folded away."):
        st.markdown(PRESENTER_CSS, unsafe_allow_html=True)

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


def frame() -> tuple["Settings", LoadedModel | None]:
    """What app.py prepared for this run: the sidebar's settings and the model.

    If the first request after a server start is a deep link (/race, a shared
    lesson URL), streamlit runs that pages/ file alone, in its old folder-based
    multipage mode, and app.py never runs. Switch that mode off and rerun, so
    app.py draws the frame and st.navigation serves the page that was asked for.
    """
    if "settings" not in st.session_state:
        PagesManager.uses_pages_directory = False
        st.rerun()
    return st.session_state["settings"], st.session_state["lm"]
