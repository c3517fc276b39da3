"""The sidebar every page shares: which model, how the next token is chosen, the run's limits, presenter mode.

Its widgets decide one `Settings` value; a change in it is what a page's run controller reacts to.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from engine import DecodeLabError, LoadedModel, Sampling
from ui import model
from ui.style import apply_style
from ui.text import error, plain


@dataclass(frozen=True)
class Settings:
    """Everything the sidebar decides, in one value."""

    source: str
    device: str
    dtype: str
    sampling: Sampling
    max_new_tokens: int
    stop_strings: tuple[str, ...]
    use_cache: bool

    def same_model(self, other: "Settings | None") -> bool:
        return other is not None and (self.source, self.device, self.dtype) == (other.source, other.device,
                                                                                 other.dtype)

    def changes(self, other: "Settings") -> list[str]:
        """What differs from `other`, in words: 'the KV cache (now off)', 'sampling', 'max new tokens'..."""
        said = []
        if self.use_cache != other.use_cache:
            said.append(f"the KV cache (now {'on' if self.use_cache else 'off'})")
        if self.sampling != other.sampling:
            said.append("the next-token choice")
        if self.max_new_tokens != other.max_new_tokens:
            said.append(f"max new tokens (now {self.max_new_tokens})")
        if self.stop_strings != other.stop_strings:
            said.append("the stop strings")
        return said


# Sidebar widgets take their starting values from here (not from value=...), so a shared
# link can set them first without streamlit warning about two sources of truth.
DEFAULTS = {"side_mode": "greedy", "side_temperature": 0.8, "side_top_k": 0, "side_top_p": 1.0, "side_rep": 1.0,
            "side_seed": 0, "side_max_new": 40, "side_stops": "", "cache_on": True}
PRESENTER_DEFAULT = {"side_presenter": False}  # not a run setting: a scenario or a fork never turns it off


def sidebar() -> tuple[Settings, LoadedModel | None]:
    """Draw the shared sidebar; return the settings and the loaded model (None if it failed)."""
    sb = st.sidebar
    for key, value in (DEFAULTS | PRESENTER_DEFAULT).items():
        st.session_state.setdefault(key, value)
    sb.header("Model")
    names = list(model.POLICY.offered)
    choice = sb.selectbox("model", names + ([model.OTHER] if model.POLICY.open else []), key="side_model",
                          help="Bundled models work offline; the first is the default: Llama with GQA. "
                               "The person who started the server decides what else is offered.")
    source = choice
    if choice == model.OTHER:
        typed = sb.text_input("Hugging Face id or local folder", key="side_custom",
                              placeholder="e.g. HuggingFaceTB/SmolLM2-135M or /path/to/model")
        if sb.button("Load", key="side_load") and typed.strip():
            st.session_state["side_custom_loaded"] = typed.strip()
        source = st.session_state.get("side_custom_loaded") or (names[0] if names else "default")
        model.small_models_hint(sb)
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
    apply_style()

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
            lm = model.get_model(source, device, dtype)
    except DecodeLabError as e:
        error(str(e), sb)
        return settings, None
    sb.caption(plain(f"{lm.spec.architecture} · {int(lm.spec.parameters):,} params · {lm.spec.attention} · "
                     f"{lm.dtype_name} on {lm.device}"))
    return settings, lm


def cache_toggle(where=st) -> None:
    """The KV-cache switch (on the step page's control bar; the setting outlives the widget across pages)."""
    st.session_state["bar_cache"] = st.session_state.get("cache_on", True)
    where.toggle("KV cache", key="bar_cache", help="Off: every decode step recomputes the whole sequence.",
                 on_change=lambda: st.session_state.update(cache_on=st.session_state["bar_cache"]))
