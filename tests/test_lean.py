"""The lean pass (engine/forward/lean.py: gpt-fast's Llama over the readable model's own weights) gives the readable
model's logits: at a prefill, at every decode step after it, for each sequence of a batch, for every Llama-family
model the app ships and for grown and tiny rungs. The reference is transformers' own forward of the same model
(the very module students step through), never the lean code."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.forward import lean as lean_pass
from engine.load.load import load_model
from engine.load.rungs import build, plan

PROMPT = "Once upon a time there was a little cat named Tom. He liked to"


def reference(model, ids: torch.Tensor) -> torch.Tensor:
    """transformers' own forward: the logits after the last position of ids [batch, n]."""
    with torch.no_grad():
        return model(input_ids=ids).logits[:, -1]


def prompt_ids(lm, text: str = PROMPT) -> torch.Tensor:
    return lm.tokenizer(text, return_tensors="pt")["input_ids"]


def check_against_transformers(model, ids: torch.Tensor, steps: int = 3, atol: float = 2e-4) -> None:
    """A prefill of ids [1, s], then `steps` greedy decode steps, each against transformers on the whole sequence."""
    s = ids.shape[1]
    lean = lean_pass.LeanLlama(model, max_batch=1, max_len=s + steps + 1)
    seq = ids
    with torch.no_grad():
        got = lean(ids, torch.arange(s))
        for step in range(steps + 1):
            want = reference(model, seq)
            assert torch.allclose(got, want, atol=atol, rtol=1e-4), (step, (got - want).abs().max())
            nxt = want.argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
            got = lean(nxt, torch.tensor([seq.shape[1] - 1]))


@pytest.mark.parametrize("name", ["tinystories-llama", "tinystories-draft"])
def test_the_lean_pass_gives_the_bundled_llamas_own_logits_at_prefill_and_every_decode_step(name):
    lm = load_model(name, device="cpu")
    check_against_transformers(lm.model, prompt_ids(lm))


@pytest.mark.parametrize("family", ["llama", "llama-mqa"])
def test_the_lean_pass_gives_a_tiny_llamas_logits_with_grouped_and_single_kv_heads(family, family_model):
    lm = family_model(family)
    check_against_transformers(lm.model, prompt_ids(lm))


def test_the_lean_pass_gives_a_grown_rungs_logits(bundled_lm):
    (rung,), _ = plan(bundled_lm, ["2M"], tokens=32)
    rlm = build(rung, bundled_lm)  # random weights, stored [in, out] as the ladder stores them on a CPU
    check_against_transformers(rlm.model, prompt_ids(bundled_lm))


def test_llama_3_rope_scaling_is_read_from_the_models_own_frequencies():
    """A Llama-3-style config (rope_type llama3: low frequencies stretched) at a length where the scaling matters."""
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8})
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    check_against_transformers(model, torch.randint(0, 97, (1, 40)))


def test_a_decode_step_for_a_batch_gives_each_sequence_its_own_single_step_logits(bundled_lm):
    """One pass for n sequences ([n, 1] at the same position) is n decode steps: each row equals the step alone."""
    ids = prompt_ids(bundled_lm)
    s = ids.shape[1]
    lean = lean_pass.LeanLlama(bundled_lm.model, max_batch=4, max_len=s + 2)
    with torch.no_grad():
        lean(ids.expand(4, s).contiguous(), torch.arange(s))  # four sequences with the same context
        nxt = torch.tensor([[5], [17], [42], [99]])
        rows = lean(nxt, torch.tensor([s]))
    for i in range(4):
        want = reference(bundled_lm.model, torch.cat([ids, nxt[i:i + 1]], dim=1))
        assert torch.allclose(rows[i], want[0], atol=2e-4), i


def test_the_lean_pass_reads_the_readable_models_own_weights_and_leaves_its_logits_alone(bundled_lm):
    """Shared, not copied: q, k and v (and gate, up) are slices of one fused matrix, the readable model's Parameters
    (the same objects) now read from it, and the readable model's logits are what they were."""
    model, ids = bundled_lm.model, prompt_ids(bundled_lm)
    before = reference(model, ids)
    params = dict(model.named_parameters())
    lean = lean_pass.LeanLlama(model, max_batch=1, max_len=ids.shape[1] + 1)
    assert dict(model.named_parameters()) == params  # the same Parameter objects
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    wqkv, w13 = lean.wqkv[0], lean.w13[0]
    row = wqkv.stride(0) * wqkv.element_size()
    assert attn.q_proj.weight.data_ptr() == wqkv.data_ptr()
    assert attn.k_proj.weight.data_ptr() == wqkv.data_ptr() + attn.q_proj.weight.shape[0] * row
    assert mlp.up_proj.weight.data_ptr() == w13.data_ptr() + mlp.gate_proj.weight.shape[0] * w13.stride(0) * 4
    assert lean.wo[0] is attn.o_proj.weight and lean.embed is model.model.embed_tokens.weight
    assert torch.equal(reference(model, ids), before)
    again = lean_pass.LeanLlama(model, max_batch=1, max_len=8)  # asked again: the same fused matrices
    assert again.wqkv[0].data_ptr() == wqkv.data_ptr()


def test_a_family_the_lean_pass_does_not_cover_is_refused_in_words(family_model):
    lm = family_model("gpt2")
    why = lean_pass.supports(lm.model)
    assert why and "Llama" in why and "gpt2" in why
    with pytest.raises(ValueError, match="Llama"):
        lean_pass.LeanLlama(lm.model, 1, 8)
    assert lean_pass.supports(family_model("llama").model) is None


@pytest.mark.slow
def test_the_compiled_lean_pass_gives_the_same_logits_one_row_and_many(bundled_lm):
    """Compiled whole (inductor; on a CPU the one-row products as streamed dot products, the multi-row ones on
    oneDNN's packed weights): the same logits as transformers, one row and a prefill of many rows."""
    ids = prompt_ids(bundled_lm)
    s = ids.shape[1]
    lean = lean_pass.LeanLlama(bundled_lm.model, max_batch=1, max_len=s + 2)
    fn = lean_pass.compiled_pass(lean)
    torch._dynamo.mark_dynamic(ids, 1)
    where = torch.arange(s)
    torch._dynamo.mark_dynamic(where, 0)
    with torch.no_grad():
        got = fn(ids, where)
        assert torch.allclose(got, reference(bundled_lm.model, ids), atol=2e-4)
        one = lean_pass.compiled_pass(lean)
        nxt = got.argmax(-1, keepdim=True)
        step = one(nxt, torch.tensor([s]))
    assert torch.allclose(step, reference(bundled_lm.model, torch.cat([ids, nxt], 1)), atol=2e-4)
    torch._dynamo.reset()
