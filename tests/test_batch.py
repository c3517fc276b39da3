"""Batches of prompts with left padding: each row must behave exactly as if it ran alone."""

from __future__ import annotations

import pytest

from engine import StepError, Stepper, load_model
from engine.generate.batch import left_pad, run_batch, same_as_alone

PROMPTS = ["Tom had a red ball.", "One day, a little girl named Lily went to the park with her dog."]


def test_left_pad_puts_padding_first_and_masks_it():
    ids, mask = left_pad([[5, 6], [1, 2, 3, 4]], pad_id=0)
    assert ids.tolist() == [[0, 0, 5, 6], [1, 2, 3, 4]]
    assert mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]


@pytest.mark.parametrize("name", ["tinystories-llama", "tinystories-gpt2"])  # RoPE and learned positions
def test_each_row_of_a_padded_batch_matches_its_solo_run(name):
    lm = load_model(name)
    run = run_batch(lm, PROMPTS, new_tokens=9, stop_on_eos=False)
    assert run.pad_counts[0] > 0 and run.pad_counts[1] == 0  # the shorter prompt was padded
    assert run.max_attention_on_padding() == 0.0  # no real token ever looks at padding
    assert all(len(tokens) == 9 for tokens in run.generated)
    for prompt, tokens in zip(PROMPTS, run.generated):
        solo = Stepper(lm, prompt, max_new_tokens=9, stop_on_eos=False)
        solo.run()
        assert list(tokens) == solo.generated_ids
    assert same_as_alone(lm, run) == [True, True]
    shapes = dict(run.shapes)
    assert shapes["decode input_ids"] == (2, 1)
    assert shapes["prefill input_ids"] == tuple(run.input_ids.shape)


def test_a_batch_needs_two_prompts(bundled_lm):
    with pytest.raises(StepError, match="2 to"):
        run_batch(bundled_lm, ["only one"])


@pytest.mark.parametrize("prompts, rule, reasons", [
    (["The end.", "Once upon a time"], {}, ("eos", "max_new_tokens")),  # this prompt's next token is end-of-text
    (PROMPTS, {"stop_strings": (".",)}, ("stop_string", "stop_string")),
])
def test_each_row_stops_by_the_loops_stop_rule_like_a_stepper(bundled_lm, prompts, rule, reasons):
    """A row stops at end-of-text or a stop string exactly where the Stepper stops alone, with the same reason;
    the batch goes on until every row has stopped."""
    run = run_batch(bundled_lm, prompts, new_tokens=12, **rule)
    assert run.stop_reasons == reasons
    for prompt, tokens, reason in zip(prompts, run.generated, run.stop_reasons):
        alone = Stepper(bundled_lm, prompt, max_new_tokens=12, record=False, **rule)
        alone.run()
        assert list(tokens) == alone.generated_ids and reason == alone.stop_reason
    assert same_as_alone(bundled_lm, run) == [True, True]
    assert len({len(tokens) for tokens in run.generated}) == 2  # one row stopped before the other
