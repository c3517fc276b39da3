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
from physics.rungs import build, plan

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
    rlm = build(rung, bundled_lm)  # random weights, as the ladder grows them
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


def storage(model) -> dict[str, tuple]:
    """Each Parameter of the readable model: the object, where its data lies, and how it is laid out."""
    return {name: (p, p.data_ptr(), p.stride()) for name, p in model.named_parameters()}


@pytest.mark.parametrize("which", ["bundled", "rung"])
def test_building_the_lean_pass_leaves_every_readable_parameter_where_it_was(which, bundled_lm):
    """No side effect on the model the class steps through: building the lean pass (and running it) moves no
    Parameter's storage, changes no layout and no logit."""
    if which == "bundled":
        model = bundled_lm.model
    else:
        (rung,), _ = plan(bundled_lm, ["2M"], tokens=32)
        model = build(rung, bundled_lm).model
    ids = prompt_ids(bundled_lm)
    before, logits = storage(model), reference(model, ids)
    lean = lean_pass.LeanLlama(model, max_batch=1, max_len=ids.shape[1] + 1)
    with torch.no_grad():
        lean(ids, torch.arange(ids.shape[1]))
    assert storage(model) == before
    assert torch.equal(reference(model, ids), logits)
    attn = model.model.layers[0].self_attn  # shared, not copied: the lean pass holds the very Parameters
    assert lean.wq[0] is attn.q_proj.weight and lean.wo[0] is attn.o_proj.weight
    assert lean.embed is model.model.embed_tokens.weight


def test_the_lean_pass_names_the_kernel_it_runs_its_products_with(bundled_lm):
    lean = lean_pass.LeanLlama(bundled_lm.model, max_batch=1, max_len=8)
    assert "streamed" in lean.kernel  # a CPU's one-row products
    assert lean_pass.LeanLlama(bundled_lm.model, 1, 8, one_row_kernel=False).kernel == "F.linear"


@pytest.mark.parametrize("out", [64, 100, 8])  # STREAMS blocks; rows that do not split evenly; one row a block
def test_the_one_row_product_read_in_blocks_gives_every_output_its_own_row_times_x(out):
    """engine/forward/streamed.py reads a one-row product's matrix in blocks of rows: each output must still be its
    own row times x (a block cut or joined in the wrong place would swap or drop outputs), eager and compiled,
    against the product in float64."""
    from engine.forward import streamed

    gen = torch.Generator().manual_seed(out)
    w, x = torch.randn(out, 96, generator=gen), torch.randn(1, 1, 96, generator=gen)
    want = (x.double().reshape(1, -1) @ w.double().T).view(1, 1, out)
    compiled = torch.compile(streamed.rows_times, fullgraph=True)
    for got in (streamed.rows_times(x, w), compiled(x, w), streamed.rows_times(x, w, streams=1)):
        assert got.shape == (1, 1, out)
        assert torch.allclose(got.double(), want, atol=1e-4), (got.double() - want).abs().max()
    torch._dynamo.reset()


def test_a_family_the_lean_pass_does_not_cover_is_refused_in_words(family_model):
    lm = family_model("gpt2")
    why = lean_pass.supports(lm.model)
    assert why and "Llama" in why and "gpt2" in why
    with pytest.raises(ValueError, match="Llama"):
        lean_pass.LeanLlama(lm.model, 1, 8)
    assert lean_pass.supports(family_model("llama").model) is None


@pytest.mark.slow
def test_the_compiled_lean_pass_gives_the_same_logits_one_row_and_many(bundled_lm):
    """Compiled whole (inductor; on a CPU the one-row products as streamed dot products, the multi-row ones
    F.linear): the same logits as transformers, one row and a prefill of many rows."""
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


@pytest.mark.slow
def test_the_words_for_the_compiled_pass_claim_only_what_inductors_code_does(family_model):
    """A page says how the pass ran (compile_settings' words). "Frozen weights" may be said only where inductor's
    code reads the weights as constants (`_frozen_param`), never where they arrive as inputs each call: an option
    that changes nothing is not a claim. The reference is the code inductor wrote for this compile."""
    from torch._inductor.utils import fresh_cache, run_and_get_code

    lm = family_model("llama")
    lean = lean_pass.LeanLlama(lm.model, max_batch=1, max_len=8)
    words = lean_pass.compile_settings(lean.embed.device).words
    with torch.no_grad(), fresh_cache():  # a cached graph would hand back no code to read
        _logits, code = run_and_get_code(lean_pass.compiled_pass(lean), torch.tensor([[1, 2, 3]]), torch.arange(3))
    torch._dynamo.reset()
    assert code and "def call(" in "".join(code)
    assert ("frozen" in words) == ("_frozen_param" in "".join(code)), words
