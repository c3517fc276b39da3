"""Nothing a visitor types or links is rendered as markup, and no traceback reaches a browser."""

from __future__ import annotations

import html
import tomllib

import pytest
from streamlit.testing.v1 import AppTest

from engine import Stepper
from tests.models import NOT_OFFERED
from tests.safety import inert, inert_html, messages, seen, shown
from tests.test_app import click, fresh_app, run_text
from ui.apptest import ROOT, app_test, page

# ------------------------------------------------------------------ nothing typed or linked is markup

PAYLOADS = {
    "link": "[Session expired - sign in again](http://evil.example/login)",
    "image": "![x](http://evil.example/track.png)",
    "html": "<img src=x onerror=alert(1)>",
    "directive": ":red[boom]",
}


def test_plain_makes_markdown_html_and_directives_inert():
    from ui.text import plain

    for payload in PAYLOADS.values():
        assert not inert(payload)  # the check below would catch it raw
        body = plain(payload)
        assert inert(body) and seen(body) == payload, body
    assert seen(plain("two\nlines")) == "two  \nlines"  # a line break stays a line break


def _all_inert(at: AppTest, marker: str) -> list[str]:
    """Bodies that show `marker` (a piece of a payload): each must be inert. Returns them, as seen."""
    markdown = [b for b in shown(at) if marker in seen(b)]
    raw_html = [h.proto.body for h in at.get("html") if marker in html.unescape(h.proto.body)]
    assert all(inert(b) for b in markdown), [b for b in markdown if not inert(b)]
    assert all(inert_html(b) for b in raw_html), [b for b in raw_html if not inert_html(b)]
    return [seen(b) for b in markdown] + [html.unescape(b) for b in raw_html]


@pytest.mark.slow
def test_payloads_in_a_link_show_as_typed_text():
    at = app_test()
    at.query_params = {"model": PAYLOADS["link"], "seed": PAYLOADS["image"], "stop": PAYLOADS["directive"],
                       "zzz" + PAYLOADS["directive"]: "1", "prompt": PAYLOADS["image"] + " " + PAYLOADS["html"]}
    at.run()
    assert not at.exception
    assert _all_inert(at, "evil.example") and _all_inert(at, "boom")
    said = " ".join(messages(at))
    assert NOT_OFFERED in said and "zzz:red[boom]" in said  # shown as typed, not as red text
    assert "seed='![x](http://evil.example/track.png)' ignored" in said
    click(at, "step_btn_prefill")  # the prompt from the link runs, and every view shows it as text
    for view in ("Tokens", "Next token", "Attention"):
        at.session_state["step_view"] = view
        at.run()
        assert not at.exception
        assert _all_inert(at, "evil.example") and _all_inert(at, "onerror")  # shown (the text so far), as text
    assert run_text(at).startswith(PAYLOADS["image"] + " " + PAYLOADS["html"])


@pytest.mark.slow
def test_a_link_naming_a_payload_on_an_open_server_shows_it_as_typed(open_policy):
    """On an open server the link's model is tried; the refusal quotes it, as text: no link to click."""
    at = app_test()
    at.query_params = {"model": PAYLOADS["link"]}
    at.run()
    assert not at.exception
    quoted = _all_inert(at, "evil.example")
    assert any(PAYLOADS["link"] in b for b in quoted), quoted


@pytest.mark.slow
def test_a_payload_typed_as_a_lesson_text_shows_as_text():
    at = fresh_app()
    at.switch_page(page("lessons")).run()
    at.text_input(key="lesson1_text").set_value(PAYLOADS["html"] + PAYLOADS["image"]).run()
    assert not at.exception
    _all_inert(at, "onerror")
    _all_inert(at, "evil.example")


@pytest.mark.slow
def test_a_payload_raced_shows_as_text():
    at = fresh_app()
    at.switch_page(page("race")).run()
    prompt_box = next(t for t in at.text_area if t.key.startswith("race_prompt"))
    prompt_box.set_value("A cat.\n\n" + PAYLOADS["image"] + " " + PAYLOADS["html"]).run()
    at.number_input(key="race_steps").set_value(2).run()
    at.button(key="race_start").click().run()
    assert not at.exception
    assert _all_inert(at, "evil.example")


# ------------------------------------------------------------------ no traceback reaches a browser


@pytest.mark.slow
def test_an_unexpected_failure_shows_no_traceback(monkeypatch):
    """Streamlit is told (.streamlit/config.toml) to show a redacted message: no type, no stack, no path."""
    from streamlit import config

    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert settings["client"]["showErrorDetails"] == "none"
    assert config.get_option("client.showErrorDetails") == "none"  # what the server (and AppTest) runs with

    def broken(self):
        raise RuntimeError("disk full at /srv/decode-lab/secret/cache.bin")

    at = fresh_app()
    monkeypatch.setattr(Stepper, "prefill", broken)
    at.button(key="step_btn_prefill").click().run()
    assert len(at.exception) == 1
    shown_error = at.exception[0]
    assert "redacted" in shown_error.message and not shown_error.stack_trace
    page_text = " ".join(shown(at)) + shown_error.message + "".join(shown_error.stack_trace)
    assert "/srv" not in page_text and "RuntimeError" not in page_text and "Traceback" not in page_text
