"""The frozen record of one serving step, like a StepTrace is of one pass: what the Serving page draws.

    rows        which requests shared the pass: each one's phase (prefill, decode, recompute, or padding: a finished
                request's row in a static batch), first position, q_len, and the token it chose
    queue       every request's status after the step: not arrived · waiting · running · preempted · done
    tables      every block table after the step (request id -> block ids), every block's ref count and state
                (free · cached, free to evict · in use · shared: engine/generate/serving/blocks.py)
    counts      blocks used / free (of them cached) / shared, evicted this step, tokens fed (T), keys read
    time        the pass, measured (perf_counter around a device sync), and the whole step's wall time

and what a client sees of one request (`Latency`), by the textbook definitions, from the steps' wall times:

    TTFT        time to first token: from the start of the step it arrives at to the end of the step that chose
                its first token (in engine steps, and in measured ms)
    TPOT        time per output token: the mean of the measured gaps between its consecutive tokens (the wait for
                the first token is TTFT's, not TPOT's)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.generate.serving.blocks import BlockState
from engine.generate.serving.requests import Status
from engine.generate.serving.scheduler import Phase

NOT_ARRIVED = Status.NOT_ARRIVED  # the status of a request before its arrival step (topics/serving/draw.py reads it)


def keys_read(rows) -> int:
    """Keys a pass reads, all requests together: each request's rows attend to every position it holds once they
    are written, the `start` positions already in the pool and its `q_len` new rows (its own keys only: the mask)."""
    return sum(r.start + r.q_len for r in rows)


@dataclass(frozen=True)
class Latency:
    """What a client sees of one request (see the module docstring); None where it has no such token yet."""

    ttft_steps: int | None  # engine steps from its arrival step to the one that chose its first token, both counted
    ttft_ms: float | None
    tpot_ms: float | None  # the mean gap between consecutive tokens (None before its second token)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RowRecord:
    """One request's part of the pass."""

    id: str
    phase: Phase  # prefill (a chunk of its prompt) · decode (1 token) · recompute (its ids again, after a preemption)
    start: int  # position of its first fed token: the positions before it were already in the pool
    q_len: int
    chunk: int  # the how-many-th pass of its prefill this is (1, 2, ...); 0 for a decode
    token_id: int | None  # the token it chose (None: a prefill chunk that does not reach the end of its prompt)
    token: str


@dataclass(frozen=True)
class ServingStep:
    step: int
    rows: tuple[RowRecord, ...]
    arrived: tuple[str, ...]  # ids that arrived at this step
    admitted: tuple[str, ...]  # ids that entered the pool (their first blocks) at this step
    preempted: tuple[str, ...]  # ids preempted at this step to make room
    finished: tuple[str, ...]
    prefix_hits: tuple[tuple[str, int], ...]  # (id, prompt positions taken from blocks others hold)
    statuses: tuple[tuple[str, Status], ...]  # (id, status) of every request after the step
    tables: tuple[tuple[str, tuple[int, ...]], ...]  # (id, block table) of every request holding blocks
    held: tuple[tuple[str, int], ...]  # (id, positions whose keys and values its blocks hold) for the same requests
    ref_counts: tuple[int, ...]  # per block of the pool
    blocks_used: int
    blocks_free: int  # no table holds them: free, or cached (free to evict)
    blocks_shared: int
    tokens: int  # T: tokens fed to the pass, all requests together
    kv_read: int  # keys the pass read, all requests together
    forward_ms: float | None  # the pass, measured; None for a step with nothing to run (waiting for arrivals)
    step_ms: float  # the whole step: scheduling, the pass, choosing tokens, bookkeeping
    blocks_cached: int = 0  # of the free ones, those that keep a full prefix for a later request
    blocks_evicted: int = 0  # cached blocks evicted this step to make room
    block_states: tuple[BlockState, ...] = ()  # per block of the pool: free · cached · in use · shared

    def status(self, request_id: str) -> Status:
        return dict(self.statuses).get(request_id, NOT_ARRIVED)

    def owners(self) -> dict[int, tuple[str, ...]]:
        """Block id -> the requests whose tables hold it (two or more: a shared prefix block)."""
        out: dict[int, list[str]] = {}
        for rid, table in self.tables:
            for block in table:
                out.setdefault(block, []).append(rid)
        return {b: tuple(ids) for b, ids in out.items()}

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "scheduled": [{"id": r.id, "q_len": r.q_len, "phase": r.phase, "start": r.start, "chunk": r.chunk,
                           "token_id": r.token_id, "token": r.token} for r in self.rows],
            "arrived": list(self.arrived), "admitted": list(self.admitted), "preempted": list(self.preempted),
            "finished": list(self.finished), "prefix_hits": dict(self.prefix_hits),
            "statuses": dict(self.statuses), "block_tables": {rid: list(t) for rid, t in self.tables},
            "positions_held": dict(self.held),
            "blocks_used": self.blocks_used, "blocks_free": self.blocks_free, "blocks_shared": self.blocks_shared,
            "blocks_cached": self.blocks_cached, "blocks_evicted": self.blocks_evicted,
            "block_states": [str(b) for b in self.block_states],
            "tokens": self.tokens, "kv_read": self.kv_read,
            "forward_ms": None if self.forward_ms is None else round(self.forward_ms, 4),
            "step_ms": round(self.step_ms, 4),
        }
