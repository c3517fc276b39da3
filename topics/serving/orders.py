"""Every order, not one: the engine steps static and continuous batching take over random orders of the same requests.

The queue scenario ships one order of its requests (every group of four is one long request and three short ones),
the one most favourable to continuous batching. Here the same requests, (prompt, max new tokens) pairs, are dealt
into the same arrival steps in `n` random orders (a seeded numpy Generator: the same orders every run), and each
order is scheduled both ways by the real scheduler (scheduler.py, blocks.py), counting its engine steps.

No model runs: with end-of-text an ordinary token (`stop_on_eos=False`) every request makes exactly its max new
tokens, so what the scheduler decides depends on the lengths, the arrivals and the prompts' prefixes only, never on
which token was chosen. `schedule_steps` feeds a fixed token in place of the pass (tests/test_serving_orders.py
holds it to the real run's step count); one order takes a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.generate.serving.requests import RequestSpec
from engine.generate.serving.run import ServingRun

SEED = 0
ORDERS = 200


class _ScheduleOnly(ServingRun):
    """A ServingRun whose pass chooses a fixed token for every emitting request: its steps are the scheduler's."""

    def forward(self, plan):
        if not plan.rows:
            return None, {}
        return 0.0, {s.request.id: self.filler for s in plan.rows if s.emits}


def schedule_steps(lm, requests: list[RequestSpec], sizing: dict, batching: str) -> int:
    """Engine steps to serve every request to its max new tokens, scheduled by the real scheduler, no pass run."""
    run = _ScheduleOnly(lm, requests, stop_on_eos=False, record=False, **{**sizing, "batching": batching})
    run.filler = 0 if lm.tokenizer.eos_token_id != 0 else 1
    while not run.done:
        run.step()
    return run.step_index


def shuffled(requests: list[RequestSpec], order) -> list[RequestSpec]:
    """The same (prompt, max new tokens) pairs dealt into the same arrival steps in another order."""
    return [RequestSpec(requests[i].prompt, requests[i].max_new_tokens, slot.arrive) for i, slot in zip(order, requests)]


@dataclass(frozen=True)
class OrderSpread:
    """static/continuous engine steps of the same requests in `orders` random orders, and in the shipped one."""

    orders: int
    seed: int
    ratios: tuple[float, ...]  # static steps / continuous steps, one per random order
    shipped: float  # the same ratio for the order the scenario ships
    shipped_steps: tuple[int, int]  # (continuous, static) engine steps in the shipped order

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.ratios, q))

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def p10(self) -> float:
        return self.quantile(0.1)

    @property
    def p90(self) -> float:
        return self.quantile(0.9)

    @property
    def at_or_above_shipped(self) -> float:
        """The share of random orders at least as favourable to continuous batching as the shipped one."""
        return sum(r >= self.shipped for r in self.ratios) / len(self.ratios)

    @property
    def shipped_is_most_favourable(self) -> bool:
        return self.shipped >= max(self.ratios)

    def to_dict(self) -> dict:
        return {"orders": self.orders, "seed": self.seed, "median": self.median, "p10": self.p10, "p90": self.p90,
                "shipped": self.shipped, "shipped_steps": list(self.shipped_steps),
                "at_or_above_shipped": self.at_or_above_shipped, "ratios": list(self.ratios)}


def order_spread(lm, requests: list[RequestSpec], sizing: dict, orders: int = ORDERS, seed: int = SEED) -> OrderSpread:
    """The shipped order and `orders` random ones, each scheduled with continuous and with static batching."""
    def ratio(specs) -> tuple[float, int, int]:
        cont = schedule_steps(lm, specs, sizing, "continuous")
        stat = schedule_steps(lm, specs, sizing, "static")
        return stat / cont, cont, stat

    shipped, cont, stat = ratio(requests)
    rng = np.random.default_rng(seed)
    ratios = tuple(ratio(shuffled(requests, rng.permutation(len(requests))))[0] for _ in range(orders))
    return OrderSpread(orders=orders, seed=seed, ratios=ratios, shipped=shipped, shipped_steps=(cont, stat))
