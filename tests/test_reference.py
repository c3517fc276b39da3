"""The reference the engine is checked against (tests/reference.py) is transformers' own, apart from the engine."""

from __future__ import annotations

import pytest
import torch

from engine.forward import capture
from engine.generate.stepper import Stepper
from engine.transformers_internals import attn_implementation
from tests import reference

PROMPT = "Once upon a time there was a cat"


def test_the_reference_is_a_separate_model_with_transformers_own_attention(family_model, family_dirs):
    lm = family_model("llama")
    theirs = reference.model(family_dirs["llama"])
    assert theirs is not lm.model
    assert attn_implementation(lm.model.config) == capture.IMPLEMENTATION  # the engine's copy: recorded attention
    assert attn_implementation(theirs.config) == "eager"
    reference.assert_independent(theirs)  # "eager" is the modeling file's own function, no hook, nothing recorded
    for a, b in zip(lm.model.parameters(), theirs.parameters(), strict=True):  # the same weights, not shared
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()


def test_an_error_in_the_engines_attention_moves_the_engines_logits_not_the_references(family_model, family_dirs,
                                                                                        monkeypatch):
    """What the reference is for: a 1% error in the attention temperature on the engine's side only."""
    lm = family_model("llama")
    prompt_ids = Stepper(lm, PROMPT).ids
    before = reference.greedy(family_dirs["llama"], prompt_ids, 2).logits

    own = capture._eager
    monkeypatch.setattr(capture, "_eager", lambda module: lambda m, q, *a, **kw: own(module)(m, q * 1.01, *a, **kw))
    s = Stepper(lm, PROMPT, max_new_tokens=2, record=False)
    s.prefill()
    after = reference.greedy(family_dirs["llama"], prompt_ids, 2).logits

    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
    with pytest.raises(AssertionError, match="logits differ"):
        reference.assert_logits_close(s.last_logits, before[0])
