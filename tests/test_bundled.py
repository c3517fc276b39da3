"""The bundled models: trained, offline, the architectures the app teaches with."""

from __future__ import annotations

import json

import pytest

from engine import Stepper, bundled_models, load_model
from engine.load.load import MODELS_DIR
from engine.paths import ASSETS
from tests import reference
from tools.train import bits_per_byte, read_stories

EVAL = ASSETS / "held_out" / "tinystories_eval_40.txt"  # never trained on
PROMPTS = json.loads((MODELS_DIR.parent / "prompts.json").read_text())


def test_both_models_are_bundled_default_first():
    names = bundled_models()
    assert names[0] == "tinystories-llama"
    assert "tinystories-gpt2" in names


def test_default_is_gqa_and_twin_is_mha():
    llama = load_model("default")
    gpt2 = load_model("tinystories-gpt2")
    assert llama.spec.architecture == "LlamaForCausalLM" and llama.spec.attention == "GQA"
    assert gpt2.spec.architecture == "GPT2LMHeadModel" and gpt2.spec.attention == "MHA"
    assert llama.spec.max_positions >= 512 and gpt2.spec.max_positions >= 512


def test_weights_are_safetensors_and_small():
    for name in bundled_models():
        folder = MODELS_DIR / name
        assert not [p for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
        assert (folder / "model.safetensors").stat().st_size <= 25 * 2**20


def test_tokenizer_round_trips_the_preset_prompts(bundled_lm):
    tok = bundled_lm.tokenizer
    for p in PROMPTS:
        assert tok.decode(tok(p["prompt"])["input_ids"], skip_special_tokens=True) == p["prompt"]


@pytest.mark.slow
def test_default_model_writes_english_and_sampling_varies_with_seed(bundled_lm):
    s = Stepper(bundled_lm, "Once upon a time", max_new_tokens=40)
    s.run()
    words = s.generated_text.split()
    assert len(words) >= 10
    common = {"the", "a", "was", "and", "to", "he", "she", "they", "her", "his", "there", "named"}
    assert sum(w.lower().strip(".,!\"") in common for w in words) >= 3

    def sample(seed):
        from engine import Sampling

        r = Stepper(bundled_lm, "Once upon a time", max_new_tokens=20,
                    sampling=Sampling(greedy=False, temperature=0.8, seed=seed))
        r.run()
        return r.generated_text

    assert sample(1) == sample(1)
    assert len({sample(1), sample(2), sample(3)}) > 1


@pytest.mark.slow
def test_default_model_is_trained_not_random(bundled_lm):
    """Bits per byte on held-out stories it never saw: a random model scores about 8."""
    stories = read_stories(EVAL)
    assert len(stories) == 40
    assert bits_per_byte(bundled_lm.model, bundled_lm.tokenizer, stories)["bits_per_byte"] < 1.1


def test_the_draft_model_is_much_smaller_shares_the_tokenizer_and_is_trained():
    draft, target = load_model("tinystories-draft"), load_model("default")
    assert draft.spec.parameters * 4 < target.spec.parameters
    assert draft.tokenizer.get_vocab() == target.tokenizer.get_vocab()
    assert bits_per_byte(draft.model, draft.tokenizer, read_stories(EVAL))["bits_per_byte"] < 1.2


@pytest.fixture(scope="module")
def bundled():
    """bundled(name): that bundled model, loaded by the engine on the CPU once for this module."""
    loaded = {}

    def load(name: str):
        if name not in loaded:
            loaded[name] = load_model(name, device="cpu")
        return loaded[name]

    return load


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", ["tinystories-llama", "tinystories-gpt2", "tinystories-draft"])
def test_bundled_models_give_transformers_own_tokens_and_logits(bundled, name, use_cache):
    """Trained weights, where a small error in attention moves logits most: at the prefill and every decode step,
    the engine's token and logits are those of transformers' own copy of the model (tests/reference.py)."""
    lm = bundled(name)
    s = Stepper(lm, PROMPTS[0]["prompt"], use_cache=use_cache, max_new_tokens=12, stop_on_eos=False, record=False)
    mine = []
    s.run(on_step=lambda trace: mine.append(s.last_logits))
    theirs = reference.greedy(MODELS_DIR / name, s.ids[:, :s.prompt_len], 12, use_cache)
    assert s.generated_ids == theirs.tokens
    for step, (a, b) in enumerate(zip(mine, theirs.logits, strict=True)):
        reference.assert_logits_close(a, b, f"{name}, step {step}, cache {'on' if use_cache else 'off'}")
