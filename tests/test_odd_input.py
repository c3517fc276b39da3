"""The pages under odd input: bad prompts, odd text, model switches, two sessions, bad links (a double click is
tests/test_browser.py's: AppTest folds two clicks before a run into one)."""

from __future__ import annotations

import pytest

from tests.models import GOOD, NOT_OFFERED
from tests.safety import messages, prefill_works
from tests.test_app import click, fresh_app, new_tokens, run_text
from ui.apptest import app_test

# ------------------------------------------------------------------ the pages under odd input


@pytest.mark.parametrize("prompt, message", [
    ("  \n\t  ", "empty"),
    ("the cat sat on the mat. " * 400, "positions"),  # longer than the context
    ("x" * 1_000_000, "characters"),  # 1 MB of text
], ids=["blank", "longer-than-the-context", "1-MB"])
def test_bad_prompts_get_a_message_and_the_app_keeps_working(prompt, message):
    at = fresh_app()
    at.text_input(key="step_prompt").set_value(prompt).run()
    at.button(key="step_btn_prefill").click().run()
    assert not at.exception
    assert any(message in m for m in messages(at)), messages(at)
    prefill_works(at)


def test_unusual_text_is_tokenized_and_shown():
    at = fresh_app()
    for prompt in ("🦄🐉 Once upon a time 🚀", "Zoe\u0301 and the cafe\u0301 n\u0303",  # emoji, combining marks
                   "مرحبا بالعالم שלום עולם Once", "a\x00b\x07c\x1b[31m red"):  # right-to-left, control characters
        at.text_input(key="step_prompt").set_value(prompt).run()
        click(at, "step_btn_prefill")
        click(at, "step_btn_next")
        assert new_tokens(at) == 2
        assert run_text(at).startswith(prompt)


def test_switching_models_mid_run_resets_the_run():
    at = click(fresh_app(), "step_btn_prefill")
    click(at, "step_btn_next")
    at.sidebar.selectbox(key="side_model").set_value("tinystories-gpt2").run()
    assert not at.exception
    assert at.button(key="step_btn_prefill").disabled is False
    click(at, "step_btn_prefill")
    assert new_tokens(at) == 1


def test_two_sessions_never_see_each_others_tokens():
    a, b = fresh_app(), fresh_app()
    a.text_input(key="step_prompt").set_value("Tom had a red ball.").run()
    b.text_input(key="step_prompt").set_value("The sun was hot.").run()
    click(a, "step_btn_prefill")
    click(b, "step_btn_prefill")
    for _ in range(3):
        click(a, "step_btn_next")
        click(b, "step_btn_next")
    assert run_text(a).startswith("Tom had a red ball.") and "The sun was hot." not in run_text(a)
    assert run_text(b).startswith("The sun was hot.") and "Tom had" not in run_text(b)
    assert new_tokens(a) == new_tokens(b) == 4


def test_a_malformed_link_is_refused_value_by_value_and_the_good_values_still_apply():
    at = app_test()
    at.query_params = {"seed": "abc", "temperature": "NaN", "top_p": "5", "max_new_tokens": "-3",
                       "cache": "maybe", "steps": "1e9", "zzz": "<script>", "prompt": "x" * 5000,
                       "model": "no/such-model-xyz", "top_k": "7", "rule": "sample"}
    at.run()
    assert not at.exception
    said = " ".join(messages(at))
    for name in ["seed", "temperature", "top_p", "max_new_tokens", "cache", "steps", "zzz", "prompt"]:
        assert name in said, (name, said)
    assert NOT_OFFERED in said  # an unknown model is refused like any other not-offered one...
    assert at.sidebar.number_input(key="side_top_k").value == 7  # ...and the good values still apply
    assert at.sidebar.radio(key="side_mode").value == "sample"
    prefill_works(at)


MANY_BYTES = "Tom ate 🍕 in 東京 and said Привет"  # an emoji, CJK and Cyrillic: characters a tiny vocabulary cuts up


def test_a_token_that_is_part_of_a_character_shows_its_bytes_and_they_spell_the_text(bundled_lm):
    """No piece is '�': a token that is only part of a character shows its bytes, and those bytes, with the whole
    characters between them, are exactly the prompt's UTF-8 (Python's own encoding is the reference)."""
    from drawing.characters import piece_bytes
    from engine.generate.loop import token_pieces

    ids = bundled_lm.tokenizer(MANY_BYTES, add_special_tokens=False)["input_ids"]
    pieces = token_pieces(bundled_lm.tokenizer, ids)
    assert not any("\ufffd" in p for p in pieces), pieces
    assert b"".join(piece_bytes(p) for p in pieces) == MANY_BYTES.encode("utf-8")
    shown = "".join(p for p in pieces if p.startswith("⟨"))
    for ch in "🍕東京Привет":  # every byte of every cut character is on screen, in hex
        assert all(f"{b:02X}" in shown for b in ch.encode("utf-8"))
    plain = token_pieces(bundled_lm.tokenizer, bundled_lm.tokenizer(GOOD)["input_ids"])
    assert plain == [bundled_lm.tokenizer.decode([i]) for i in bundled_lm.tokenizer(GOOD)["input_ids"]]


def test_the_tokens_view_says_one_character_became_several_tokens():
    from ui.text import plain

    at = app_test()
    at.query_params = {"prompt": MANY_BYTES, "steps": "0", "view": "Tokens"}
    at.run()
    assert not at.exception and not at.error
    chips = next(h.proto.body for h in at.get("html") if "position 0, id" in h.proto.body)
    assert "\ufffd" not in chips and "⟨F0⟩" in chips  # the emoji's first byte, not a replacement character
    said = next(m.value for m in at.markdown if "One character, several tokens" in m.value)
    pizza = "🍕".encode("utf-8")
    expected = f"'🍕' is one character, {len(pizza)} bytes in UTF-8 ({' '.join(f'{b:02X}' for b in pizza)})"
    assert plain(expected) in said  # as the page shows it (escaped)
def test_a_click_made_before_the_last_step_reached_the_screen_takes_no_step():
    """Every click sends the address its browser shows, and the step page's link counts the steps taken. A double
    click's second click was made before the first one's step (and its link) arrived: its link says the step before,
    and it takes no step. (The browser's own double click is tests/test_browser.py's: AppTest folds two clicks
    before a run into one.)"""
    at = click(fresh_app(), "step_btn_prefill")
    click(at, "step_btn_next")
    assert new_tokens(at) == 2 and at.query_params["steps"] == "1"  # the address the browser now shows
    at.query_params["steps"] = "0"  # a browser still on the prefill's address, as the second click's was
    click(at, "step_btn_next")
    assert new_tokens(at) == 2 and at.query_params["steps"] == "1"
    click(at, "step_btn_next")  # made on a screen whose link says step 1: it takes step 2
    assert new_tokens(at) == 3
