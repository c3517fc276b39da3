"""The scheduler: which requests share the next forward pass, how many tokens each feeds, and what follows it.

Every engine step fills ONE forward pass under a token budget (max_batch_tokens):

  0. arrivals: requests whose arrival step has come join the back of the waiting queue
  chunked prefill on (vLLM v1, Sarathi):
    1. every running request, in the order it was admitted: a decoding one feeds 1 token, a prefilling
       one the next chunk of its prompt (as much as the budget has left);
    2. then waiting requests (preempted ones first), while budget and blocks last: their prompt, chunked.
    Decodes never skip a step: a long prompt is spread over several passes.
  chunked prefill off (the classic scheduler):
    if a waiting prompt fits, the pass prefills whole prompts only and every decode waits a step (the
    decode stall); otherwise the pass decodes every running request.

Batch slots (max_seqs, nano-vllm's max_num_seqs): at most this many requests run at once; the rest wait in the
queue. How a slot is refilled is the batching (`Batching`):

    continuous    a request that finishes gives its slot back at once: the next pass admits the front of the queue
                  (Orca's iteration-level scheduling, vLLM's)
    static        a batch is formed from the front of the queue when the one before has finished, every member;
                  a member that finishes keeps its row in every pass until the batch's longest member is done,
                  computing padding (its last token fed again, its keys written to its own blocks and never
                  read by anyone, no token chosen), however many requests wait: what one padded generate call
                  over a batch does. The batch's blocks are given back when the whole batch is done

Blocks are checked, then committed (nano-vllm's can_allocate, then allocate). A request new to the pool is
first checked: how many of its leading full blocks others hold or the pool still caches (prefix sharing:
those tokens are skipped), and whether the free blocks cover the rest of what it feeds. Only when both
pass does it take any block; one that cannot come in waits with the pool exactly as it was.

When a running request needs a block and none is free, a running request is preempted: its blocks are
freed (its full ones stay cached until evicted) and it goes back to the front of the queue, to be
recomputed from its tokens (prompt and the tokens it had made) when there is room again. Which one is the
preemption policy (`Preemption`), chosen among the running requests not yet given their part of this pass:

    newest        the most recently admitted: vLLM's policy (recompute the last to arrive, so the oldest
                  requests always progress)
    most_blocks   the one holding the most blocks: one preemption frees the most room, whoever it is

`schedule` returns a Plan a test can read; `postprocess` applies the pass's tokens after it ran.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from engine.errors import StepError
from engine.generate.serving.blocks import BlockManager
from engine.generate.serving.requests import Request, Status


class Preemption(StrEnum):
    """Which running request gives its blocks back when one that is running needs a block and none is free."""

    NEWEST = "newest"  # the most recently admitted (vLLM: recompute the last to arrive)
    MOST_BLOCKS = "most_blocks"  # the one holding the most blocks (the newest among equals)


class Batching(StrEnum):
    """How a freed batch slot is refilled (see the module docstring)."""

    CONTINUOUS = "continuous"  # the next pass: a finished request's slot goes to the front of the queue
    STATIC = "static"  # when the whole batch has finished: its slots wait for its longest member


class Phase(StrEnum):
    """What a request's part of a pass is; the values are what records, JSON and pictures show."""

    PREFILL = "prefill"  # a chunk of its prompt
    DECODE = "decode"  # its newest token
    RECOMPUTE = "recompute"  # its tokens again, after a preemption dropped their keys and values
    PADDING = "padding"  # static batching: a finished member's row, computed and thrown away until its batch ends


@dataclass(frozen=True)
class Scheduled:
    """One request's part of the pass: it feeds q_len tokens from position `start`."""

    request: Request
    phase: Phase
    start: int
    q_len: int
    emits: bool = False  # after this pass every position is computed: its last fed token's logits choose a token

    @property
    def fed(self) -> tuple[int, ...]:
        if self.phase == Phase.PADDING:  # a finished request's row in a static batch: its last token, again
            return (self.request.tokens[-1],) * self.q_len
        return tuple(self.request.tokens[self.start:self.start + self.q_len])


@dataclass
class Plan:
    rows: list[Scheduled] = field(default_factory=list)
    arrived: list[str] = field(default_factory=list)  # ids that joined the queue this step
    preempted: list[str] = field(default_factory=list)  # ids preempted to make room, in order
    prefix_hits: dict[str, int] = field(default_factory=dict)  # id -> prompt positions taken from shared blocks
    admitted: list[str] = field(default_factory=list)  # ids that entered the pool this step

    @property
    def tokens(self) -> int:
        return sum(r.q_len for r in self.rows)


class Scheduler:
    def __init__(self, blocks: BlockManager, requests: list[Request], max_batch_tokens: int, chunking: bool = True,
                 prefix_sharing: bool = True, preemption: Preemption | str = Preemption.NEWEST,
                 max_seqs: int | None = None, batching: Batching | str = Batching.CONTINUOUS):
        self.blocks = blocks
        self.max_batch_tokens = max_batch_tokens
        self.chunking = chunking
        self.prefix_sharing = prefix_sharing
        self.preemption = Preemption(preemption)
        self.max_seqs = max_seqs  # batch slots: None, as many as the budget and the pool allow
        self.batching = Batching(batching)
        self.not_arrived: deque[Request] = deque(requests)  # in order of arrival
        self.waiting: deque[Request] = deque()  # arrived and not in the pool: preempted ones at the front
        self.running: deque[Request] = deque()  # in the pool, in the order they were admitted
        self.batch: list[Request] = []  # static batching: the members of the batch now served (their slots)

    def schedule(self, step: int) -> Plan:
        """Arrivals join the queue, then ONE pass is filled under the token budget (see the module docstring)."""
        plan = Plan()
        while self.not_arrived and self.not_arrived[0].arrive <= step:
            r = self.not_arrived.popleft()
            r.status = Status.WAITING
            self.waiting.append(r)
            plan.arrived.append(r.id)
        if self.batching == Batching.STATIC and all(r.status == Status.DONE for r in self.batch):
            self.batch = list(self.waiting)[: self.max_seqs]  # the next batch: the front of the queue, slots full
        if self.chunking:
            self._continue_running(plan, self.max_batch_tokens)
            self._admit_waiting(plan, self.max_batch_tokens - plan.tokens)
        else:
            self._admit_waiting(plan, self.max_batch_tokens)  # whole prompts first: decodes wait this step
            if not plan.rows:
                self._continue_running(plan, self.max_batch_tokens)
        if self.batching == Batching.STATIC:
            self._pad(plan)
        if not plan.rows and not self.not_arrived and (self.waiting or self.running):
            raise StepError("Nothing can run and nothing else will arrive: the pool is too small for what waits.")
        return plan

    def postprocess(self, plan: Plan, chosen: dict[str, int], step: int) -> None:
        """After the pass: each row's fed positions are computed (full blocks get their prefix hash, to be shared),
        each token chosen is appended through the loop's stop rule, and a request that stops frees its blocks
        (its full ones stay cached for a later request with the same prefix)."""
        for s in plan.rows:
            r = s.request
            if s.phase == Phase.PADDING:  # its keys are written to its own blocks and never read: nothing else
                r.computed += s.q_len
                continue
            r.recomputed_tokens += max(0, min(s.start + s.q_len, r.reached) - s.start)  # fed before a preemption
            r.computed += s.q_len
            r.reached = max(r.reached, r.computed)
            if self.prefix_sharing:
                self.blocks.register_full(r.table, r.tokens, r.computed)
            if s.phase != Phase.DECODE:
                r.chunks += 1
            if s.emits:
                r.take(chosen[r.id], step)
                if r.status == Status.DONE:
                    if self.batching != Batching.STATIC:
                        self.blocks.free(r.table)
                    self.running.remove(r)
        if self.batching == Batching.STATIC and self.batch and all(m.status == Status.DONE for m in self.batch):
            for m in self.batch:  # the whole batch is done: its rows, padding and all, give their blocks back
                self.blocks.free(m.table)
            self.batch = []

    # ------------------------------------------------------------ the two halves of a pass

    def _continue_running(self, plan: Plan, budget: int) -> None:
        """Running requests, oldest first: each feeds what it needs, as far as the budget goes."""
        for r in list(self.running):
            if r.status != Status.RUNNING or budget <= 0:
                continue
            n = min(r.need, budget)
            if not self._make_room(r, r.computed + n, plan):
                continue  # r itself was preempted
            plan.rows.append(self._scheduled(r, n))
            budget -= n

    def _admit_waiting(self, plan: Plan, budget: int) -> None:
        """Waiting requests, front first, while the budget and the free blocks last: each checked, then committed."""
        while self.waiting and not plan.preempted:  # after a preemption, nobody new comes in this step
            r = self.waiting[0]
            if not self.has_slot(r):
                return  # every slot is taken (or, static, kept for the batch's own members)
            cached = self.blocks.cached_prefix(r.tokens) if self.prefix_sharing else 0  # held by others: skipped
            n = self._admit_tokens(len(r.tokens) - cached, budget, plan)
            if n <= 0 or self.blocks.can_allocate(r.tokens, cached + n, cached) < 0:
                return  # it waits, and nothing was taken
            self.waiting.popleft()
            self.blocks.allocate(r.table, r.tokens, cached + n, cached)
            r.computed = cached
            if cached:  # a request back from a preemption may find its own blocks still cached: a hit too
                plan.prefix_hits[r.id] = cached
                r.prefix_hit_tokens += cached
            r.status = Status.RUNNING
            self.running.append(r)
            plan.admitted.append(r.id)
            plan.rows.append(self._scheduled(r, n))
            budget -= n

    def _pad(self, plan: Plan) -> None:
        """Static batching: every finished member of an unfinished batch keeps its row in the pass (padding, one
        position each, in its own blocks; none is taken from a running request: a row with no room is left out)."""
        if all(m.status == Status.DONE for m in self.batch):
            return
        for m in self.batch:
            if m.status == Status.DONE and self.blocks.can_grow(m.table, m.computed + 1):
                self.blocks.grow(m.table, m.computed + 1)
                plan.rows.append(Scheduled(m, Phase.PADDING, m.computed, 1))

    def has_slot(self, r: Request) -> bool:
        """May this waiting request take a batch slot now? Continuous: while fewer than max_seqs run. Static: only a
        member of the batch now served (a new batch is formed when every member of the last one is done)."""
        if self.batching == Batching.STATIC:
            return r in self.batch
        return self.max_seqs is None or len(self.running) < self.max_seqs

    def _admit_tokens(self, need: int, budget: int, plan: Plan) -> int:
        """Tokens a waiting request may feed this pass: a chunk as big as the budget allows, or (chunking off) its
        whole prompt, which a prompt longer than the budget may do only alone."""
        if self.chunking:
            return min(need, budget)
        return need if need <= budget or not plan.rows else 0

    # ------------------------------------------------------------ room in the pool

    def _make_room(self, r: Request, positions: int, plan: Plan) -> bool:
        """Grow r's table to `positions`, preempting running requests (by the policy) while blocks are short.
        False if r itself had to go."""
        while not self.blocks.can_grow(r.table, positions):
            victim = self.victim(plan)
            self.preempt(victim)
            plan.preempted.append(victim.id)
            if victim is r:
                return False
        self.blocks.grow(r.table, positions)
        return True

    def victim(self, plan: Plan) -> Request:
        """The request the policy preempts, among the running ones not yet in this pass's plan (one already given
        its part keeps it: its rows are in the plan). Running requests are scheduled oldest first, so these are
        the one asking for room and every one admitted after it."""
        scheduled = {s.request.id for s in plan.rows}
        candidates = [q for q in self.running if q.id not in scheduled]
        if self.preemption == Preemption.NEWEST:
            return candidates[-1]
        return max(reversed(candidates), key=lambda q: len(q.table))  # most blocks; among equals the newest

    def preempt(self, r: Request) -> None:
        """Free r's blocks and put it at the front of the queue: its keys and values will be recomputed (those of its
        full blocks still cached when it comes back are taken back instead)."""
        self.blocks.free(r.table)
        r.computed = 0
        r.status = Status.PREEMPTED
        r.preemptions += 1
        self.running.remove(r)
        self.waiting.appendleft(r)

    def _scheduled(self, r: Request, n: int) -> Scheduled:
        return Scheduled(r, self._phase(r), r.computed, n, emits=r.computed + n == len(r.tokens))

    def _phase(self, r: Request) -> Phase:
        if r.first_token_step is not None and r.need == 1:
            return Phase.DECODE
        return Phase.RECOMPUTE if r.preemptions else Phase.PREFILL
