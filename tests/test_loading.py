"""Loading is safe: clear, typed refusals before anything unsafe or too big happens."""

from __future__ import annotations

import json

import pytest
import torch

from engine import load_model
from engine.device import pick_device, pick_dtype
from engine.errors import ModelNotFound, NotACausalLM, NoTokenizer, RemoteCodeRequired, TooLarge, UnsafeWeights
from engine.transformers_internals import attn_implementation


def test_spec_describes_the_model(tiny_dirs):
    lm = load_model(tiny_dirs["llama"])
    s = lm.spec
    assert (s.layers, s.heads, s.kv_heads, s.head_dim, s.d_model, s.max_positions) == (2, 4, 2, 8, 32, 64)
    assert s.parameters == sum(p.numel() for p in lm.model.parameters())
    # the best device here, in its fast dtype (fp32 on a CPU, bf16 on a GPU): the same test passes on a GPU machine
    assert lm.device == pick_device() and lm.dtype == pick_dtype(lm.device)
    # attention runs through the layers' own eager code, wrapped so Q, K and V can be read (engine/forward/capture.py)
    assert attn_implementation(lm.model.config) == "decode_lab" and lm.captures


def test_unknown_id_offline_is_a_clear_error():
    with pytest.raises(ModelNotFound, match="Could not find"):
        load_model("no-such-org/no-such-model")


def test_empty_folder_is_not_a_model(tmp_path):
    with pytest.raises(NotACausalLM, match="no config.json"):
        load_model(str(tmp_path))


def test_pickle_only_weights_are_refused_unread(tiny_dirs, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text((open(f"{tiny_dirs['gpt2']}/config.json")).read())
    poison = folder / "pytorch_model.bin"
    poison.write_bytes(b"not even a pickle: must never be opened")
    with pytest.raises(UnsafeWeights, match="pickle"):
        load_model(str(folder))


def test_remote_code_is_refused_and_never_runs(tmp_path):
    """A folder whose config names its own code: the code would leave a marker file the moment it ran (transformers
    copies it elsewhere before importing it, so the marker's path is written into it)."""
    marker = tmp_path / "the-code-ran"
    model = tmp_path / "custom"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "my-custom-arch", "architectures": ["CustomForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_custom.CustomConfig",
                     "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"},
    }))
    side_effect = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    (model / "configuration_custom.py").write_text(side_effect + (
        "from transformers import PretrainedConfig\n\n\n"
        "class CustomConfig(PretrainedConfig):\n    model_type = 'my-custom-arch'\n"))
    (model / "modeling_custom.py").write_text(side_effect)
    with pytest.raises(RemoteCodeRequired, match="never runs downloaded code"):
        load_model(str(model))
    assert not marker.exists()


def test_encoder_model_is_not_a_causal_lm(tmp_path):
    from transformers import BertConfig

    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               architectures=["BertForMaskedLM"]).save_pretrained(tmp_path)
    with pytest.raises(NotACausalLM, match="not a decoder-only"):
        load_model(str(tmp_path))


def test_too_large_is_refused_before_loading(tmp_path):
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, vocab_size=128256).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"never read")
    with pytest.raises(TooLarge, match="estimate"):
        load_model(str(tmp_path), dtype=torch.float16)


def test_missing_tokenizer_is_a_clear_error(tiny_dirs, tmp_path):
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        (tmp_path / name).write_bytes(open(f"{tiny_dirs['gpt2']}/{name}", "rb").read())
    with pytest.raises(NoTokenizer, match="tokenizer"):
        load_model(str(tmp_path))



def test_a_config_with_no_position_limit_is_shown_as_not_set_not_as_read(tiny_dirs):
    """The Model page says every number is read from the config; a limit the config does not set (a family with
    neither max_position_embeddings nor n_positions) is the app's own, and the page says so."""
    from transformers import PretrainedConfig

    from engine.forward.spec import from_config
    from engine.load.loaded import LoadedModel

    bare = PretrainedConfig(num_attention_heads=2, hidden_size=16, num_hidden_layers=2, vocab_size=32)
    spec = from_config(bare, "bare", 1.0)
    shown = dict(LoadedModel(model=None, tokenizer=None, spec=spec, device=torch.device("cpu"), dtype=torch.float32,
                             captures=False).rows())["max positions"]
    assert shown == f"{spec.max_positions:,} (not set in its config: the app stops here)", shown
    assert dict(load_model(tiny_dirs["llama"]).rows())["max positions"] == "64"  # a limit the config sets: as read
