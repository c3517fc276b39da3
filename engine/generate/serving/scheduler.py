"""The scheduler: which requests share the next forward pass, and how many tokens each feeds.

Every engine step fills ONE forward pass under a token budget (max_batch_tokens):

  chunked prefill on (vLLM v1, Sarathi):
    1. every running request, in the order it was admitted: a decoding one feeds 1 token, a prefilling
       one the next chunk of its prompt (as much as the budget has left);
    2. then waiting requests (preempted ones first), while budget and blocks last: their prompt, chunked.
    Decodes never skip a step: a long prompt is spread over several passes.
  chunked prefill off (the classic scheduler):
    if a waiting prompt fits, the pass prefills whole prompts only and every decode waits a step (the
    decode stall); otherwise the pass decodes every running request.

Before a request feeds tokens, its block table must hold their positions. When the pool has too few
free blocks for a running request, the most recently admitted running request is preempted, as vLLM
does: its blocks are freed and it goes back to the front of the queue, to be recomputed from its ids
(prompt and the tokens it had made) when there is room again. A request new to the pool first takes
every leading full block another request already holds (prefix sharing): those tokens are skipped.

`schedule` returns a Plan a test can read; it changes the requests' tables and statuses, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.generate.serving.blocks import BlockManager
from engine.generate.serving.requests import PREEMPTED, RUNNING, WAITING, Request

PREFILL, DECODE, RECOMPUTE = "prefill", "decode", "recompute"  # what a request's part of a pass is


@dataclass(frozen=True)
class Scheduled:
    """One request's part of the pass: it feeds q_len tokens from position `start`."""

    request: Request
    phase: str  # prefill (a chunk of its prompt), decode (1 token), recompute (its ids again after a preemption)
    start: int
    q_len: int
    emits: bool = False  # after this pass every position is computed: its last fed token's logits choose a token


@dataclass
class Plan:
    rows: list[Scheduled] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)  # ids preempted to make room, in order
    prefix_hits: dict[str, int] = field(default_factory=dict)  # id -> prompt positions taken from shared blocks
    admitted: list[str] = field(default_factory=list)  # ids that entered the pool this step

    @property
    def tokens(self) -> int:
        return sum(r.q_len for r in self.rows)


class Scheduler:
    def __init__(self, blocks: BlockManager, max_batch_tokens: int, chunking: bool = True,
                 prefix_sharing: bool = True):
        self.blocks = blocks
        self.max_batch_tokens = max_batch_tokens
        self.chunking = chunking
        self.prefix_sharing = prefix_sharing
        self.waiting: list[Request] = []  # arrived and not in the pool: preempted ones at the front
        self.running: list[Request] = []  # in the pool, in the order they were admitted

    def schedule(self) -> Plan:
        plan = Plan()
        if self.chunking:
            self._continue_running(plan, self.max_batch_tokens)
            self._admit_waiting(plan, self.max_batch_tokens - plan.tokens)
        else:
            self._admit_waiting(plan, self.max_batch_tokens)  # whole prompts first: decodes wait this step
            if not plan.rows:
                self._continue_running(plan, self.max_batch_tokens)
        return plan

    # ------------------------------------------------------------ the two halves of a pass

    def _continue_running(self, plan: Plan, budget: int) -> None:
        """Running requests, oldest first: each feeds what it needs, as far as the budget goes."""
        for r in list(self.running):
            if r.status != RUNNING or budget <= 0:
                continue
            n = min(r.need, budget)
            if not self._make_room(r, r.computed + n, plan):
                continue  # r itself was preempted
            plan.rows.append(self._scheduled(r, n))
            budget -= n

    def _admit_waiting(self, plan: Plan, budget: int) -> None:
        """Waiting requests, front first, while the budget and the free blocks last."""
        while self.waiting and not plan.preempted:  # after a preemption, nobody new comes in this step
            r = self.waiting[0]
            if self.prefix_sharing and not r.table:
                r.computed = self.blocks.share_prefix(r.table, r.tokens)  # skip what others already hold
            if self.chunking:
                n = min(r.need, budget)
            else:  # a whole prompt; one longer than the budget may only go alone
                n = r.need if r.need <= budget or not plan.rows else 0
            if n <= 0 or not self.blocks.can_grow(r.table, r.computed + n):
                self.blocks.free(r.table)  # let go of any shared blocks: it waits as it was
                r.computed = 0
                return
            self.waiting.pop(0)
            if r.computed:
                plan.prefix_hits[r.id] = r.computed
                if not r.preemptions:
                    r.prefix_hit_tokens += r.computed
            self.blocks.grow(r.table, r.computed + n)
            r.status = RUNNING
            self.running.append(r)
            plan.admitted.append(r.id)
            plan.rows.append(self._scheduled(r, n))
            budget -= n

    # ------------------------------------------------------------ room in the pool

    def _make_room(self, r: Request, positions: int, plan: Plan) -> bool:
        """Grow r's table to `positions`, preempting the newest running requests while blocks are short.
        False if r itself had to go."""
        while not self.blocks.can_grow(r.table, positions):
            victim = self.running[-1]
            self.preempt(victim)
            plan.preempted.append(victim.id)
            if victim is r:
                return False
        self.blocks.grow(r.table, positions)
        return True

    def preempt(self, r: Request) -> None:
        """Free r's blocks and put it at the front of the queue: its keys and values will be recomputed."""
        self.blocks.free(r.table)
        r.recomputed_tokens += r.computed  # keys and values thrown away: computed again when it comes back
        r.computed = 0
        r.status = PREEMPTED
        r.preemptions += 1
        self.running.remove(r)
        self.waiting.insert(0, r)

    def _scheduled(self, r: Request, n: int) -> Scheduled:
        return Scheduled(r, self._phase(r), r.computed, n, emits=r.computed + n == len(r.tokens))

    def _phase(self, r: Request) -> str:
        if r.first_token_step is not None and r.need == 1:
            return DECODE
        return RECOMPUTE if r.preemptions else PREFILL

    def arrive(self, r: Request) -> None:
        r.status = WAITING
        self.waiting.append(r)

    def finished(self, r: Request) -> None:
        self.blocks.free(r.table)
        self.running.remove(r)
