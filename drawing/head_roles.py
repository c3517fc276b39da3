"""What the heads of a layer do at one step, read off their measured attention rows.

    earlier_copies   where the token at `pos` appeared before (by token id, never by its display text)
    head_roles       each head named for what its weights show at this step:

        previous token   most weight on the key just before the query (query_pos - 1)
        first token      most weight on key 0, the "attention sink" of many models
        after a copy     weight on the token AFTER an earlier copy of the query's token (induction:
                         "last time this token came, what followed?"), not on the earlier copy itself
        current token    most weight on the query's own position
        broad            no key holds more than BROAD_MAX: the weight is spread over the context
        split            none of the above, for one query row, and its two largest weights within SPLIT_GAP:
                         naming one key would name a near-tie
        looks at KEY     none of the above, for one query row: the key it looks at most
        mixed            none of the above, over many rows (a prefill): no one role holds its weight

A role is read from the rows it names, and says how many (`HeadRole.rows`):

    the newest query alone (the default)   what a picture of one row per head draws: a role holds only where its
                                           keys also hold the row's largest weight, so the row drawn beside the
                                           label peaks where the label says
    every recorded row (every_row=True)    a prefill's rows, each role's weight averaged over the rows where it
                                           can be told apart (previous and first token from query_pos 2, the
                                           current token from 1, after a copy where the query's token came before)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROLE_MIN = 0.4  # a role's keys must hold at least this much of a row's weight
COPY_MIN = 0.3  # ... the after-a-copy role, whose weight is often split with the previous token
BROAD_MAX = 0.25  # a row whose largest weight is below this is spread out: broad
SPLIT_GAP = 0.05  # a row's largest weight leads its second by less than this: split, no one key named
AFTER_COPY = "after a copy"


def earlier_copies(ids: list[int], pos: int) -> list[int]:
    """Positions before `pos` that hold the same token id as `pos`, oldest first."""
    return [p for p in range(pos) if ids[p] == ids[pos]]


def after_copies(ids: list[int], pos: int) -> list[int]:
    """The key positions the after-a-copy role weighs for the query at `pos`: the token after each earlier copy of
    its token, leaving out the previous token (its own role)."""
    return [p + 1 for p in earlier_copies(ids, pos) if p + 1 < pos - 1]


@dataclass(frozen=True)
class HeadRole:
    head: int
    role: str  # "previous token", "first token", "after a copy", "current token", "broad", "split", "looks at", "mixed"
    weight: float  # the weight on the keys that define the role (broad, mixed, looks at: the largest weight), mean
    key_pos: int  # the key the newest query looks at most
    rows: int  # query rows the role was read from: 1, the newest query alone; more, averaged over a prefill's rows
    query_pos: int  # the newest query's position: the row a picture of one row per head draws


def _role_keys(q: int, ids: list[int]) -> dict[str, list[int]]:
    """The key positions of each role that can be told apart for the query at q."""
    keys = {"current token": [q]} if q >= 1 else {}  # at q = 0 the only key is the query itself: no choice made
    if q >= 2:  # at q = 1 the previous token IS the first one: neither role can be told apart
        keys["previous token"] = [q - 1]
        keys["first token"] = [0]
    targets = after_copies(ids, q)
    if targets:
        keys[AFTER_COPY] = targets
    return keys


def _weight_on(w: torch.Tensor, keys: list[int], start: int) -> float:
    """A row's weight on these key positions; w covers key positions start .. start + len(w) - 1."""
    return sum(float(w[p - start]) for p in keys if start <= p < start + len(w))


def _needed(role: str) -> float:
    return COPY_MIN if role == AFTER_COPY else ROLE_MIN


def head_roles(t, layer: int, ids: list[int], every_row: bool = False) -> list[HeadRole]:
    """Every head of `layer` at step `t`, named by its weights; [] when the step kept no attention.

    Read from the newest query alone (the row a one-row-per-head picture draws), or with every_row from every
    recorded row (a prefill's), averaged."""
    lt = t.layers[layer]
    if lt.pattern is None:
        return []
    pattern = lt.pattern.float()  # [head, query_pos, key_pos]
    if every_row and pattern.shape[1] > 1:  # each row's role keys read once, for every head
        keys = [_role_keys(q, ids) for q in range(t.kv_len - pattern.shape[1], t.kv_len)]
        return [_every_row(pattern[head], head, t.kv_len, keys, lt.key_start) for head in range(pattern.shape[0])]
    keys = _role_keys(t.kv_len - 1, ids)
    return [_newest(pattern[head, -1], head, t.kv_len - 1, keys, lt.key_start) for head in range(pattern.shape[0])]


def _newest(w: torch.Tensor, head: int, q: int, role_keys: dict, start: int) -> HeadRole:
    """One row: the role whose keys hold the most weight, if that is enough and they hold the row's peak.
    `role_keys`: _role_keys of the row's query position q."""
    peak = start + int(w.argmax())
    scores = {role: (_weight_on(w, keys, start), keys) for role, keys in role_keys.items()}
    best = max(scores, key=lambda role: scores[role][0]) if scores else None
    if best is not None and scores[best][0] >= _needed(best) and peak in scores[best][1]:
        return HeadRole(head, best, scores[best][0], peak, 1, q)
    if float(w.max()) < BROAD_MAX:
        return HeadRole(head, "broad", float(w.max()), peak, 1, q)
    top = torch.topk(w, 2).values if len(w) > 1 else None
    if top is not None and float(top[0] - top[1]) < SPLIT_GAP:
        return HeadRole(head, "split", float(w.max()), peak, 1, q)
    return HeadRole(head, "looks at", float(w.max()), peak, 1, q)


def _every_row(pattern: torch.Tensor, head: int, kv_len: int, role_keys: list[dict], start: int) -> HeadRole:
    """A head's rows [query_pos, key_pos]: each role's weight averaged over the rows where it can be told apart.
    `role_keys`: _role_keys of each row's query position, in row order."""
    rows = pattern.shape[0]
    first_q = kv_len - rows
    sums: dict[str, list[float]] = {}
    peaks = []
    for r in range(rows):
        q = first_q + r
        w = pattern[r]
        if q >= 2:
            peaks.append(float(w.max()))
        for role, keys in role_keys[r].items():
            sums.setdefault(role, []).append(_weight_on(w, keys, start))
    means = {role: sum(v) / len(v) for role, v in sums.items()}
    key_pos = start + int(pattern[-1].argmax())
    best = max(means, key=means.get) if means else None
    if best is not None and means[best] >= _needed(best):
        return HeadRole(head, best, means[best], key_pos, len(sums[best]), kv_len - 1)
    if peaks and sum(peaks) / len(peaks) < BROAD_MAX:
        return HeadRole(head, "broad", sum(peaks) / len(peaks), key_pos, len(peaks), kv_len - 1)
    return HeadRole(head, "mixed", sum(peaks) / max(1, len(peaks)), key_pos, max(1, len(peaks)), kv_len - 1)


ORDER = ("previous token", "first token", AFTER_COPY, "current token", "broad", "split", "mixed")


def roles_sentence(roles: list[HeadRole], pieces: list[str], layer: int, rows: int = 1) -> str:
    """The roles grouped, as one sentence a lecturer can read out: which heads do what at this step, and which rows
    each reading covers.

    rows: the query rows recorded (1: a decode step's newest query)."""
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
        counts = sorted({h.rows for h in heads})
        over = "" if counts == [1] else f"; mean over {'/'.join(map(str, counts))} rows"
        parts.append(f"{name}: {which} ({'largest weight ' if name in ('broad', 'mixed') else ''}{weights}{over})")
    q = roles[0].query_pos
    if all(r.rows == 1 for r in roles):
        where = f"for the newest query ({pieces[q]} at {q})" if rows > 1 else "for the newest query"
    else:
        where = f"averaged over its {rows} query rows, each role over the rows where it can be told apart"
    return f"Layer {layer}, {where}: " + " · ".join(parts) + "."
