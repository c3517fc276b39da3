"""Shared fixtures: tiny random models for architecture coverage, the bundled model for realism."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the network

import pytest

from engine.loading import MODELS_DIR, load_model
from engine.train import train_tokenizer

TINY_TEXT = [
    "Once upon a time there was a little cat named Tom. Tom liked to play in the sun.",
    "One day, a girl found a red ball in the park. She was very happy and ran home.",
    "The dog and the bird were friends. They played every day by the big tree.",
] * 10


def _save_tiny(path, arch: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tok = train_tokenizer(TINY_TEXT, 300)
    eos = tok.eos_token_id
    ids = dict(vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    if arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **ids))
    else:  # Llama with grouped-query attention: 4 query heads share 2 KV heads
        model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=64, **ids))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    import torch

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("tiny")
    return {arch: _save_tiny(root / arch, arch) for arch in ("gpt2", "llama")}


@pytest.fixture(scope="session", params=["gpt2", "llama"])
def tiny_lm(request, tiny_dirs):
    """A tiny random model of each architecture, loaded through the real loader."""
    return load_model(tiny_dirs[request.param], device="cpu")


@pytest.fixture(scope="session")
def bundled_lm():
    """The bundled default model: trained weights, real text."""
    return load_model("default", device="cpu")


@pytest.fixture(scope="session")
def bundled_dir():
    return MODELS_DIR
