"""Read off a serving run's records (engine/generate/serving/record.py), one definition each: the steps a request
sat out, and who held each batch slot. The timeline draws them, and every count of them reads them here.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.generate.serving.requests import Status
from engine.generate.serving.scheduler import Phase


def sitting_out(step) -> list[str]:
    """The requests that sat this step out: in the pool (running) after the step, but not in its pass."""
    ran = {r.id for r in step.rows}
    return [rid for rid, status in step.statuses if status == Status.RUNNING and rid not in ran]


def sat_out(steps) -> dict[str, tuple[int, ...]]:
    """Request id -> the steps it sat out (`sitting_out`). The one definition the timeline draws ("sat out a
    step"), every count of steps sat out reads, and the batch slots hold (`slot_use`)."""
    out: dict[str, list[int]] = {}
    for s in steps:
        for rid in sitting_out(s):
            out.setdefault(rid, []).append(s.step)
    return {rid: tuple(v) for rid, v in out.items()}


@dataclass(frozen=True)
class SlotStep:
    """The batch slots during one step's pass: who held each, who of them only computed padding, and how many
    requests waited in the queue."""

    step: int
    slots: tuple[str | None, ...]  # the request in each slot (None: idle); a request keeps its slot while in the pool
    padding: tuple[str, ...]  # requests whose row in this pass was padding (static batching: finished, still in)
    waiting: int  # requests in the queue after the step: arrived (or preempted) and not in the pool

    @property
    def idle(self) -> int:
        return sum(1 for rid in self.slots if rid is None)

    @property
    def wasted_while_waiting(self) -> int:
        """Slots idle or computing padding while requests waited for one: the waste a queue makes visible."""
        return min(self.idle + len(self.padding), self.waiting)


def slot_use(steps, slots: int | None) -> tuple[SlotStep, ...]:
    """Each step's batch slots, read off the records: a slot is held by a request from the pass it is admitted in to
    the pass that makes its last token (or until it is preempted), running in the pass or sitting it out, and under
    static batching while its row computes padding; a request takes the lowest free slot. `slots` None: as many as
    were ever held at once."""
    held = [[r.id for r in s.rows] + sitting_out(s) for s in steps]
    n = slots or max((len(h) for h in held), default=0)
    where: dict[str, int] = {}
    out = []
    for s, ids in zip(steps, held):
        where = {rid: k for rid, k in where.items() if rid in ids}
        for rid in ids:
            if rid not in where:
                where[rid] = min(set(range(max(n, len(ids)))) - set(where.values()))
        row = [None] * max(n, len(ids))
        for rid, k in where.items():
            row[k] = rid
        waiting = sum(1 for _, st in s.statuses if st in (Status.WAITING, Status.PREEMPTED))
        padding = tuple(r.id for r in s.rows if r.phase == Phase.PADDING)
        out.append(SlotStep(s.step, tuple(row), padding, waiting))
    return tuple(out)
