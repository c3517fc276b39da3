"""What the heads of a layer do at one step, read off their measured attention rows.

    earlier_copies   where the token at `pos` appeared before (by token id, never by its display text)
    head_roles       each head named for what its weights show at this step:

        previous token   most weight on the key just before the query (query_pos - 1)
        first token      most weight on key 0, the "attention sink" of many models
        copy             weight on the token AFTER an earlier copy of the query's token (induction:
                         "last time this token came, what followed?")
        current token    most weight on the query's own position
        broad            no key holds more than BROAD_MAX: the weight is spread over the context
        looks at KEY     none of the above, for one query row: the key it looks at most
        mixed            none of the above, over many rows (a prefill): no one role holds its weight

A head's role is read from the rows this step recorded (every row at a prefill, the newest query at a
decode step); at a prefill the weights are averaged over the rows where the role can be told apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROLE_MIN = 0.4  # a role's keys must hold at least this much of a row's weight
COPY_MIN = 0.3  # ... the copy role, whose weight is often split with the previous token
BROAD_MAX = 0.25  # a row whose largest weight is below this is spread out: broad


def earlier_copies(ids: list[int], pos: int) -> list[int]:
    """Positions before `pos` that hold the same token id as `pos`, oldest first."""
    return [p for p in range(pos) if ids[p] == ids[pos]]


@dataclass(frozen=True)
class HeadRole:
    head: int
    role: str  # "previous token", "first token", "copy", "current token", "broad", "looks at", "mixed"
    weight: float  # the (mean) weight on the keys that define the role
    key_pos: int  # the key it looks at most for the newest query


def _row_scores(w: torch.Tensor, q: int, ids: list[int], start: int) -> dict[str, float]:
    """One query row's weight on each role's keys; w covers key positions start .. start + len(w) - 1."""
    def at(p: int) -> float:
        return float(w[p - start]) if start <= p < start + len(w) else 0.0

    scores = {"current token": at(q)}
    if q >= 2:  # at q = 1 the previous token IS the first one: neither role can be told apart
        scores["previous token"] = at(q - 1)
        scores["first token"] = at(0)
    targets = [p + 1 for p in earlier_copies(ids, q) if p + 1 < q - 1]  # after an earlier copy, not the previous
    if targets:
        scores["copy"] = sum(at(p) for p in targets)
    return scores


def head_roles(t, layer: int, ids: list[int]) -> list[HeadRole]:
    """Every head of `layer` at step `t`, named by its weights; [] when the step kept no attention."""
    lt = t.layers[layer]
    if lt.pattern is None:
        return []
    pattern = lt.pattern.float()  # [head, query_pos, key_pos]
    rows, width = pattern.shape[1], pattern.shape[2]
    first_q = t.kv_len - rows
    out = []
    for head in range(pattern.shape[0]):
        sums: dict[str, list[float]] = {}
        peaks = []
        for r in range(rows):
            q = first_q + r
            w = pattern[head, r]
            if q >= 2:
                peaks.append(float(w.max()))
            for role, s in _row_scores(w, q, ids, lt.key_start).items():
                sums.setdefault(role, []).append(s)
        means = {role: sum(v) / len(v) for role, v in sums.items()}
        newest = pattern[head, -1]
        key_pos = lt.key_start + int(newest.argmax())
        best = max(means, key=means.get) if means else None
        needed = COPY_MIN if best == "copy" else ROLE_MIN
        if best is not None and means[best] >= needed:
            out.append(HeadRole(head, best, means[best], key_pos))
        elif peaks and sum(peaks) / len(peaks) < BROAD_MAX:
            out.append(HeadRole(head, "broad", sum(peaks) / len(peaks), key_pos))
        elif rows > 1:
            out.append(HeadRole(head, "mixed", sum(peaks) / max(1, len(peaks)), key_pos))
        else:
            out.append(HeadRole(head, "looks at", float(newest.max()), key_pos))
    return out


ORDER = ("previous token", "first token", "copy", "current token", "broad", "mixed")


def roles_sentence(roles: list[HeadRole], pieces: list[str], layer: int, rows: int = 1) -> str:
    """The roles grouped, as one sentence a lecturer can read out: which heads do what at this step.

    rows: the query rows the roles were read from (1: the newest query, as the picture shows it)."""
    if not roles:
        return ""
    groups: dict[str, list[HeadRole]] = {}
    for r in roles:
        name = f"looks at {pieces[r.key_pos]}" if r.role == "looks at" else r.role
        groups.setdefault(name, []).append(r)

    def rank(name: str) -> int:
        return ORDER.index(name) if name in ORDER else len(ORDER)

    parts = []
    for name in sorted(groups, key=rank):
        heads = groups[name]
        which = ("head " if len(heads) == 1 else "heads ") + ", ".join(str(h.head) for h in heads)
        weights = ", ".join(f"{h.weight:.2f}" for h in heads)
        parts.append(f"{name}: {which} ({'largest weight ' if name in ('broad', 'mixed') else ''}{weights})")
    where = "for the newest query" if rows == 1 else f"averaged over its {rows} query rows"
    return f"Layer {layer}, {where}: " + " · ".join(parts) + "."
