"""Sampling's claim: a sampled token is drawn from softmax(logits / T), cut to the k most likely tokens or to the
fewest whose mass reaches top_p, renormalised. The rule is written out by hand here, on fixed logits, and the
engine's own chooser (the one every Stepper, Speculator and serving request draws with) is held to it: the
distribution it reports, and the tokens it draws, by frequency."""

from __future__ import annotations

import pytest
import torch

from engine.forward.sampling import Chooser, Sampling
from tests.frequency import assert_drawn_from

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 0.2, -2.0])  # [vocab = 8]
CONTEXT = torch.tensor([[0]])  # the ids so far: only a repetition penalty would read them
DRAWS = 2_000
CASES = {  # each leaves three tokens, far from any boundary: with top-p 0.6 the top two hold 0.53, the top three 0.66
    "temperature 0.5, top-k 3": Sampling(greedy=False, temperature=0.5, top_k=3, seed=1),
    "temperature 1.5, top-p 0.6": Sampling(greedy=False, temperature=1.5, top_p=0.6, seed=2),
}


def by_hand(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """softmax(logits / T); keep the top_k most likely; then the most likely until their mass reaches top_p."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = probs.argsort(descending=True).tolist()
    if top_k:
        probs[order[top_k:]] = 0.0
        probs /= probs.sum()
    mass = 0.0
    for i in order:
        if mass >= top_p:
            probs[i] = 0.0
        mass += float(probs[i])
    return probs / probs.sum()


@pytest.mark.parametrize("case", list(CASES))
def test_a_sampled_token_is_drawn_from_the_rule_written_by_hand(case):
    sampling = CASES[case]
    want = by_hand(LOGITS, sampling.temperature, sampling.top_k, sampling.top_p)
    kept = want > 0
    assert int(kept.sum()) == 3

    chooser = Chooser(sampling)
    torch.testing.assert_close(chooser.distribution(CONTEXT, LOGITS), want, rtol=0, atol=1e-6)
    first = chooser.choose(CONTEXT, LOGITS)
    torch.testing.assert_close(first.probs_after.double(), want, rtol=0, atol=1e-6)  # what a step's trace shows
    counts = torch.bincount(torch.tensor([chooser.choose(CONTEXT, LOGITS).token_id for _ in range(DRAWS)]),
                            minlength=LOGITS.numel())
    assert int(counts[~kept].sum()) == 0, f"{case}: drew a token the rule cuts"
    assert_drawn_from(counts[kept], want[kept], case)


# ---------------------------------------------------------------- the repetition penalty

# Three tokens, so every outcome is counted (2 degrees of freedom): token 0 seen with a positive logit, token 1 seen
# with a negative one (each twice: a penalty applies once per token, however often it came), token 2 never seen.
PENALTY_LOGITS = torch.tensor([2.0, -1.0, 1.0])
SEEN = torch.tensor([[0, 1, 1, 0]])


def penalised_by_hand(logits: torch.Tensor, seen: list[int], penalty: float) -> torch.Tensor:
    """CTRL's rule (Keskar et al. 2019), as transformers applies it: a token already in the sequence has a positive
    logit divided by the penalty and a negative one multiplied by it (both push it down); any other is untouched."""
    out = logits.clone().double()
    for token in set(seen):
        out[token] = out[token] / penalty if out[token] > 0 else out[token] * penalty
    return out


def test_the_repetition_penalty_is_transformers_own_processor_on_the_ids_given():
    """The chooser's distribution is softmax of what transformers' RepetitionPenaltyLogitsProcessor makes of the same
    ids and logits, and of the rule written by hand; the penalty pushes the seen tokens down and leaves the rest."""
    from transformers import RepetitionPenaltyLogitsProcessor

    for penalty in (1.3, 2.0, 0.7):  # below 1 it favours the seen tokens instead: the same rule, the other way
        chooser = Chooser(Sampling(greedy=False, repetition_penalty=penalty, seed=3))
        theirs = RepetitionPenaltyLogitsProcessor(penalty)(SEEN, PENALTY_LOGITS[None, :].clone())[0]
        want = torch.softmax(penalised_by_hand(PENALTY_LOGITS, SEEN[0].tolist(), penalty), dim=-1)
        torch.testing.assert_close(theirs.double(), penalised_by_hand(PENALTY_LOGITS, SEEN[0].tolist(), penalty))
        torch.testing.assert_close(chooser.distribution(SEEN, PENALTY_LOGITS), want, rtol=0, atol=1e-6)
        torch.testing.assert_close(chooser.choose(SEEN, PENALTY_LOGITS).probs_after.double(), want, rtol=0, atol=1e-6)
    greedy = Chooser(Sampling(greedy=True, repetition_penalty=2.0))  # 2.0 / 2 = 1.0 falls below the unseen 1.5
    assert greedy.choose(torch.tensor([[0]]), torch.tensor([2.0, 1.5, -1.0])).token_id == 1
    assert greedy.choose(torch.tensor([[2]]), torch.tensor([2.0, 1.5, -1.0])).token_id == 0


def test_a_token_drawn_under_a_repetition_penalty_follows_the_rule_written_by_hand_by_frequency():
    penalty = 2.0
    want = torch.softmax(penalised_by_hand(PENALTY_LOGITS, SEEN[0].tolist(), penalty), dim=-1)
    plain = torch.softmax(PENALTY_LOGITS.double(), dim=-1)
    assert want[0] < plain[0] and want[1] < plain[1] and want[2] > plain[2]  # the seen lose, the unseen gains
    chooser = Chooser(Sampling(greedy=False, repetition_penalty=penalty, seed=4))
    counts = torch.bincount(torch.tensor([chooser.choose(SEEN, PENALTY_LOGITS).token_id for _ in range(DRAWS)]),
                            minlength=3)
    assert_drawn_from(counts, want, f"repetition penalty {penalty}")


def test_a_penalised_greedy_run_reads_every_id_so_far_as_transformers_generate_does(bundled_lm, bundled_dir):
    """The loop hands the penalty the prompt and every generated id (not only the fed rows), so a greedy run with a
    penalty chooses what transformers' generate chooses with the same penalty, on its own copy of the model."""
    from engine import Stepper
    from tests import reference

    prompt = "Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom"
    penalised = Stepper(bundled_lm, prompt, sampling=Sampling(repetition_penalty=1.3), max_new_tokens=12,
                        stop_on_eos=False, record=False)
    penalised.run()
    plain = Stepper(bundled_lm, prompt, max_new_tokens=12, stop_on_eos=False, record=False)
    plain.run()
    assert penalised.generated_ids != plain.generated_ids  # the penalty changed the story: the check can tell
    theirs = reference.greedy(bundled_dir / "tinystories-llama", penalised.ids[:, :penalised.prompt_len], 12,
                              repetition_penalty=1.3)
    assert penalised.generated_ids == theirs.tokens


def test_temperature_0_says_it_is_greedy_and_which_warpers_it_leaves_unapplied():
    """Sample mode at temperature 0 with top-k 1 and top-p 0.01 set: the warpers were silently ignored. The rule
    says greedy, at temperature 0, with top-k and top-p not applied; and the next-token chart no longer calls
    a greedy step's bars 'drawn from'."""
    from types import SimpleNamespace

    from drawing.tokens import next_token_figure
    from engine.forward.sampling import Sampling

    rule = Sampling(greedy=False, temperature=0.0, top_k=1, top_p=0.01).describe()
    assert rule == "greedy: the most likely token (temperature 0; top-k and top-p not applied)"
    assert Sampling(greedy=False, temperature=0.0).describe() == "greedy: the most likely token (temperature 0)"
    top = [SimpleNamespace(token=" a", token_id=1, p_before=0.6, p_after=0.6, logit=2.0)]
    for r, name in ((rule, "after warpers: green taken (the largest), grey not"),
                    (Sampling(greedy=False, temperature=0.8).describe(),
                     "after warpers, drawn from: green drawn, grey not")):
        fig = next_token_figure(SimpleNamespace(top=top, token=" a", token_id=1, rule=r))
        assert fig.data[1].name == name
