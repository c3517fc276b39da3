"""A classroom on one server: nothing a student can reach but the lesson, bad input gets a plain message,
and nobody breaks it for anybody else.

Every test says what the person at the browser (or the terminal) sees. "Seen" text is a markdown body
with its backslash escapes removed: that is what the page shows once streamlit renders it.
"""

from __future__ import annotations

import html
import json
import os
import re
import socket
import struct
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

import engine.load.load
from engine import Stepper
from engine.errors import Busy, DecodeLabError, ModelLoadError, ModelNotOffered, NotACausalLM, UnsafeWeights
from engine.load.policy import ModelPolicy, from_settings
from ui.apptest import ROOT, app_test, page
from tests.test_app import click, fresh_app, new_tokens, run_text

GOOD = "Once upon a time"
OTHER = "Other: Hugging Face id or folder…"
NOT_OFFERED = "link parameter model ignored: that model is not offered by this server"


# ------------------------------------------------------------------ what the user sees


def seen(body: str) -> str:
    """A markdown body as the reader sees it: backslash escapes gone."""
    return re.sub(r"\\(.)", r"\1", body)


def shown(at: AppTest) -> list[str]:
    """Every message, markdown and caption body on the page (sidebar included), as sent to the browser."""
    bodies = []
    for kind in ("error", "warning", "info", "success", "markdown", "caption"):
        bodies += [str(e.value) for e in at.get(kind)]
    return bodies


def messages(at: AppTest) -> list[str]:
    """The error and warning boxes, as the reader sees them."""
    return [seen(str(e.value)) for e in list(at.get("error")) + list(at.get("warning"))]


_LIVE = re.compile(r"(?<!\\)(?:!?\[[^\]]*(?<!\\)\]\(|<img|<a\s|:red\[|:blue\[)")


def inert(body: str) -> bool:
    """Would a markdown body show a link, an image, HTML or a colour directive made from user text?

    Plain markdown (st.error, st.markdown): every '[', '](', '<', ':' from the user must be
    backslash-escaped. A body that is one raw HTML block (unsafe_allow_html) is not parsed as markdown
    as long as it holds no blank line (CommonMark ends an HTML block there); inside it, user text must be
    HTML-escaped, so '<img' may not appear raw.
    """
    if body.lstrip().startswith("<") and "\n\n" not in body:
        return inert_html(body)
    return not _LIVE.search(body)


def inert_html(body: str) -> bool:
    """An st.html body (never parsed as markdown): no tag made from user text. The stage's own <img> of
    its SVG is the app's, and carries the SVG base64-encoded (its text escaped by engine/stage.py)."""
    return not re.search(r"<img(?! alt=)|<a\s", body)


def prefill_works(at: AppTest) -> None:
    """The server keeps working: a good prompt prefills and decodes after whatever went before."""
    at.text_input(key="step_prompt").set_value(GOOD).run()
    if at.button(key="step_btn_reset").disabled is False:
        click(at, "step_btn_reset")
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    assert new_tokens(at) == 2


@pytest.fixture
def open_policy(monkeypatch):
    """A single-user machine: `streamlit run app.py -- --open-models`."""
    import ui.frame

    policy = ModelPolicy(offered=tuple(engine.load.load.bundled_models()), open=True)
    monkeypatch.setattr(ui.frame, "POLICY", policy)
    return policy


@pytest.fixture
def no_network(monkeypatch):
    """Any connection or name lookup for a host that is not this machine is recorded and refused.

    The hub's own offline switch is turned off too, so a lookup the code makes would really be tried.
    """
    import huggingface_hub.constants

    attempts = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def local(host) -> bool:
        host = host.decode() if isinstance(host, bytes) else host
        return host is None or str(host).startswith("127.") or str(host) in ("::1", "localhost", "")

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family != socket.AF_UNIX and not local(host):
            attempts.append(address)
            raise OSError(f"outbound connection to {address} blocked by the test")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not local(host):
            attempts.append(host)
            raise socket.gaierror(f"name lookup of {host} blocked by the test")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("DECODE_LAB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return attempts


# ------------------------------------------------------------------ the allow-list


def test_the_policy_offers_bundled_models_plus_what_the_teacher_named(tmp_path):
    bundled = engine.load.load.bundled_models()
    default = from_settings([], {})
    assert default.offered == tuple(bundled) and not default.open
    named = from_settings(["--model", "Qwen/Qwen2.5-0.5B", "--model", str(tmp_path)], {"DECODE_LAB_MODELS": "a/b, c"})
    assert named.offered == (*bundled, "Qwen/Qwen2.5-0.5B", str(tmp_path), "a/b", "c") and not named.open
    assert from_settings(["--open-models"], {}).open and from_settings([], {"DECODE_LAB_OPEN_MODELS": "1"}).open
    # a teacher's lock wins over an open flag
    assert not from_settings(["--open-models"], {"DECODE_LAB_BUNDLED_ONLY": "1"}).open
    # one message for everything not offered: nothing is looked up, so nothing is revealed
    said = set()
    for source in (str(tmp_path), "/no/such/folder", "/etc", "/etc/shadow", "some-org/some-model", "", "x" * 10_000):
        with pytest.raises(ModelNotOffered) as e:
            default.check(source)
        said.add(str(e.value))
    assert len(said) == 1 and "/" not in said.pop().split("(")[0]


def test_a_default_server_refuses_every_folder_a_link_names_with_one_message(tmp_path, bundled_dir, no_network):
    """Existing folder, missing folder, /etc and a hub id: the same visible words, no lookup, and the
    bundled model keeps working. The sidebar has no box to type a folder into."""
    import ui.frame

    assert not ui.frame.POLICY.open  # the server as `streamlit run app.py` starts it
    real = tmp_path / "a-real-model"
    real.mkdir()
    (real / "config.json").write_text((bundled_dir / "tinystories-llama" / "config.json").read_text())
    seen_by_link = {}
    for source in (str(real), str(tmp_path / "no-such-folder"), "/etc", "some-org/some-model"):
        at = app_test()
        at.query_params = {"model": source}
        at.run()
        assert not at.exception
        seen_by_link[source] = messages(at)
        assert at.sidebar.selectbox(key="side_model").value == "tinystories-llama"
        assert OTHER not in at.sidebar.selectbox(key="side_model").options
        assert not [t for t in at.sidebar.text_input if t.key == "side_custom"]
    assert all(m == [NOT_OFFERED] for m in seen_by_link.values()), seen_by_link
    prefill_works(at)
    assert no_network == []


def test_a_model_the_teacher_named_is_offered_and_loads(tiny_dirs, monkeypatch):
    import ui.frame

    folder = tiny_dirs["llama"]
    monkeypatch.setattr(ui.frame, "POLICY", from_settings(["--model", folder], {}))
    at = fresh_app()
    assert folder in at.sidebar.selectbox(key="side_model").options
    at.sidebar.selectbox(key="side_model").set_value(folder).run()
    assert not at.exception and not messages(at)
    click(at, "step_btn_prefill")
    assert new_tokens(at) == 1
    linked = app_test()  # a link may name it too
    linked.query_params = {"model": folder}
    linked.run()
    assert not messages(linked) and linked.sidebar.selectbox(key="side_model").value == folder


# ------------------------------------------------------------------ hostile folders


def _safetensors(header: dict, body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def hostile_folders(root: Path, bundled: Path) -> dict[str, tuple[str, type, str]]:
    """name -> (folder, the error class, words the message must hold). Each holds the bundled tokenizer."""
    base = json.loads((bundled / "config.json").read_text())
    weights = (bundled / "model.safetensors").read_bytes()
    pickle = root / "pickle.bin"
    torch.save({"model.embed_tokens.weight": torch.zeros(2)}, pickle)
    tiny = _safetensors({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    small = dict(hidden_size=8, intermediate_size=8, num_attention_heads=1, num_key_value_heads=1, head_dim=8)
    cases = {
        # the attack: a pickle behind a safetensors index, next to a harmless *.safetensors file
        "pickle behind an index": ({}, {"pytorch_model.bin": pickle.read_bytes(), "any.safetensors": tiny,
                                        "model.safetensors.index.json": json.dumps({"weight_map": {
                                            "model.embed_tokens.weight": "pytorch_model.bin"}}).encode()},
                                   UnsafeWeights, "safetensors only"),
        # the same, through the config field transformers reads first (it would torch.load adapter_model.bin)
        "pickle named by the config": ({"transformers_weights": "adapter_model.bin"},
                                       {"model.safetensors": weights, "adapter_model.bin": pickle.read_bytes()},
                                       UnsafeWeights, "safetensors only"),
        "an adapter naming another model": ({}, {"model.safetensors": weights, "adapter_config.json": json.dumps(
            {"base_model_name_or_path": "/etc"}).encode()}, UnsafeWeights, "adapter"),
        "corrupt header": ({}, {"model.safetensors": b"\x00garbage" * 8}, UnsafeWeights, "corrupt"),
        "lying header": ({}, {"model.safetensors": _safetensors({"model.embed_tokens.weight": {
            "dtype": "F32", "shape": [4096, 256], "data_offsets": [0, 4096 * 256 * 4]}}, b"\0" * 16)},
            UnsafeWeights, "corrupt"),
        "zero heads": ({"num_attention_heads": 0}, {"model.safetensors": weights}, NotACausalLM, "config"),
        "negative size": ({"hidden_size": -256}, {"model.safetensors": weights}, NotACausalLM, "hidden_size"),
        "negative layers": ({"num_hidden_layers": -4}, {"model.safetensors": weights}, NotACausalLM,
                            "num_hidden_layers"),
        "a string for a number": ({"num_hidden_layers": "4"}, {"model.safetensors": weights}, NotACausalLM, "config"),
        "a float for a number": ({"hidden_size": 256.0}, {"model.safetensors": weights}, NotACausalLM, "config"),
        "a bool for a number": ({"num_attention_heads": True}, {"model.safetensors": weights}, NotACausalLM, "config"),
        "a number for a list": ({"architectures": 7}, {"model.safetensors": weights}, NotACausalLM, "architectures"),
        "20,000 tiny layers": ({"num_hidden_layers": 20_000, **small}, {"model.safetensors": tiny}, NotACausalLM,
                               "num_hidden_layers"),
        "a vision tower of 20,000 layers": ({"model_type": "gemma3", "architectures": None, "text_config": {
            "num_hidden_layers": 2, "vocab_size": 300, **small}, "vision_config": {
            "num_hidden_layers": 20_000, "hidden_size": 8, "intermediate_size": 8, "num_attention_heads": 1}},
            {"model.safetensors": tiny}, NotACausalLM, "20,000"),
        "weights of another model": ({}, {"model.safetensors": tiny}, ModelLoadError, "do not belong"),
        "a pipe for a tokenizer": ({}, {"model.safetensors": weights, "tokenizer.json": None}, NotACausalLM,
                                   "not an ordinary model file"),
    }
    out = {}
    for i, (name, (changes, files, error, words)) in enumerate(cases.items()):
        folder = root / f"hostile-{i}"
        folder.mkdir()
        config = base | changes if "model_type" not in changes else changes
        (folder / "config.json").write_text(json.dumps(config))
        for extra in ("tokenizer.json", "tokenizer_config.json"):
            (folder / extra).write_bytes((bundled / extra).read_bytes())
        for file, data in files.items():
            (folder / file).unlink(missing_ok=True)
            if data is None:
                os.mkfifo(folder / file)  # a named pipe: whatever opens it waits for a writer that never comes
            else:
                (folder / file).write_bytes(data)
        out[name] = (str(folder), error, words)
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    from engine.load.load import MODELS_DIR

    return hostile_folders(tmp_path_factory.mktemp("hostile"), MODELS_DIR / "tinystories-llama")


@pytest.fixture
def no_unpickling(monkeypatch):
    """torch.load is never called: any call is recorded and fails."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args[:1])
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", refuse)
    return calls


def server_paths_in(message: str, typed: str) -> list[str]:
    """Paths of this server in a message, besides the source exactly as the user typed it."""
    rest = message.replace(typed, "<typed>")
    return [p for p in (str(ROOT), str(engine.load.load.MODELS_DIR), "/tmp", "/root", "/home", "site-packages",
                        "Traceback", 'File "') if p in rest]


def test_hostile_folders_are_refused_with_typed_errors_and_nothing_is_unpickled(hostile, no_unpickling):
    """Each folder is refused with its DecodeLabError subclass, fast, before any weight is read.

    The message may repeat the source as it was typed (the user knows it), and nothing else of the
    server: no resolved path, no traceback, no library file.
    """
    for name, (folder, error, words) in hostile.items():
        t0 = time.perf_counter()
        with pytest.raises(DecodeLabError) as e:
            engine.load.load.load_model(folder, device="cpu", warmup=False)
        took = time.perf_counter() - t0
        assert type(e.value) is error, (name, type(e.value), str(e.value))
        assert words in str(e.value), (name, str(e.value))
        assert not server_paths_in(str(e.value), folder), (name, str(e.value))
        assert took < 10, (name, took)
    assert no_unpickling == []


def test_a_bundled_model_that_fails_names_itself_not_its_folder(tmp_path, monkeypatch, bundled_dir, no_unpickling):
    """A bundled name resolves to a folder of the server; a refusal names the model, never that folder."""
    models = tmp_path / "models"
    folders = hostile_folders(tmp_path, bundled_dir / "tinystories-llama")
    models.mkdir()
    for name in ("pickle behind an index", "lying header", "20,000 tiny layers"):
        Path(folders[name][0]).rename(models / name.replace(" ", "-").replace(",", ""))
    monkeypatch.setattr(engine.load.load, "MODELS_DIR", models)
    for name in engine.load.load.bundled_models():
        with pytest.raises(ModelLoadError) as e:
            engine.load.load.load_model(name, device="cpu", warmup=False)
        assert f"'{name}'" in str(e.value) and str(tmp_path) not in str(e.value), str(e.value)
    assert no_unpickling == []


def test_a_hub_model_the_teacher_named_is_held_to_the_same_rules(tmp_path, monkeypatch, bundled_dir, no_unpickling):
    """`--model evil/model` (a hub id, here from the local Hugging Face cache): a pickle behind its index is
    refused before transformers fetches or reads any weight, exactly as for a folder."""
    import huggingface_hub.constants

    snapshot = tmp_path / "models--evil--model" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (tmp_path / "models--evil--model" / "refs").mkdir()
    (tmp_path / "models--evil--model" / "refs" / "main").write_text("abc")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((bundled_dir / "tinystories-llama" / name).read_bytes())
    (snapshot / "pytorch_model.bin").write_bytes(b"a pickle")
    index = {"weight_map": {"lm_head.weight": "pytorch_model.bin"}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UnsafeWeights, match="safetensors only") as e:
        engine.load.load.load_model("evil/model", device="cpu", warmup=False)
    assert str(tmp_path) not in str(e.value) and no_unpickling == []


def load_other(at: AppTest, source: str) -> AppTest:
    """Type a source into the sidebar's free-form box (only there with an open policy) and press Load."""
    if at.sidebar.selectbox(key="side_model").value != OTHER:
        at.sidebar.selectbox(key="side_model").set_value(OTHER).run()
    at.sidebar.text_input(key="side_custom").set_value(source).run()
    at.sidebar.button(key="side_load").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_hostile_folders_typed_into_an_open_server_get_a_plain_message(hostile, open_policy, no_unpickling):
    at = fresh_app()
    for name, (folder, error, words) in hostile.items():
        load_other(at, folder)
        said = [m for m in messages(at) if folder in m]
        assert len(said) == 1 and words in said[0], (name, messages(at))
        assert not server_paths_in(said[0], folder), said
        assert any("No model is loaded" in e.value for e in at.error)
    assert no_unpickling == []
    at.sidebar.selectbox(key="side_model").set_value("tinystories-llama").run()
    prefill_works(at)


def test_a_failed_load_is_remembered_so_a_rerun_costs_nothing(tmp_path, bundled_dir, open_policy, monkeypatch):
    import ui.frame

    calls = []
    real = ui.frame.load_model

    def counting(source, **kwargs):
        calls.append(source)
        return real(source, **kwargs)

    monkeypatch.setattr(ui.frame, "load_model", counting)
    folder = hostile_folders(tmp_path, bundled_dir / "tinystories-llama")["lying header"][0]  # never tried before
    at = load_other(fresh_app(), folder)
    for seed in (1, 2, 3):  # every widget change reruns the page
        at.sidebar.number_input(key="side_seed").set_value(seed).run()
        assert any(folder in m for m in messages(at))
    assert calls.count(folder) == 1


def test_the_scale_page_offers_only_the_allow_list_and_the_published_table():
    at = fresh_app()
    at.switch_page(page("scale")).run()
    choices = at.selectbox(key="scale_model").options
    assert "Llama-3-8B" in choices and "DeepSeek-V3" in choices
    config_only = next(c for c in choices if "config only" in c)
    at.selectbox(key="scale_model").set_value(config_only).run()
    assert not at.exception and not [t for t in at.text_input if t.key == "scale_src"]  # nothing to type a path into
    offered = at.selectbox(key="scale_src_offered")
    assert offered.options == engine.load.load.bundled_models()
    offered.set_value("tinystories-gpt2").run()
    assert not at.exception and any("config.json of tinystories-gpt2" in seen(c) for c in shown(at))


def test_the_scale_page_refuses_a_hostile_config_once(tmp_path, bundled_dir, open_policy, monkeypatch, no_unpickling):
    from engine.measure import kvcalc

    calls = []
    real = kvcalc.from_config
    monkeypatch.setattr(kvcalc, "from_config", lambda source: calls.append(source) or real(source))
    at = fresh_app()
    at.switch_page(page("scale")).run()
    at.selectbox(key="scale_model").set_value(next(c for c in at.selectbox(key="scale_model").options
                                                   if "config only" in c)).run()
    folder = hostile_folders(tmp_path, bundled_dir / "tinystories-llama")["20,000 tiny layers"][0]
    t0 = time.perf_counter()
    at.text_input(key="scale_src").set_value(folder).run()
    assert time.perf_counter() - t0 < 10
    assert any("num_hidden_layers" in m and folder in m for m in messages(at)), messages(at)
    for tokens in (1024, 2048, 4096):  # every widget change reruns the page
        at.number_input(key="scale_tokens").set_value(tokens).run()
    assert not at.exception and calls.count(folder) == 1
    assert no_unpickling == []


# ------------------------------------------------------------------ nothing typed or linked is markup

PAYLOADS = {
    "link": "[Session expired - sign in again](http://evil.example/login)",
    "image": "![x](http://evil.example/track.png)",
    "html": "<img src=x onerror=alert(1)>",
    "directive": ":red[boom]",
}


def test_plain_makes_markdown_html_and_directives_inert():
    from ui.frame import plain

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


def test_a_link_naming_a_payload_on_an_open_server_shows_it_as_typed(open_policy):
    """On an open server the link's model is tried; the refusal quotes it, as text: no link to click."""
    at = app_test()
    at.query_params = {"model": PAYLOADS["link"]}
    at.run()
    assert not at.exception
    quoted = _all_inert(at, "evil.example")
    assert any(PAYLOADS["link"] in b for b in quoted), quoted


def test_a_payload_typed_as_a_lesson_text_shows_as_text():
    at = fresh_app()
    at.switch_page(page("lessons")).run()
    at.text_input(key="lesson1_text").set_value(PAYLOADS["html"] + PAYLOADS["image"]).run()
    assert not at.exception
    _all_inert(at, "onerror")
    _all_inert(at, "evil.example")


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


# ------------------------------------------------------------------ busy means wait, visibly


@pytest.fixture
def busy_model(monkeypatch):
    """Every forward pass answers Busy (no free slot); counts the tries and the waits between them."""
    tries, waits = [], []
    real_sleep = time.sleep

    class Full(threading.Semaphore):
        def acquire(self, *args, **kwargs):
            tries.append(time.perf_counter())
            return super().acquire(*args, **kwargs)

    def sleep(seconds):
        if seconds >= 0.5:  # a back-off wait: recorded, and made short so the test is quick
            waits.append(seconds)
            return real_sleep(0.01)
        return real_sleep(seconds)

    def fill(lm):
        monkeypatch.setattr(lm, "slots", Full(0))
        monkeypatch.setattr(time, "sleep", sleep)

    return fill, tries, waits


def test_run_to_end_waits_longer_each_time_the_server_is_busy_then_says_so(busy_model):
    fill, tries, waits = busy_model
    at = click(fresh_app(), "step_btn_prefill")
    fill(at.session_state["lm"])
    at.button(key="step_btn_run").click().run()
    assert not at.exception
    said = " ".join(messages(at))
    assert "busy" in said and "Run to end stopped" in said
    assert waits == sorted(waits) and len(waits) == len(tries) - 1 <= 8  # bounded, and a wait between tries
    assert sum(waits) >= 10  # it really backed off (seconds it would have waited, made short here)
    assert new_tokens(at) == 1  # nothing was lost or invented


def test_autoplay_waits_when_the_server_is_busy_and_says_so(busy_model, monkeypatch):
    import ui.frame

    fill, tries, waits = busy_model
    said = []
    real_error = ui.frame.error
    monkeypatch.setattr(ui.frame, "error", lambda text, where=None: said.append(text) or real_error(text))
    at = fresh_app()
    at.sidebar.number_input(key="side_max_new").set_value(3).run()
    click(at, "step_btn_prefill")
    lm = at.session_state["lm"]
    fill(lm)
    real_acquire = type(lm.slots).acquire

    def freed_after_two_waits(self, *args, **kwargs):
        if len(waits) >= 2:
            lm.slots = threading.Semaphore(64)  # the class went quiet
            return lm.slots.acquire(*args, **kwargs)
        return real_acquire(self, *args, **kwargs)

    monkeypatch.setattr(type(lm.slots), "acquire", freed_after_two_waits)
    at.session_state["step_speed"] = 5.0  # paced at 0.2 s a token: only busy answers make waits of 0.5 s or more
    at.session_state["step_autoplay"] = True
    at.run(timeout=60)
    assert not at.exception
    assert len(waits) == 2 and all(w >= 1 for w in waits)  # a real pause after each busy answer, no spinning
    assert any("busy" in s and "Autoplay waits" in s for s in said)
    assert new_tokens(at) == 3  # and then it went on to the end


def test_a_full_queue_gets_a_polite_busy_message(bundled_lm, monkeypatch):
    monkeypatch.setattr(bundled_lm, "slots", threading.Semaphore(0))
    s = Stepper(bundled_lm, GOOD)
    with pytest.raises(Busy, match="busy"):
        s.prefill()


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


def test_double_clicks_each_take_exactly_one_step():
    at = click(fresh_app(), "step_btn_prefill")
    at.button(key="step_btn_next").click()
    at.button(key="step_btn_next").click().run()
    click(at, "step_btn_next")
    assert new_tokens(at) == 3  # prefill + two clicks, none lost or doubled
    assert at.button(key="step_btn_prefill").disabled  # a second Prefill cannot be clicked


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


def test_no_connection_leaves_the_machine_with_the_bundled_model(no_network):
    """With the hub's offline switch off, the default setup still makes no request: every page works."""
    at = click(fresh_app(), "step_btn_prefill")
    for _ in range(3):
        click(at, "step_btn_next")
    for name in ("lessons", "race", "scale", "model_info"):
        at.switch_page(page(name)).run()
        assert not at.exception, name
    assert no_network == []
    icon = re.search(r"page_icon=([^,]+),", (ROOT / "app.py").read_text()).group(1)
    assert ":material/" not in icon and "http" not in icon  # a local file: no favicon from a font CDN
    assert (ROOT / "assets" / "icon.png").read_bytes().startswith(b"\x89PNG")


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


# ------------------------------------------------------------------ the command line


def _cli(argv, capsys):
    from engine.cli import main

    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_model_load(monkeypatch):
    """The CLI must refuse before loading: any load fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(engine.load.load, "load_model", refuse)


@pytest.mark.parametrize("command", [["run", "--prompt", "hi"], ["compare", "--prompt", "hi"], ["bench", "--no-app"],
                                     ["speculate", "--prompt", "hi"]])
def test_cli_refuses_an_unwritable_json_path_before_the_run(command, tmp_path, capsys, no_model_load):
    paths = [str(tmp_path / "no-such-folder" / "x.json"), str(tmp_path)]
    if Path("/proc/self").is_dir():
        paths.append("/proc/decode-lab.json")  # cannot be created, even by root (who passes every access check)
    for path in paths:
        code, out, err = _cli(command + ["--json", path], capsys)
        assert code == 2 and err.startswith("error: --json") and err.count("\n") == 1, (path, err)
        assert "Traceback" not in err and not out
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_cli_bench_refuses_lengths_and_rounds_below_one(capsys, no_model_load):
    for argv in (["--lengths", "0"], ["--lengths", "-5"], ["--rounds", "0"]):
        code, out, err = _cli(["bench", "--no-app", *argv], capsys)
        assert code == 2 and "invalid _positive value" in err and "Traceback" not in err


@pytest.mark.parametrize("tokens", ["-5", "0", str(10**12)])
def test_cli_kv_size_refuses_figures_no_model_has(tokens, capsys):
    code, out, err = _cli(["kv-size", "--model", "Llama-3-8B", "--tokens", tokens], capsys)
    assert code == 2 and not out and err.startswith("error: tokens must be a whole number") and err.count("\n") == 1


def test_cli_kv_size_refuses_server_files_as_models(capsys):
    for source in ("/etc/shadow", "/etc", "/no/such/folder"):
        code, out, err = _cli(["kv-size", "--model", source, "--tokens", "8"], capsys)
        assert code == 2 and not out and err.startswith("error: ") and err.count("\n") == 1, err


def test_cli_top_k_0_means_off_and_keeps_greedy(capsys):
    runs = []
    for extra in ([], ["--top-k", "0"]):
        code, out, err = _cli(["run", "--prompt", GOOD, "--steps", "8", "--device", "cpu", *extra], capsys)
        assert code == 0
        runs.append(out.split("\n\n")[0])  # the generated text
    assert runs[0] == runs[1]
    code, out, err = _cli(["run", "--prompt", GOOD, "--steps", "8", "--top-k", "-1"], capsys)
    assert code == 2 and "top-k" in err


def test_cli_refuses_an_unknown_device_in_one_line(capsys):
    code, out, err = _cli(["run", "--prompt", "hi", "--device", "nosuch"], capsys)
    assert code == 2 and err.startswith("error: Unknown device") and "Traceback" not in err


def test_cli_rejects_a_seed_that_is_not_a_number(capsys):
    code, out, err = _cli(["run", "--prompt", "hi", "--seed", "abc"], capsys)
    assert code == 2 and "invalid int value" in err


@pytest.mark.parametrize("corpus, why", [
    (None, "not a file"),
    (b"", "0 stories"),
    (b"<|endoftext|>\n  \n<|endoftext|>", "0 stories"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 50, "not UTF-8"),
    ("Once upon a time.\x00<|endoftext|>".encode() * 20, "NUL bytes"),
    (b"One story only.", "1 stories"),
])
def test_cli_train_refuses_an_unusable_corpus_and_creates_nothing(corpus, why, tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    if corpus is not None:
        path.write_bytes(corpus)
    out_dir = tmp_path / "out" / "model"
    code, out, err = _cli(["train", "--corpus", str(path), "--out", str(out_dir), "--steps", "2"], capsys)
    assert code == 2 and why in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, why", [
    (["--steps", "0"], "--steps"), (["--eval-every", "0"], "--eval-every"), (["--heads", "3"], "divide"),
    (["--vocab-size", "10"], "--vocab-size"), (["--init-from", "/no/such/model"], "--init-from"),
])
def test_cli_train_refuses_settings_it_cannot_train_before_creating_anything(argv, why, tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    path.write_text("<|endoftext|>".join(["Once upon a time there was a cat."] * 20))
    code, out, err = _cli(["train", "--corpus", str(path), "--out", str(tmp_path / "out"), *argv], capsys)
    assert code == 2 and why in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ memory goes back after a big run


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_memory_goes_back_after_a_cache_off_run(bundled_lm):
    """A cache-off run of 150 tokens holds every step's trace; Reset (free) and release_memory give it back.

    Compared with the run's own peak, not with a fixed figure: at least half of what the run added is returned.
    """
    from engine.load.device import release_memory

    release_memory()
    before = rss()
    s = Stepper(bundled_lm, GOOD, use_cache=False, max_new_tokens=150, stop_on_eos=False, repeats=1)
    s.run()
    peak = rss()
    s.free()
    del s
    release_memory()
    after = rss()
    grew = peak - before
    assert grew > 8 * 2**20, f"the run added only {grew / 2**20:.1f} MiB: nothing to measure"
    assert after - before < grew / 2, (before / 2**20, peak / 2**20, after / 2**20)
