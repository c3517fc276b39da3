"""Links: the address bar always holds the run on screen, and a link (or a scenario, or a fork) sets it again.

    link_values   the settings (and a page's extras) as checked link values: one definition, used by the
                  address bar, a scenario and a follower's fork alike
    write_link    put them in the URL
    apply_link    once per session: the URL's values into the widgets' state, before any widget is drawn
    apply_values  the same for values from a scenario or a fork
"""

from __future__ import annotations

import streamlit as st

from drawing.views import VIEWS
from ui import model
from ui.link_codec import make_link, read_link
from ui.presets import PROMPTS
from ui.step_state import set_by_code

# link setting -> sidebar widget key
LINK_KEYS = {"rule": "side_mode", "temperature": "side_temperature", "top_k": "side_top_k", "top_p": "side_top_p",
             "repetition_penalty": "side_rep", "seed": "side_seed", "max_new_tokens": "side_max_new",
             "stop": "side_stops"}


def link_values(settings, **extra) -> dict:
    """The settings, and a page's extras (prompt, steps, at, lesson...), as a link's string values."""
    sp = settings.sampling
    return make_link({
        "model": settings.source, "rule": "greedy" if sp.greedy else "sample", "temperature": sp.temperature,
        "top_k": sp.top_k, "top_p": sp.top_p, "repetition_penalty": sp.repetition_penalty, "seed": sp.seed,
        "max_new_tokens": settings.max_new_tokens, "stop": ",".join(settings.stop_strings),
        "cache": "on" if settings.use_cache else "off",
        "presenter": "on" if st.session_state.get("side_presenter") else None, **extra,
    })


def write_link(settings, **extra) -> None:
    """Put the settings (and a page's extras, such as prompt and steps) in the URL, replacing what was there."""
    st.query_params.from_dict(link_values(settings, **extra))


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
    """Put checked link values (from a URL, a scenario or a fork) into the widgets' state; call before they are
    drawn. A value the link does not carry keeps what the session had (presenter mode among them)."""
    ss = st.session_state
    for name, key in LINK_KEYS.items():
        if name in values:
            ss[key] = values[name]
    if "cache" in values:
        ss["cache_on"] = values["cache"] == "on"
    if "presenter" in values:
        ss["side_presenter"] = values["presenter"] == "on"
    chosen = values.get("model")
    if chosen in model.POLICY.offered:
        ss["side_model"] = chosen
    elif chosen and model.POLICY.open:
        ss.update(side_model=model.OTHER, side_custom=chosen, side_custom_loaded=chosen)
    elif chosen:
        problems.append("link parameter model ignored: that model is not offered by this server")
    speculative = "drafter" in values or "k" in values  # a Speculative link: its page takes its prompt and rounds
    race = "tokens" in values or "size" in values  # a Race link: its page takes its prompt
    if speculative:
        ss["speculative_wanted"] = {name: values.get(name) for name in ("prompt", "drafter", "k", "steps", "at")}
    if race:
        ss["race_wanted"] = {name: values.get(name) for name in ("prompt", "tokens", "size")}
    if "prompt" in values and not speculative and not race:
        ss["step_prompt"] = values["prompt"]
        # the preset box names the preset this prompt is, or shows "(your own prompt)"
        same = next((x["title"] for x in PROMPTS if x["prompt"] == values["prompt"]), None)
        ss["step_preset"] = same
        set_by_code()
    if "scenario" in values:  # a Serving link: the Serving page checks its scenario and replays its engine steps
        ss["serve_wanted"] = (values["scenario"], values.get("steps"), values.get("at"), values.get("preemption"),
                              values.get("batching"))
    elif "steps" in values and not speculative:  # the step page's controller takes them once the settings are the link's
        ss["step_replay"] = (values["steps"], values.get("at"))
    if "view" in values:
        if values["view"] in VIEWS:
            ss["step_view"] = values["view"]
        else:
            problems.append(f"link parameter view={values['view'][:40]!r} ignored: the views are {', '.join(VIEWS)}")
    for name in ("layer", "head"):  # the step page keeps them inside the model it shows
        if name in values:
            ss[f"step_{name}"] = values[name]
            set_by_code()
    if "lesson" in values:
        ss["lesson_wanted"] = values["lesson"]
    if "policy" in values or "budget" in values:  # the KV budget page checks them against its own list and model
        ss["budget_wanted"] = (values.get("policy"), values.get("budget"))
    if "ladder" in values:
        ss["scale_ladder_view"] = values["ladder"]
    if "ladder" in values or "curves" in values:  # a Scale link says whether the two curves stand side by side
        ss["scale_ladder_both"] = values.get("curves") == "side_by_side"
    return problems
