"""Shareable links: a run's settings as URL query parameters, and back.

A link holds everything that decides the tokens (model, prompt, sampling, seed,
cache switch, how many steps were taken), so opening it replays the same run token
for token, and what the screen shows of it (the step on screen, the view, layer and
head; on Serving the scenario and its engine step; on the KV budget page its policy and budget; on Speculative
the drafter, k and the rounds taken; on the Race its tokens and model size). Reading a link never trusts it: each value is checked against the same
ranges the sidebar allows, and a bad one is dropped with a plain reason while the
good ones still apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from engine.generate.loop import MAX_PROMPT_CHARS


@dataclass(frozen=True)
class Field:
    name: str  # the setting, as the pages call it
    parse: Callable[[str], Any]  # raises ValueError with a reason a student can read


def _number(kind: type, lo: float, hi: float) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"not a {'whole number' if kind is int else 'number'}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("not a finite number")
        if not lo <= value <= hi:
            raise ValueError(f"outside {lo:g}..{hi:g}")
        return value

    return parse


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


def _text(limit: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if len(text) > limit:
            raise ValueError(f"longer than {limit:,} characters")
        return text

    return parse


LADDER_VIEWS = ("per_token", "roofline", "split", "table")  # the size ladder's pictures (topics/ladder/page_ladder.py)

# URL parameter -> setting. Ranges match the sidebar's widgets.
FIELDS = {
    "model": Field("model", _text(300)),
    "prompt": Field("prompt", _text(MAX_PROMPT_CHARS)),
    "rule": Field("rule", _choice("greedy", "sample")),
    "temperature": Field("temperature", _number(float, 0.0, 2.0)),
    "top_k": Field("top_k", _number(int, 0, 1_000_000)),
    "top_p": Field("top_p", _number(float, 0.01, 1.0)),
    "repetition_penalty": Field("repetition_penalty", _number(float, 0.5, 2.0)),
    "seed": Field("seed", _number(int, 0, 2**31 - 1)),
    "max_new_tokens": Field("max_new_tokens", _number(int, 1, 512)),
    "stop": Field("stop", _text(300)),
    "cache": Field("cache", _choice("on", "off")),
    "steps": Field("steps", _number(int, 0, 512)),
    "at": Field("at", _number(int, 0, 512)),  # the step on screen (the scrubber); the page clamps it to the run
    "presenter": Field("presenter", _choice("on", "off")),
    "lesson": Field("lesson", _number(int, 1, 99)),  # the lessons page checks it against its own list
    "ladder": Field("ladder", _choice(*LADDER_VIEWS)),  # the Scale page's size-ladder picture
    "curves": Field("curves", _choice("side_by_side")),  # and its CPU and GPU curves beside each other
    "view": Field("view", _text(40)),  # the step page's view; the page checks it against its own list
    "layer": Field("layer", _number(int, 0, 1023)),  # the layer (and head) the step page opens; clamped to the model
    "head": Field("head", _number(int, 0, 1023)),
    "scenario": Field("scenario", _text(40)),  # a Serving scenario (its name); the page checks it against its list
    "preemption": Field("preemption", _text(40)),  # its preemption policy, and its batching: the page checks them
    "batching": Field("batching", _text(40)),
    "policy": Field("policy", _text(40)),  # the KV budget page's policy; the page checks it against its list
    "budget": Field("budget", _number(int, 1, 4096)),  # its budget B; the page clamps it to the model's positions
    "drafter": Field("drafter", _text(40)),  # the Speculative page's drafter (a short name); the page checks it
    "k": Field("k", _number(int, 1, 8)),  # its guesses per round (its widget's range)
    "tokens": Field("tokens", _number(int, 2, 2048)),  # the Race page's tokens; the page clamps them to the model
    "size": Field("size", _text(40)),  # the Race's model size; the page checks it against its own list
}


def read_link(params: dict[str, str | list[str]]) -> tuple[dict[str, Any], list[str]]:
    """Query parameters -> (settings that passed their checks, one reason per value dropped)."""
    settings, problems = {}, []
    for key, raw in params.items():
        field = FIELDS.get(key)
        if field is None:
            problems.append(f"unknown link parameter '{key[:40]}' ignored")
            continue
        if isinstance(raw, list):  # ?seed=1&seed=2: ambiguous, so neither wins
            problems.append(f"link parameter '{key}' given {len(raw)} times; ignored")
            continue
        try:
            settings[field.name] = field.parse(raw)
        except ValueError as e:
            problems.append(f"link parameter {key}={raw[:40]!r} ignored: {e}")
    return settings, problems


def make_link(settings: dict[str, Any]) -> dict[str, str]:
    """Settings -> query parameters (only known names; floats written without noise)."""
    out = {}
    for key, value in settings.items():
        if key not in FIELDS or value is None:
            continue
        out[key] = f"{value:g}" if isinstance(value, float) else str(value)
    return out
