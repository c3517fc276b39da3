"""Shapes from the world: a rung can take a published model's shape (assets/model_configs.csv), in its own
family, labelled with the model whose shape it is, counted and checked against memory before any weight exists.
"""

from __future__ import annotations

import pytest
import torch

from engine.errors import StepError, TooLarge
from engine.generate.stepper import Stepper
from engine.load.checks import estimate_parameters
from physics import rungs, shapes


@pytest.mark.parametrize("name", shapes.OFFERED)
def test_each_offered_shape_has_its_published_figures_and_count(name):
    row = shapes._rows()[name]
    config = shapes.shape_config(name)
    assert type(config).__name__ == shapes.FAMILIES[row["architecture"]]  # transformers' own class, no remote code
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.intermediate_size, config.vocab_size) == tuple(int(row[k] or row["num_attention_heads"]) for k in (
                "num_layers", "d_model", "num_attention_heads", "num_key_value_heads", "intermediate_size",
                "vocab_size"))
    assert estimate_parameters(config) == pytest.approx(shapes.published_parameters(name), rel=0.015)


def test_the_embeddings_are_tied_where_the_published_count_says_so():
    tied = {name: shapes.shape_config(name).tie_word_embeddings for name in ("SmolLM2-135M", "Qwen2.5-0.5B",
                                                                            "TinyLlama-1.1B", "Llama-3-8B")}
    assert tied == {"SmolLM2-135M": True, "Qwen2.5-0.5B": True, "TinyLlama-1.1B": False, "Llama-3-8B": False}


def test_a_planned_shape_is_labelled_with_its_model_everywhere(bundled_lm, monkeypatch):
    # a machine with room for it (an 8 B plan needs ~19.4 GiB free; the refusal has its own test below)
    monkeypatch.setattr(rungs.dev, "available_bytes", lambda device: 64 * 2**30)
    planned, _ = rungs.plan(bundled_lm, ["own", "llama-3-8b", "SmolLM2-135M"], dtype=torch.bfloat16)
    own, small, big = planned
    assert (small.label, big.label) == ("SmolLM2-135M", "Llama-3-8B")  # the table's spelling, whatever was typed
    assert big.weights == "Llama-3-8B's shape, random weights: timing only" and big.shape_of == "Llama-3-8B"
    assert (big.shape.layers, big.shape.d_model, big.shape.kv_heads, big.shape.head_dim) == (32, 4096, 8, 128)
    assert big.weight_bytes(torch.bfloat16) == 2 * big.parameters and own.own and own.shape_of is None


def test_a_shape_that_would_not_fit_is_refused_before_any_weight(bundled_lm, monkeypatch):
    monkeypatch.setenv("DECODE_LAB_MEMORY_LIMIT", str(2**30))
    monkeypatch.setattr(rungs, "build", lambda *a, **k: pytest.fail("built before the refusal"))
    with pytest.raises(TooLarge) as e:
        rungs.plan(bundled_lm, ["Llama-3-8B"], dtype=torch.bfloat16)
    assert "Llama-3-8B (8.0B parameters, 15.0 GiB of bfloat16 weights)" in str(e.value) and "\n" not in str(e.value)


def test_a_name_that_is_neither_a_size_nor_a_shape_is_refused_in_one_line(bundled_lm):
    with pytest.raises(StepError) as e:
        rungs.plan(bundled_lm, ["Llama-9"])
    assert "published shape" in str(e.value) and "\n" not in str(e.value)


def test_a_gpus_default_rungs_are_real_shapes():
    assert rungs.default_sizes(torch.device("cuda")) == ("own", "TinyLlama-1.1B", "Llama-3-8B")
    assert all(shapes.is_shape(s) for s in rungs.GPU_SIZES[1:])


@pytest.mark.slow  # 5 s here, but 540 MB of random fp32 weights: not for the fast tier's two workers
def test_a_real_shape_rung_builds_in_its_family_and_steps_with_the_models_tokenizer(bundled_lm):
    rlm = rungs.rung_model(bundled_lm, "SmolLM2-135M")
    assert rlm.spec.name == "SmolLM2-135M's shape" and rlm.spec.source == shapes.weights_words("SmolLM2-135M")
    assert rlm.spec.vocab == 49152 and rlm.tokenizer is bundled_lm.tokenizer and rlm.captures
    assert rlm.spec.parameters == 134_515_008
    run = Stepper(rlm, "Once upon a time", max_new_tokens=2, stop_on_eos=False, repeats=1)
    run.run()
    assert len(run.generated_ids) == 2  # tokens past the tokenizer's vocabulary read as nothing, never an error
