"""The one model cache of the server, what a browser may load, and this device's measured roofline.

The model is loaded once per server (st.cache_resource) and shared read-only by every session;
each session's run lives in st.session_state under page-prefixed keys. Which models a browser may
choose is the server's allow-list (engine/load/policy.py).
"""

from __future__ import annotations

import gc
import sys

import streamlit as st

from drawing.first_draw import warm_pictures
from engine import DecodeLabError, LoadedModel, load_model
from engine.load.checks import hub_reachable
from engine.load.policy import from_settings
from physics.machine import release_memory, use_serving_threads
from ui.presets import SMALL_MODELS

POLICY = from_settings(sys.argv[1:])  # `streamlit run app.py -- --model X --open-models`, or the environment
OTHER = "Other: Hugging Face id or folder…"


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
        use_serving_threads(int(lm.spec.parameters))  # see physics/machine.py: the browser needs a core too
    warm_pictures(lm)  # every picture of a step drawn once now: a class's first Prefill costs what later ones do
    gc.freeze()  # the loaded libraries and weights live for the whole server: keep them out of every GC pass
    return lm


def get_model(source: str, device: str, dtype: str) -> LoadedModel:
    """The shared model, if the server offers it; DecodeLabError (a plain message) if not."""
    result = _load(POLICY.check(source), device, dtype)
    if isinstance(result, DecodeLabError):
        raise result
    return result


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


@st.cache_resource(show_spinner="Measuring this device's matmul speed and memory bandwidth (once per server)…")
def _probed(device_name: str, dtype_name: str | None, nonce: int) -> bool:
    """Probe once per server, device, dtype and press of 'Re-run device probe' (the engine keeps the roof)."""
    from physics.roofline import probe_device

    probe_device(device_name, dtype_name, again=nonce > 0)
    return True


def device_roof(nonce: int = 0):
    """This server's measured roofline, in the dtype the model on screen runs in (a short matmul and
    memory-bandwidth probe, once per server, device and dtype; a ladder's probes tighten it): the one roof every
    page quotes, so one ridge per device and dtype."""
    from physics.roofline import probe_device

    lm = st.session_state.get("lm")
    device, dtype = ("auto", None) if lm is None else (str(lm.device), lm.dtype_name)
    _probed(device, dtype, nonce)
    return probe_device(device, dtype)
