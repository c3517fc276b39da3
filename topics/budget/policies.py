"""The policies by name, the checks that refuse what cannot run, and the budgeted cache the Stepper runs with.

One knob for every policy, the budget B, in positions:

    full                   the reference: every position in the model's dtype (transformers' DynamicCache)
    fp8 · int8 · int4      the newest B positions in full precision, every older one quantized (quant.py)
    window · sinks ·       at most B positions held between passes; which ones is the policy's rule (evict.py)
    heavy · heavy-avg ·
    snap-capped
    snap                   SnapKV as published: the prompt cut to B positions once, every decoded one kept

So with B at least the sequence's length every policy is the full cache, token for token; below it, the
quantized ones round the older positions and the evicting ones drop them.

    stepper = Stepper(lm, prompt, make_cache=budget_cache(lm, "heavy", 64))   # the one generation loop
"""

from __future__ import annotations

from transformers import Cache

from engine.errors import StepError
from engine.forward.cache import new_cache
from topics.budget.evict import RULES, SINKS, EvictingLayer
from topics.budget.quant import CODECS, QuantizedLayer

POLICIES = {
    "full": "every position in the model's dtype: the reference",
    "fp8": "older positions in fp8 (e4m3, one scale per layer for K and one for V, set on the prompt), the newest B "
           "in full precision",
    "int8": "older positions in int8 (KIVI: keys per channel, values per position), the newest B in full precision",
    "int4": "older positions in int4 (KIVI, two codes a byte), the newest B in full precision",
    "window": "the last B positions",
    "sinks": f"the first {SINKS} positions (attention sinks) and the last B − {SINKS}",
    "heavy": "the last B/2 positions and the B/2 of the rest with the most attention summed over every query so "
             "far (H2O's heavy hitters, its plain sum)",
    "heavy-avg": "the last B/2 positions and the B/2 of the rest with the most attention per query that could see "
                 "them (H2O's rule with kvpress's averaged score)",
    "snap": "B of the prompt's positions, the ones its last queries attend to most (SnapKV as published: the prompt "
            "compressed once), then every decoded position too: it holds B plus the new ones",
    "snap-capped": "SnapKV's B prompt positions, then at most B held: each decoded position pushes out a prompt one, "
                   "so after B decode steps it holds the last B (a window)",
}
QUANTIZED = ("fp8", "int8", "int4")
EVICTING = ("window", "sinks", "heavy", "heavy-avg", "snap", "snap-capped")
CAPPED = tuple(p for p in EVICTING if p != "snap")  # the evicting policies that hold at most B positions


class BudgetCache(Cache):
    """A transformers Cache whose layers keep a budget; after each layer attends, `observe` lets it evict or round.

    `repeatable` is False: what a pass dropped or rounded cannot be restored, so the Stepper runs each pass once
    (engine/generate/stepper.py), never rolling it back to time it again.
    """

    repeatable = False

    def __init__(self, policy: str, budget: int, layers: int):
        if policy in QUANTIZED:
            made = [QuantizedLayer(policy, budget) for _ in range(layers)]
        else:
            made = [EvictingLayer(policy, budget) for _ in range(layers)]
        super().__init__(layers=made)
        self.policy, self.budget = policy, budget

    def observe(self, layer: int, weights) -> None:
        """Called by the attention of `layer` (engine/forward/capture.py) with its weights [batch, head, q, key]."""
        self.layers[layer].observe(weights)

    def nbytes(self) -> int:
        """K and V bytes held over every layer, measured from the tensors."""
        return sum(layer.nbytes() for layer in self.layers)


def check(lm, policy, budget) -> tuple[str, int | None]:
    """(policy, budget) if this model can run them, else a StepError that says why in plain words."""
    policy, budget = check_words(policy, budget)
    limit = lm.spec.max_positions
    if budget is not None and limit and budget > limit:
        raise StepError(f"A budget of {budget:,} positions is over this model's context window ({limit:,} "
                        "positions): it could never be reached. Choose at most that.")
    if policy != "full":
        supported(lm, policy)
    return policy, budget


def check_words(policy, budget) -> tuple[str, int | None]:
    """What can be refused before a model is loaded: the policy's name, and a budget no model could take."""
    if not isinstance(policy, str) or policy.strip().lower() not in POLICIES:
        raise StepError(f"Unknown policy {policy!r}: choose one of {', '.join(POLICIES)}.")
    policy = policy.strip().lower()
    if budget is None:
        if policy != "full":
            raise StepError(f"The {policy} policy needs a budget: how many positions it keeps (in full precision).")
        return policy, None
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise StepError(f"The budget is a whole number of positions (got {budget!r}).")
    if budget < 1:
        raise StepError(f"The budget must be at least 1 position (got {budget}): a cache that keeps nothing "
                        "cannot be read by the next position.")
    if policy == "sinks" and budget <= SINKS:
        raise StepError(f"sinks keeps the first {SINKS} positions and needs room for at least one recent one: "
                        f"a budget of at least {SINKS + 1} (got {budget}).")
    return policy, budget


def supported(lm, policy: str) -> None:
    """Refuse a model whose attention a budgeted cache cannot sit under, saying why."""
    s = lm.spec
    if s.sliding_layers:
        raise StepError(f"{s.name} has sliding-window layers ({s.layer_pattern()}): they already drop positions "
                        f"on their own, so a {policy} budget cannot be laid over them (transformers' QuantizedCache "
                        "refuses them too). Choose a model whose layers all attend to every position.")
    if s.mla_dim:
        raise StepError(f"{s.name} caches a compressed latent (MLA), not keys and values per head: the {policy} "
                        "policy has no rows to round or drop. Choose a model with MHA, GQA or MQA.")
    if not lm.captures:
        raise StepError(f"{s.name}'s attention does not run through Decode Lab's recorder, so the cache is never "
                        f"told when a layer has attended: the {policy} policy cannot round or evict after it. "
                        "Choose a bundled model, GPT-2 or a Llama-family model.")


def budget_cache(lm, policy: str, budget: int | None):
    """A `make_cache` for the Stepper: config -> an empty cache under this policy (checked here, first)."""
    policy, budget = check(lm, policy, budget)
    if policy == "full":
        return new_cache
    layers = lm.spec.layers
    return lambda config: BudgetCache(policy, budget, layers)


assert set(QUANTIZED) == set(CODECS) and set(EVICTING) == set(RULES)
assert set(POLICIES) == {"full", *QUANTIZED, *EVICTING}
