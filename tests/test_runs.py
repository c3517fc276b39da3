"""One interface for every run that steps: the Stepper, the Speculator and a ServingRun each have `records`,
`step()`, `done`, `run(n)` and `free()`, and the loop that drives them is written once (engine.generate.loop.Run).
A serving request holds a Sequence of that loop; it is not a run itself."""

from __future__ import annotations

import pytest

from engine.generate.drafters import PromptLookup
from engine.generate.loop import Run, Sequence
from engine.generate.serving import RequestSpec, ServingRun
from engine.generate.serving.requests import Request
from engine.generate.speculative import Speculator
from engine.generate.stepper import Stepper

PROMPT = "Once upon a time"
KINDS = ("stepper", "speculator", "serving run")
OLD_NAMES = ("traces", "rounds", "steps")  # the one list once had four names: records is the only one


def make(kind: str, lm):
    if kind == "stepper":
        return Stepper(lm, PROMPT, max_new_tokens=12, stop_on_eos=False, record=False, repeats=1)
    if kind == "speculator":
        return Speculator(lm, PROMPT, PromptLookup(2), k=2, max_new_tokens=12, stop_on_eos=False, record=False,
                          repeats=1)
    return ServingRun(lm, [RequestSpec(PROMPT, 12, 0), RequestSpec("Tom had a red ball.", 6, 2)], stop_on_eos=False)


@pytest.mark.parametrize("kind", KINDS)
def test_every_run_that_steps_has_records_step_done_run_and_free(bundled_lm, kind):
    run = make(kind, bundled_lm)
    assert isinstance(run, Run) and type(run).run is Run.run  # the loop is Run's: nobody writes another
    assert run.records == [] and not run.done
    first = run.step()
    assert run.records == [first] and not any(hasattr(run, name) for name in OLD_NAMES)
    taken = run.run(3)
    assert len(taken) == 3 and len(run.records) == 4  # run(n) takes exactly n steps...
    assert all(a is b for a, b in zip(taken, run.records[1:]))  # ...and returns their records
    rest = run.run()
    assert run.done and rest and len(run.records) == 4 + len(rest)
    assert run.run() == [] and run.run(5) == []  # a finished run takes no step
    run.free()
    assert run.records == []


def test_run_calls_on_step_with_each_record(bundled_lm):
    run, seen = make("stepper", bundled_lm), []
    assert run.run(2, on_step=seen.append) == seen and len(seen) == 2


def test_a_request_holds_a_sequence_and_is_not_a_run(bundled_lm):
    r = Request(bundled_lm, 0, RequestSpec(PROMPT, 4, 0))
    assert isinstance(r.seq, Sequence) and not isinstance(r, (Sequence, Run)) and not hasattr(r, "step")
    assert r.tokens is r.seq.tokens  # its ids are kept once, in its sequence
    assert r.ids[0].tolist() == r.tokens and r.prompt_len == len(r.tokens)
    assert isinstance(Stepper(bundled_lm, PROMPT), Sequence)  # a Stepper is one sequence that steps


def test_a_sequence_chooses_with_its_chooser_and_stops_by_its_rule(bundled_lm):
    import torch

    seq = Sequence(bundled_lm, PROMPT, max_new_tokens=3)
    logits = torch.zeros(bundled_lm.spec.vocab)
    logits[42] = 1.0
    assert seq.choose(logits, probs=False).token_id == 42  # greedy: the most likely token
    assert not seq.append(42) and seq.stop_reason is None
    assert seq.append(bundled_lm.tokenizer.eos_token_id) and seq.stop_reason == "eos"
    assert seq.generated_ids == [42, bundled_lm.tokenizer.eos_token_id]
    assert seq.tokens[: seq.prompt_len] == bundled_lm.tokenizer(PROMPT)["input_ids"]
