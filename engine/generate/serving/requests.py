"""A serving request: one sequence of the generation loop, held, plus where it stands in the server.

Its tokens, its stop rule and its way of choosing are its Sequence's (engine/generate/loop.py), so a
request decoded among many gives the tokens it would give alone. What serving adds:

    status       not arrived · waiting (arrived, not in the pool) · running · preempted (back in the queue,
                 its keys and values dropped, to be recomputed) · done
    computed     positions whose keys and values are in the pool: a running request feeds
                 len(tokens) - computed tokens next (1 while it decodes, a chunk of its prompt while it prefills)
    table        its block table: the ids of the pool blocks that hold those positions
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch

from engine.forward.sampling import Sampling
from engine.generate.loop import Sequence
from engine.load.loaded import LoadedModel


class Status(StrEnum):
    """Where a request stands; the values are what records, JSON and pictures show."""

    NOT_ARRIVED = "not arrived"
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    DONE = "done"


@dataclass(frozen=True)
class RequestSpec:
    """What a client sends: a prompt, how many tokens at most, and the engine step it arrives at."""

    prompt: str
    max_new_tokens: int = 32
    arrive: int = 0


def _from_seq(name: str) -> property:
    """A read-only attribute of the request that is its sequence's (the tokens are kept once, there)."""
    return property(lambda self: getattr(self.seq, name), doc=f"The request's sequence's `{name}`.")


class Request:
    """One request on the server; `id` is its name on every picture ("r0", "r1", ...)."""

    def __init__(self, lm: LoadedModel, index: int, spec: RequestSpec, sampling: Sampling | None = None,
                 stop_on_eos: bool = True):
        self.seq = Sequence(lm, spec.prompt, sampling=sampling, max_new_tokens=spec.max_new_tokens,
                            stop_on_eos=stop_on_eos)
        self.index = index
        self.id = f"r{index}"
        self.arrive = spec.arrive
        self.status = Status.NOT_ARRIVED
        self.computed = 0
        self.table: list[int] = []
        self.first_token_step: int | None = None
        self.token_steps: list[int] = []  # the engine step that chose each of its tokens, in order
        self.finish_step: int | None = None
        self.preemptions = 0
        self.prefix_hit_tokens = 0  # prompt positions not computed on admission: their blocks were held or cached
        self.recomputed_tokens = 0  # positions computed a second time after a preemption
        self.reached = 0  # the most positions it has had computed: feeding one below it again is recomputing
        self.chunks = 0  # prefill passes it took part in (more than one: its prompt was chunked)

    # what its sequence knows, read through it: the token ids are kept once, there
    tokens = _from_seq("tokens")  # prompt + generated, a list: fed from, hashed into block prefixes
    ids = _from_seq("ids")  # the same as a tensor [batch=1, pos]
    prompt = _from_seq("prompt")
    prompt_len = _from_seq("prompt_len")
    max_new_tokens = _from_seq("max_new_tokens")
    generated_ids = _from_seq("generated_ids")
    generated_text = _from_seq("generated_text")
    stop_reason = _from_seq("stop_reason")

    @property
    def need(self) -> int:
        """Tokens to feed before its next token can be chosen."""
        return len(self.tokens) - self.computed

    @property
    def decoding(self) -> bool:
        """Everything but the newest token is in the pool: the next pass feeds that one token."""
        return self.status == Status.RUNNING and self.first_token_step is not None and self.need == 1

    def choose(self, logits: torch.Tensor) -> int:
        """Its next token from its row of the pass's logits [vocab], by its sequence's chooser."""
        return self.seq.choose(logits, probs=False).token_id

    def take(self, token_id: int, step: int) -> None:
        """The token its last pass chose: appended through the loop's stop rule."""
        self.seq.append(token_id)
        self.token_steps.append(step)
        if self.first_token_step is None:
            self.first_token_step = step
        if self.seq.done:
            self.status, self.finish_step = Status.DONE, step
