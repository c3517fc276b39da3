"""Choosing the next token, with transformers' own LogitsProcessors.

The processors are the ones `model.generate` uses, so what the student sees is
what generate would do. Sampling draws on the CPU from a seeded generator: the
same seed gives the same tokens on any device and with the cache on or off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.errors import StepError


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen. `greedy=True` takes the most likely token."""

    greedy: bool = True
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    repetition_penalty: float = 1.0  # 1.0 = off
    seed: int = 0

    def validate(self, vocab: int) -> None:
        """Raise StepError with a plain message for any setting that cannot work."""
        checks = [
            (_finite(self.temperature) and self.temperature >= 0, f"temperature must be a number >= 0 (got {self.temperature})"),
            (isinstance(self.top_k, int) and self.top_k >= 0, f"top-k must be a whole number >= 0, 0 = off (got {self.top_k})"),
            (self.top_k <= vocab, f"top-k {self.top_k} is larger than the vocabulary ({vocab} tokens)"),
            (_finite(self.top_p) and 0 < self.top_p <= 1, f"top-p must be in (0, 1], 1 = off (got {self.top_p})"),
            (_finite(self.repetition_penalty) and self.repetition_penalty > 0,
             f"repetition penalty must be > 0, 1 = off (got {self.repetition_penalty})"),
            (isinstance(self.seed, int) and 0 <= self.seed < 2**63, f"seed must be a whole number >= 0 (got {self.seed!r})"),
        ]
        for ok, message in checks:
            if not ok:
                raise StepError(message)

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0

    def processors(self) -> LogitsProcessorList:
        """The same processors generate() would build for these settings, in its order."""
        procs = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        if self.is_greedy:
            return procs
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k:
            procs.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(self.top_p))
        return procs

    def describe(self) -> str:
        if self.is_greedy:
            unused = [w for w, on in (("top-k", self.top_k), ("top-p", self.top_p < 1.0)) if on]
            rule = "greedy: the most likely token" + (
                "" if self.greedy else " (temperature 0" + (f"; {' and '.join(unused)} not applied" if unused else "")
                + ")")
        else:
            parts = [f"temperature {self.temperature:g}"]
            if self.top_k:
                parts.append(f"top-k {self.top_k}")
            if self.top_p < 1.0:
                parts.append(f"top-p {self.top_p:g}")
            rule = "sampled (" + ", ".join(parts) + f"), seed {self.seed}"
        if self.repetition_penalty != 1.0:
            rule += f"; repetition penalty {self.repetition_penalty:g}"
        return rule


@dataclass(frozen=True)
class Choice:
    """The outcome of one sampling step."""

    token_id: int
    logits: torch.Tensor  # [vocab] the raw logits of the last position, float32 on the CPU
    probs_before: torch.Tensor | None  # [vocab] softmax of the raw logits (None when not asked for)
    probs_after: torch.Tensor | None  # [vocab] softmax after the processors (what was drawn from)


class Chooser:
    """One run's way of choosing: the Sampling settings, their LogitsProcessors and one seeded CPU generator.

    The Stepper, the Speculator (drafter and judge) and every serving request each own one, so the
    same seed gives the same tokens however the run is stepped.
    """

    def __init__(self, sampling: Sampling):
        self.sampling = sampling
        self.processors = sampling.processors()
        self.generator = torch.Generator().manual_seed(sampling.seed)

    def choose(self, input_ids: torch.Tensor, logits: torch.Tensor, probs: bool = True) -> Choice:
        """Pick the next token from one row of logits [vocab], given the ids so far [batch=1, pos].

        probs=False (an unrecorded greedy step, in benchmarks) skips the two softmaxes nobody will look at.
        """
        raw = logits.detach().float().cpu()[None, :]  # [1, vocab]
        scores = self.processors(input_ids, raw.clone()) if self.processors else raw
        if self.sampling.is_greedy and not probs:
            return Choice(token_id=int(torch.argmax(scores[0])), logits=raw[0], probs_before=None, probs_after=None)
        before = torch.softmax(raw[0], dim=-1)
        after = torch.softmax(scores[0], dim=-1)
        if self.sampling.is_greedy:
            token = int(torch.argmax(scores[0]))
        else:
            token = int(torch.multinomial(after, 1, generator=self.generator))
        return Choice(token_id=token, logits=raw[0], probs_before=before, probs_after=after)

    def distribution(self, context_ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """What `choose` would draw from after `context_ids` [batch=1, pos], as float64 [vocab].

        Greedy: one-hot at the argmax of the processed scores (the same rule). Sampling: the softmax
        of the scores after the processors (repetition penalty, temperature, top-k, top-p), as generate does.
        """
        scores = self.processors(context_ids.cpu(), logits.detach().float().cpu()[None, :].clone())[0]
        if self.sampling.is_greedy:
            return one_hot(int(torch.argmax(scores)), scores.numel())
        return torch.softmax(scores.double(), dim=-1)

    def draw(self, probs: torch.Tensor) -> int:
        """A token from probs [vocab]; a one-hot distribution is read, not drawn (greedy never uses the generator)."""
        top = int(torch.argmax(probs))
        if float(probs[top]) >= 1.0:
            return top
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def coin(self, chance: float) -> bool:
        """True with probability `chance`; no draw when it is 0 or 1."""
        if chance >= 1.0:
            return True
        if chance <= 0.0:
            return False
        return bool(torch.rand((), dtype=torch.float64, generator=self.generator) < chance)


def one_hot(token_id: int, vocab: int) -> torch.Tensor:
    out = torch.zeros(vocab, dtype=torch.float64)
    out[token_id] = 1.0
    return out


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
