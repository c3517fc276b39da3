"""A classroom on one server: bad input gets a clear message, and nobody breaks it for anybody else."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from streamlit.testing.v1 import AppTest

from engine import Stepper
from engine.errors import Busy
from tests.appdriver import app_test, page
from tests.test_app import click, fresh_app, new_tokens

GOOD = "Once upon a time"


def prefill_works(at: AppTest) -> None:
    """The server keeps working: a good prompt prefills and decodes after whatever went before."""
    at.text_area(key="step_prompt").set_value(GOOD).run()
    if at.button(key="step_btn_reset").disabled is False:
        click(at, "step_btn_reset")
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    assert new_tokens(at) == 2


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error] + [e.value for e in at.sidebar.error]


@pytest.mark.parametrize("prompt, message", [
    ("", "empty"),
    ("  \n\t  ", "empty"),
    ("the cat sat on the mat. " * 400, "positions"),  # longer than the context
    ("x" * 1_000_000, "characters"),  # 1 MB of text
])
def test_bad_prompts_get_a_message_and_the_app_keeps_working(prompt, message):
    at = fresh_app()
    at.text_area(key="step_prompt").set_value(prompt).run()
    at.button(key="step_btn_prefill").click().run()
    assert not at.exception
    assert any(message in e for e in errors(at)), errors(at)
    prefill_works(at)


@pytest.mark.parametrize("prompt", [
    "🦄🐉 Once upon a time 🚀",  # emoji
    "Zoe\u0301 and the cafe\u0301 n\u0303",  # combining characters
    "مرحبا بالعالم שלום עולם Once",  # right-to-left scripts
    "a\x00b\x07c\x1b[31m red",  # NUL and control characters
])
def test_unusual_text_is_tokenized_and_shown(prompt):
    at = fresh_app()
    at.text_area(key="step_prompt").set_value(prompt).run()
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    assert new_tokens(at) == 2
    assert at.text[0].value.startswith(prompt)


def load_custom(at: AppTest, source: str) -> AppTest:
    at.sidebar.selectbox(key="side_model").set_value("Other: Hugging Face id or folder…").run()
    at.sidebar.text_input(key="side_custom").set_value(source).run()
    at.sidebar.button(key="side_load").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def bad_model_dirs(tmp_path, bundled_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((bundled_dir / "tinystories-gpt2" / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"never unpickled")
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps({"model_type": "totally-custom",
                                                    "auto_map": {"AutoConfig": "cfg.CustomConfig"}}))
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256}))
    (huge / "model.safetensors").write_bytes(b"never read")
    return {"empty": (str(empty), "no config.json"), "pickled": (str(pickled), "pickle"),
            "remote": (str(remote), "code"), "huge": (str(huge), "B parameters"),
            "unknown": ("no-such-org/no-such-model-xyz", "Could not find")}


@pytest.mark.parametrize("case", ["empty", "pickled", "remote", "huge", "unknown"])
def test_bad_models_are_refused_clearly_and_the_bundled_one_still_works(case, tmp_path, bundled_dir, monkeypatch):
    monkeypatch.setenv("DECODE_LAB_MEMORY_LIMIT", str(8 * 2**30))
    source, message = bad_model_dirs(tmp_path, bundled_dir)[case]
    at = load_custom(fresh_app(), source)
    assert any(message in e or "recognise" in e for e in errors(at)), errors(at)
    assert any("No model is loaded" in e.value for e in at.error)
    at.sidebar.selectbox(key="side_model").set_value("tinystories-llama").run()
    prefill_works(at)


def test_switching_models_mid_run_resets_the_run():
    at = click(fresh_app(), "step_btn_prefill")
    click(at, "step_btn_next")
    at.sidebar.selectbox(key="side_model").set_value("tinystories-gpt2").run()
    assert not at.exception
    assert at.button(key="step_btn_prefill").disabled is False
    click(at, "step_btn_prefill")
    assert new_tokens(at) == 1


def test_double_clicks_each_take_exactly_one_step():
    at = click(fresh_app(), "step_btn_prefill")
    at.button(key="step_btn_next").click()
    at.button(key="step_btn_next").click().run()
    click(at, "step_btn_next")
    assert new_tokens(at) == 3  # prefill + two clicks, none lost or doubled
    assert at.button(key="step_btn_prefill").disabled  # a second Prefill cannot be clicked


def test_max_tokens_end_the_run_politely():
    at = fresh_app()
    at.sidebar.number_input(key="side_max_new").set_value(2).run()
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    assert at.button(key="step_btn_next").disabled  # finished: no more Next token
    assert "max_new_tokens" in next(m.value for m in at.markdown if "from Next token" in m.value)


def test_two_sessions_never_see_each_others_tokens():
    a, b = fresh_app(), fresh_app()
    a.text_area(key="step_prompt").set_value("Tom had a red ball.").run()
    b.text_area(key="step_prompt").set_value("The sun was hot.").run()
    click(a, "step_btn_prefill")
    click(b, "step_btn_prefill")
    for _ in range(3):
        click(a, "step_btn_next")
        click(b, "step_btn_next")
    assert a.text[0].value.startswith("Tom had a red ball.") and "The sun was hot." not in a.text[0].value
    assert b.text[0].value.startswith("The sun was hot.") and "Tom had" not in b.text[0].value
    assert new_tokens(a) == new_tokens(b) == 4


def test_forward_passes_from_many_threads_match_a_lone_run(bundled_lm):
    """The shared model is used by many sessions at once; each run must equal the same run alone."""
    alone = Stepper(bundled_lm, GOOD, max_new_tokens=12, stop_on_eos=False)
    alone.run()
    results, errors_seen = [], []

    def worker():
        try:
            s = Stepper(bundled_lm, GOOD, max_new_tokens=12, stop_on_eos=False)
            s.run()
            results.append(s.generated_ids)
        except Exception as e:  # noqa: BLE001
            errors_seen.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors_seen and results == [alone.generated_ids] * 6


def test_a_full_queue_gets_a_polite_busy_message(bundled_lm, monkeypatch):
    monkeypatch.setattr(bundled_lm, "slots", threading.Semaphore(0))
    s = Stepper(bundled_lm, GOOD)
    with pytest.raises(Busy, match="busy"):
        s.prefill()


def test_teacher_can_lock_the_model_list(monkeypatch):
    import pages.shared

    monkeypatch.setattr(pages.shared, "BUNDLED_ONLY", True)
    at = fresh_app()
    options = at.sidebar.selectbox(key="side_model").options
    assert options and all("Other" not in o for o in options)


def test_no_connection_leaves_the_machine_with_the_bundled_model(monkeypatch):
    """Any socket connect to a non-loopback address fails the test."""
    attempts = []
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if not (host.startswith("127.") or host in ("::1", "localhost") or self.family == socket.AF_UNIX):
            attempts.append(address)
            raise OSError(f"outbound connection to {address} blocked by the test")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the app itself must not need the switch
    at = click(fresh_app(), "step_btn_prefill")
    for _ in range(3):
        click(at, "step_btn_next")
    at.switch_page(page("race")).run()
    at.switch_page(page("scale")).run()
    assert not at.exception
    assert attempts == []


def test_cli_rejects_a_seed_that_is_not_a_number(capsys):
    from engine.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", "--prompt", "hi", "--seed", "abc"])
    assert e.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


def test_a_malformed_link_is_refused_value_by_value_and_the_good_values_still_apply():
    at = app_test()
    at.query_params = {"seed": "abc", "temperature": "NaN", "top_p": "5", "max_new_tokens": "-3",
                       "cache": "maybe", "steps": "1e9", "zzz": "<script>", "prompt": "x" * 5000,
                       "model": "no/such-model-xyz", "top_k": "7", "rule": "sample"}
    at.run()
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    for name in ["seed", "temperature", "top_p", "max_new_tokens", "cache", "steps", "zzz", "prompt"]:
        assert name in warnings, (name, warnings)
    assert at.sidebar.number_input(key="side_top_k").value == 7  # the good ones still apply
    assert at.sidebar.radio(key="side_mode").value == "sample"
    assert any("no/such-model-xyz" in e for e in errors(at))  # an unknown model is refused clearly...
    at.sidebar.selectbox(key="side_model").set_value("tinystories-llama").run()
    prefill_works(at)  # ...and the bundled one still works


def test_a_shared_link_replays_the_same_run_token_for_token():
    at = fresh_app()
    at.sidebar.radio(key="side_mode").set_value("sample").run()
    at.sidebar.number_input(key="side_seed").set_value(11).run()
    at.sidebar.slider(key="side_temperature").set_value(1.1).run()
    at.text_area(key="step_prompt").set_value("The little dog").run()
    click(at, "step_btn_prefill")
    for _ in range(4):
        click(at, "step_btn_next")
    link = dict(at.query_params)
    assert link["steps"] == "4" and link["seed"] == "11" and link["prompt"] == "The little dog"
    text = at.text[0].value

    other = app_test()
    other.query_params = link
    other.run()
    assert not other.exception and not other.warning
    assert new_tokens(other) == 5 and other.text[0].value == text
