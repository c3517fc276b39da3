"""The compiled recipe (physics/compiled.py) is the model you have, compiled: the same weights, the Stepper's
tokens and logits, compile time apart; the race at a rung can run on it and says which path ran; bundled models load in fp32 everywhere.

On a CPU the compiled recipe runs uncompiled by default (inductor takes tens of seconds); one tiny compiled decode
checks that the compiled code gives the same tokens. The GPU's claims (CUDA graphs) are tests/test_gpu.py's.
"""

from __future__ import annotations

import pytest
import torch

from engine.forward.run import run_pass
from engine.generate.compare import compare
from engine.generate.stepper import Stepper
from engine.load.load import model_dtype
from engine.transformers_internals import attn_implementation
from physics import compiled
from topics.race import measure as race

PROMPT = "Once upon a time, there was a little girl named Lily. She"


def steppers_tokens(lm, prompt: str = PROMPT, new_tokens: int = 24):
    run = Stepper(lm, prompt, max_new_tokens=new_tokens, stop_on_eos=False, record=False, repeats=1)
    run.run()
    return run.ids[:, :run.prompt_len], run.generated_ids


def test_the_view_is_the_same_weights_on_sdpa_and_leaves_the_readable_attention_alone(bundled_lm):
    view = compiled.sdpa_view(bundled_lm.model)
    assert view is compiled.sdpa_view(bundled_lm.model)  # one view per model
    mine = dict(bundled_lm.model.named_parameters())
    assert all(p is mine[name] for name, p in view.named_parameters())  # shared, not copied
    assert attn_implementation(view.config) == "sdpa"
    assert attn_implementation(bundled_lm.model.config) == "decode_lab"  # students still step the recording path


@pytest.mark.parametrize("family", ["llama", "qwen2", "phi3", "gpt2"])
def test_compiled_tokens_and_logits_equal_the_steppers_for_every_family_a_rung_takes(family, family_model):
    lm = family_model(family)
    ids, tokens = steppers_tokens(lm)
    assert compiled.greedy(lm, ids, len(tokens), compile=False) == tokens
    lean = compiled.CompiledRecipe(lm, ids.shape[1] + 2, compile=False)
    with lm.turn():
        token = lean.prefill(ids)
        step = lean.step(token)  # [batch, vocab] at position s
        full = lean.full(ids)
    readable_full = run_pass(lm, ids).logits[:, -1]
    from engine.forward.cache import new_cache

    cache = new_cache(lm.config)
    run_pass(lm, ids, cache)
    readable_step = run_pass(lm, torch.tensor([[token]]), cache).logits[:, -1]
    torch.testing.assert_close(full, readable_full, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, readable_step, rtol=1e-4, atol=1e-4)


def test_the_bundled_models_compiled_tokens_equal_the_steppers(bundled_lm):
    ids, tokens = steppers_tokens(bundled_lm, new_tokens=48)
    assert compiled.greedy(bundled_lm, ids, 48, compile=False) == tokens


@pytest.mark.slow  # 9 s here with inductor's disk cache warm, ~25 s cold
def test_a_compiled_decode_on_a_cpu_gives_the_steppers_tokens_and_keeps_its_compile_apart(family_model):
    """The same code torch.compile runs on a GPU, here with inductor on the CPU (a 2-layer model)."""
    lm = family_model("llama")
    ids, tokens = steppers_tokens(lm, new_tokens=12)
    lean = compiled.CompiledRecipe(lm, ids.shape[1] + 12, compile=True)
    with lm.turn():
        out = [lean.prefill(ids)]
        while len(out) < 12:
            out.append(lean.decode(out[-1]))
    assert out == tokens
    assert lean.how == "static cache + SDPA, torch.compile (inductor; CUDA graphs need a GPU)"
    assert set(lean.compile_ms) == {"decode"} and lean.compile_ms["decode"] > 0  # its first call, apart
    assert lean.graph_captured is None  # no CUDA graphs were asked for on a CPU


def test_timing_the_compiled_recipe_keeps_warm_up_and_compile_apart(bundled_lm):
    ids, _ = steppers_tokens(bundled_lm, new_tokens=2)
    timing, lean = compiled.time_decode(bundled_lm, ids, repeats=3, compile=False)
    assert timing.repeats == 3 and timing.warmup_ms is not None and "decode" in lean.compile_ms
    timing, lean = compiled.time_prefill(bundled_lm, ids, repeats=2, compile=False, run=lean)
    assert timing.repeats == 2 and ("full", ids.shape[1]) in lean.warm_ms
    assert lean.describe("full") == "every position at once, SDPA, not compiled"


def test_transformers_recipe_is_timed_beside_it_and_says_whether_it_compiled(bundled_lm):
    ids, _ = steppers_tokens(bundled_lm, new_tokens=2)
    timing, warm_ms, how = compiled.time_recipe(bundled_lm, ids, steps=4, repeats=2)
    assert timing.repeats == 2 and warm_ms > 0 and all(ms >= 0 for ms in timing.samples_ms)
    assert how.startswith("transformers' recipe: generate on one reused StaticCache + SDPA")
    assert how.endswith("not compiled here")  # generate compiles on a GPU only


# ---------------------------------------------------------------- the race on the compiled recipe


def test_the_compiled_race_is_exact_says_which_path_ran_and_draws_like_a_race(bundled_lm):
    report = race.lean_compare(bundled_lm, "Once upon a time", 24)
    readable = compare(bundled_lm, "Once upon a time", 24, stop_on_eos=False)
    assert report.identical and report.tokens["cache"] == readable.tokens["cache"]
    assert report.how == {"cache": "static cache + SDPA, not compiled",
                          "nocache": "no cache, every position again, SDPA, not compiled"}
    assert set(readable.to_dict()) <= set(report.to_dict()) and report.max_logit_diff < 1e-3
    df = race.race_frame(report)
    s = len(bundled_lm.tokenizer("Once upon a time")["input_ids"])
    assert list(df[df["mode"] == "nocache"]["q_len"])[:4] == [s, s + 1, s + 2, s + 3]  # every position again
    assert set(df[(df["mode"] == "cache") & (df["phase"] == "decode")]["q_len"]) == {1}
    assert race.summary(report, df).identical


def test_a_16_bit_race_explains_why_its_tokens_may_part_and_fp32_says_nothing():
    assert race.precision_note("float32") is None
    note = race.precision_note("bfloat16")
    assert "bfloat16" in note and "near" in note and "float32" in note and "\n" not in note


def test_bundled_models_load_in_fp32_on_every_device_unless_asked():
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    assert model_dtype("default", cuda) == torch.float32 and model_dtype("tinystories-gpt2", cuda) == torch.float32
    assert model_dtype("default", cuda, "bfloat16") == torch.bfloat16
    assert model_dtype("some-org/some-model", torch.device("cpu")) == torch.float32
