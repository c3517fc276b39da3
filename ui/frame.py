"""The sidebar every page shares, the one model cache of the server, and the safe ways to show text.

The model is loaded once per server (st.cache_resource) and shared read-only by
every session; each session's run lives in st.session_state under page-prefixed keys.
Which models a browser may choose is the server's allow-list (engine/load/policy.py).
"""

from __future__ import annotations

import gc
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from engine import DecodeLabError, LoadedModel, Sampling, load_model
from engine.draw.warm import warm_pictures
from engine.load.device import release_memory, use_serving_threads
from engine.load.checks import hub_reachable
from engine.load.policy import from_settings
from engine.share import make_link, read_link

OTHER = "Other: Hugging Face id or folder…"
from engine.paths import ASSETS  # noqa: E402
PROMPTS = json.loads((ASSETS / "prompts.json").read_text())
SCENARIOS = json.loads((ASSETS / "scenarios.json").read_text())  # ready-made runs: a title, a why, a link
SMALL_MODELS = json.loads((ASSETS / "small_models.json").read_text())  # well-known models to load when allowed
POLICY = from_settings(sys.argv[1:])  # `streamlit run app.py -- --model X --open-models`, or the environment


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
            "side_seed": 0, "side_max_new": 40, "side_stops": "", "cache_on": True,
            "side_presenter": False}
# Compact everywhere: the control bar, the stage and a view fit a 1280x720 projector.
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.4rem; padding-bottom: 1rem; max-width: 100%;
  padding-left: 1.5rem; padding-right: 1.5rem; }
[data-testid="stHeader"] { height: 2.2rem; min-height: 2.2rem; }
[data-testid="stVerticalBlock"] { gap: 0.55rem; }
h1 { font-size: 2rem !important; padding: 0.1rem 0 0.2rem 0 !important; }   /* a page's title tops its sections */
[data-testid="stMain"] h2 { font-size: 1.55rem !important; padding: 0.5rem 0 0.1rem 0 !important; }
[data-testid="stMain"] h3 { font-size: 1.25rem !important; }
[data-testid="stTable"] td, [data-testid="stTable"] th { white-space: normal !important; overflow-wrap: anywhere; }
.dl-stage { overflow-x: auto; }
.dl-stage img { display: block; width: 100%; height: auto; }
.st-key-step_warm { height: 0; overflow: hidden; margin-top: -0.55rem; }  /* a chart drawn out of sight: see step_through */
@media (max-width: 700px) {                  /* a phone: the bar folds into two short rows, views stack */
  .dl-stage img { min-width: 520px; direction: ltr; }  /* the picture scrolls sideways; its text stays legible */
  .dl-stage { direction: rtl; }                /* ...and starts at its right end: the new K/V column, the next token */
  .modebar-container, [data-testid="stElementToolbar"] { display: none !important; }  /* never over a chart's title */
  .katex-display { font-size: 0.8em; }         /* a formula fits the width instead of running off it */
  .dl-picture { overflow-x: auto; }            /* a lesson's picture (lookahead, one request) scrolls sideways... */
  .dl-picture img { min-width: 640px; }        /* ...with its text legible, like the stage */
  .dl-serve .dl-stage img { min-width: 0; }    /* a serving picture shows whole: a pool, a pass... */
  .st-key-serve_timeline .dl-serve .dl-stage img { min-width: 760px; }  /* ...but the timeline scrolls, from the
                                                                           newest step at its right end */
  .dl-text { display: none; }                  /* the stage's token strip already shows the text */
  [data-testid="stMainBlockContainer"] { padding-left: 0.6rem; padding-right: 0.6rem; padding-top: 2.2rem; }
  button kbd { display: none !important; }     /* keyboard hints: a phone has no keyboard */
  button[data-testid^="stBaseButton"] { padding: 0.2rem 0.55rem !important; min-height: 2.1rem !important; }
  [data-testid="stVerticalBlock"] { gap: 0.35rem; }
}
</style>"""
# Presenter mode: larger text for the back row of a classroom; charts scale with PRESENTER_SCALE.
PRESENTER_CSS = """<style>
html { font-size: 18px; }
[data-testid="stMarkdownContainer"] p, [data-testid="stCaptionContainer"] { font-size: 1.05rem; }
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * { font-size: 2.35rem !important; line-height: 1.2; }
</style>"""
PRESENTER_SCALE = 1.35
# link setting -> sidebar widget key
LINK_KEYS = {"rule": "side_mode", "temperature": "side_temperature", "top_k": "side_top_k", "top_p": "side_top_p",
             "repetition_penalty": "side_rep", "seed": "side_seed", "max_new_tokens": "side_max_new",
             "stop": "side_stops"}


# ------------------------------------------------------------------ text from users is never markup

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$&])")


def plain(text: str) -> str:
    """User-controlled text made inert for st.markdown / st.error / st.warning: every markdown, HTML and
    streamlit directive character is backslash-escaped, so a link, an image or :red[...] shows as typed."""
    return _MD_SPECIAL.sub(r"\\\1", str(text)).replace("\n", "  \n")


def error(text: str, where=st) -> None:
    where.error(plain(text), icon=":material/error:")


def warning(text: str, where=st) -> None:
    where.warning(plain(text), icon=":material/warning:")


def scale() -> float:
    """How much larger charts are drawn: 1, or PRESENTER_SCALE in presenter mode."""
    return PRESENTER_SCALE if st.session_state.get("side_presenter") else 1.0


# ------------------------------------------------------------------ links


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
        st.session_state["cache_on"] = values["cache"] == "on"
    if "presenter" in values:
        st.session_state["side_presenter"] = values["presenter"] == "on"
    model = values.get("model")
    if model in POLICY.offered:
        st.session_state["side_model"] = model
    elif model and POLICY.open:
        st.session_state.update(side_model=OTHER, side_custom=model, side_custom_loaded=model)
    elif model:
        problems.append("link parameter model ignored: that model is not offered by this server")
    if "prompt" in values:
        st.session_state["step_prompt"] = values["prompt"]
        # the preset box names the preset this prompt is, or shows "(your own prompt)"
        same = next((x["title"] for x in PROMPTS if x["prompt"] == values["prompt"]), None)
        st.session_state["step_preset_used"] = st.session_state["step_preset"] = same
    if "steps" in values:
        st.session_state["step_replay"] = values["steps"]
    if "at" in values:
        st.session_state["step_at_wanted"] = values["at"]
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


# ------------------------------------------------------------------ the one model cache


@st.cache_resource(max_entries=8, show_spinner=False)
def _load(source: str, device: str, dtype: str) -> LoadedModel | DecodeLabError:
    """Load once per server; a refusal is cached too, so a page rerun never repeats a failed load."""
    try:
        lm = load_model(source, device=None if device == "auto" else device,
                        dtype=None if dtype == "auto" else dtype)
    except DecodeLabError as e:
        release_memory()
        return e
    if lm.device.type == "cpu":
        use_serving_threads(int(lm.spec.parameters))  # see engine/load/device.py: the browser needs a core too
    warm_pictures(lm)  # every picture of a step drawn once now: a class's first Prefill costs what later ones do
    gc.freeze()  # the loaded libraries and weights live for the whole server: keep them out of every GC pass
    return lm


def get_model(source: str, device: str, dtype: str) -> LoadedModel:
    """The shared model, if the server offers it; DecodeLabError (a plain message) if not."""
    result = _load(POLICY.check(source), device, dtype)
    if isinstance(result, DecodeLabError):
        raise result
    return result


# ------------------------------------------------------------------ the sidebar


def sidebar() -> tuple[Settings, LoadedModel | None]:
    """Draw the shared sidebar; return the settings and the loaded model (None if it failed)."""
    sb = st.sidebar
    for key, value in DEFAULTS.items():
        st.session_state.setdefault(key, value)
    sb.header("Model")
    names = list(POLICY.offered)
    choice = sb.selectbox("model", names + ([OTHER] if POLICY.open else []), key="side_model",
                          help="Bundled models work offline; the first is the default: Llama with GQA. "
                               "The person who started the server decides what else is offered.")
    source = choice
    if choice == OTHER:
        typed = sb.text_input("Hugging Face id or local folder", key="side_custom",
                              placeholder="e.g. HuggingFaceTB/SmolLM2-135M or /path/to/model")
        if sb.button("Load", key="side_load") and typed.strip():
            st.session_state["side_custom_loaded"] = typed.strip()
        source = st.session_state.get("side_custom_loaded") or (names[0] if names else "default")
        small_models_hint(sb)
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

    sb.header("Classroom")
    sb.toggle("presenter mode", key="side_presenter",
              help="Larger text and charts for a projector. Keys: P prefill, N or → next, ← back, E run to end, "
                   "X reset; on the Lessons page ← and → change lesson. A link with presenter=on opens with the "
                   "sidebar folded away.")
    st.markdown(COMPACT_CSS + (PRESENTER_CSS if st.session_state.get("side_presenter") else ""),
                unsafe_allow_html=True)

    settings = Settings(
        source=source, device=device, dtype=dtype,
        sampling=Sampling(greedy=not sample, temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                          repetition_penalty=float(rep), seed=int(seed)),
        max_new_tokens=int(max_new),
        stop_strings=tuple(s for s in (x.strip() for x in stops_text.split(",")) if s),
        use_cache=bool(st.session_state.get("cache_on", True)),
    )
    try:
        with st.spinner("Loading the model…"):
            lm = get_model(source, device, dtype)
    except DecodeLabError as e:
        error(str(e), sb)
        return settings, None
    sb.caption(plain(f"{lm.spec.architecture} · {int(lm.spec.parameters):,} params · {lm.spec.attention} · "
                     f"{lm.dtype_name} on {lm.device}"))
    return settings, lm


@st.cache_data(ttl=300, show_spinner=False)
def _hub_reachable() -> bool:
    """Asked at most every five minutes: a sidebar rerun must not wait on a network probe."""
    return hub_reachable(timeout=1.0)


def small_models_hint(where) -> None:
    """Well-known small models a user can load here (the server allows any), with their size; offline, what to do."""
    rows = "\n".join(f"- `{m['hf_id']}`: {m['params']}, download {m['download']}, memory {m['memory']} "
                     f"({m['note']})" for m in SMALL_MODELS)
    where.markdown("Small models to try (safetensors, no remote code):\n" + rows)
    if not _hub_reachable():
        where.caption("This server cannot reach the Hugging Face hub: download a model once on a connected machine "
                      "(`huggingface-cli download ID`), then type its id or folder here.")


def cache_toggle(where=st) -> None:
    """The KV-cache switch (on the step page's control bar; the setting outlives the widget across pages)."""
    st.session_state["bar_cache"] = st.session_state.get("cache_on", True)
    where.toggle("KV cache", key="bar_cache", help="Off: every decode step recomputes the whole sequence.",
                 on_change=lambda: st.session_state.update(cache_on=st.session_state["bar_cache"]))


@st.cache_resource(show_spinner="Measuring this device's matmul speed and memory bandwidth (once per server)…")
def _probe(device_name: str, nonce: int):
    from engine.load.device import pick_device, pick_dtype
    from engine.measure.roofline import probe

    device = pick_device(device_name)
    return probe(device, pick_dtype(device), budget_s=0.6)


def device_roof(nonce: int = 0):
    """This server's measured roofline (a short matmul and copy probe, once per server and device)."""
    lm = st.session_state.get("lm")
    return _probe(str(lm.device) if lm is not None else "auto", nonce)


def frame(page_file: str) -> tuple["Settings", LoadedModel | None]:
    """What app.py prepared for this run: the sidebar's settings and the model.

    Until app.py has called st.navigation once, Streamlit serves a fresh server's first request in
    its old folder-based mode (a `pages/` folder sits beside app.py): a deep link (/race, a shared
    lesson URL) then runs that page file alone, without app.py. The page notes where it was asked
    for and hands over to app.py, which draws the frame and switches back to it (`resume_page`),
    query parameters and all. (.streamlit/config.toml hides the old mode's file-name menu.)
    """
    if "settings" not in st.session_state:
        st.session_state["wanted_page"] = (Path(page_file).stem, st.query_params.to_dict())
        st.switch_page(str(Path(__file__).resolve().parent.parent / "app.py"))
    return st.session_state["settings"], st.session_state["lm"]


def resume_page(pages: list) -> None:
    """app.py, after st.navigation: go to the page a fresh server's first request asked for (see `frame`)."""
    wanted = st.session_state.pop("wanted_page", None)
    if wanted is None:
        return
    name, params = wanted
    target = next((p for p in pages if p.url_path == name), None)  # app.py names each page by its file
    if target is not None:
        st.switch_page(target, query_params=params)
    st.query_params.from_dict(params)  # the default page: only the link's settings to put back


def page_links(pages: list, where) -> None:
    """The pages, as links at the top of the sidebar (st.navigation itself is hidden: see config.toml)."""
    for p in pages:
        where.page_link(p)
