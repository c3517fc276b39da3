"""Hostile model folders, hub ids and configs: refused with a typed, plain message before any weight is read."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

import engine.load.load
from engine.errors import DecodeLabError, ModelLoadError, NotACausalLM, UnsafeWeights
from engine.timing import timed
from tests.models import OTHER
from tests.safety import messages, prefill_works, seen, shown
from tests.test_app import fresh_app
from ui.apptest import ROOT, page

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
        with pytest.raises(DecodeLabError) as e:
            engine.load.load.load_model(folder, device="cpu", warmup=False)
        assert type(e.value) is error, (name, type(e.value), str(e.value))
        assert words in str(e.value), (name, str(e.value))
        assert not server_paths_in(str(e.value), folder), (name, str(e.value))
    assert no_unpickling == []


@pytest.mark.perf
def test_each_hostile_folder_is_refused_within_seconds(hostile, no_unpickling):
    """Refused before any weight is read: a 20,000-layer config or a lying header costs seconds, not a load."""
    for name, (folder, _, _) in hostile.items():
        def load():
            with pytest.raises(DecodeLabError):
                engine.load.load.load_model(folder, device="cpu", warmup=False)

        assert timed(load, repeats=1, warmup=0).forward_ms < 10_000, name


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_failed_load_is_remembered_so_a_rerun_costs_nothing(tmp_path, bundled_dir, open_policy, monkeypatch):
    import ui.model

    calls = []
    real = ui.model.load_model

    def counting(source, **kwargs):
        calls.append(source)
        return real(source, **kwargs)

    monkeypatch.setattr(ui.model, "load_model", counting)
    folder = hostile_folders(tmp_path, bundled_dir / "tinystories-llama")["lying header"][0]  # never tried before
    at = load_other(fresh_app(), folder)
    for seed in (1, 2, 3):  # every widget change reruns the page
        at.sidebar.number_input(key="side_seed").set_value(seed).run()
        assert any(folder in m for m in messages(at))
    assert calls.count(folder) == 1


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_scale_page_refuses_a_hostile_config_once(tmp_path, bundled_dir, open_policy, monkeypatch, no_unpickling):
    from physics import kvcalc

    calls = []
    real = kvcalc.from_source
    monkeypatch.setattr(kvcalc, "from_source", lambda source: calls.append(source) or real(source))
    at = fresh_app()
    at.switch_page(page("scale")).run()
    at.selectbox(key="scale_model").set_value(next(c for c in at.selectbox(key="scale_model").options
                                                   if "config only" in c)).run()
    folder = hostile_folders(tmp_path, bundled_dir / "tinystories-llama")["20,000 tiny layers"][0]
    at.text_input(key="scale_src").set_value(folder).run()  # refused from its config (the perf tier times it)
    assert any("num_hidden_layers" in m and folder in m for m in messages(at)), messages(at)
    for tokens in (1024, 2048, 4096):  # every widget change reruns the page
        at.number_input(key="scale_tokens").set_value(tokens).run()
    assert not at.exception and calls.count(folder) == 1
    assert no_unpickling == []
