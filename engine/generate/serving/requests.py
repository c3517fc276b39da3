"""A serving request: one sequence of the generation loop, plus where it stands in the server.

Its ids, its stop rule and its way of choosing tokens are the loop's (engine/generate/loop.py), so a
request decoded among many gives the tokens it would give alone. What serving adds:

    status       waiting (arrived, not started) · running · preempted (back in the queue, its keys and
                 values dropped, to be recomputed) · done
    computed     positions whose keys and values are in the pool: a running request feeds
                 len(ids) - computed tokens next (1 while it decodes, a chunk of its prompt while it prefills)
    table        its block table: the ids of the pool blocks that hold those positions
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.forward.sampling import Sampling
from engine.generate.loop import Generation
from engine.load.loaded import LoadedModel

WAITING, RUNNING, PREEMPTED, DONE = "waiting", "running", "preempted", "done"


@dataclass(frozen=True)
class RequestSpec:
    """What a client sends: a prompt, how many tokens at most, and the engine step it arrives at."""

    prompt: str
    max_new_tokens: int = 32
    arrive: int = 0


class Request(Generation):
    """One request on the server; `id` is its name on every picture ("r0", "r1", ...)."""

    def __init__(self, lm: LoadedModel, index: int, spec: RequestSpec, sampling: Sampling | None = None,
                 stop_on_eos: bool = True):
        super().__init__(lm, spec.prompt, sampling=sampling, max_new_tokens=spec.max_new_tokens,
                         stop_on_eos=stop_on_eos, record=False, repeats=1)
        self.index = index
        self.id = f"r{index}"
        self.arrive = spec.arrive
        self.status = WAITING
        self.computed = 0
        self.table: list[int] = []
        self.tokens: list[int] = self.ids[0].tolist()  # the ids as a plain list: hashed into block prefixes
        self.first_token_step: int | None = None
        self.finish_step: int | None = None
        self.preemptions = 0
        self.prefix_hit_tokens = 0  # prompt positions it never computed: their blocks were shared
        self.recomputed_tokens = 0  # positions computed a second time after a preemption
        self.chunks = 0  # prefill passes it took part in (more than one: its prompt was chunked)

    @property
    def need(self) -> int:
        """Tokens to feed before its next token can be chosen."""
        return len(self.tokens) - self.computed

    @property
    def decoding(self) -> bool:
        """Everything but the newest token is in the pool: the next pass feeds that one token."""
        return self.status == RUNNING and self.first_token_step is not None and self.need == 1

    def take(self, token_id: int, step: int) -> None:
        """The token its last pass chose: appended through the loop's stop rule."""
        self.append(token_id)
        self.tokens.append(token_id)
        if self.first_token_step is None:
            self.first_token_step = step
        if self.done:
            self.status, self.finish_step = DONE, step
