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
