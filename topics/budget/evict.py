"""Evicting caches: each layer drops positions by a rule, and the rule's score says which.

A pass appends its new keys and values, attends to everything the layer holds (what it kept plus the fed positions),
and only then, once this layer's attention weights exist, the layer drops what its rule drops. Which rows stay:
first the rows a rule protects, then the highest score, then the newest (per kv_head, so heads may differ):

    window       no score, nothing protected                         -> the last B positions (a sliding window)
    sinks        the first SINKS positions protected                 -> the first 4 and the last B - 4 (StreamingLLM)
    heavy        H2O's score: the attention each position has        -> the last B/2, plus the B/2 of the rest with
                 received, summed over every query so far              the highest score (H2O's heavy hitters)
    heavy-avg    the same sum divided by the queries that could      -> the same recent half, and the B/2 of the rest
                 see the position (kvpress's ObservedAttentionPress)    read most per query that could read them
    snap         SnapKV, as published: at the prefill, the attention -> B of the prompt's positions, chosen once;
                 the prompt's last `window` queries pay each earlier    then never evicts: every decoded position is
                 position, averaged over those queries, pooled over     kept beside them (B + the new ones held)
                 KERNEL neighbours; the window itself always kept
    snap-capped  the same choice at the prefill, then at most B held -> each decoded position pushes out a prompt
                 (every decoded position protected)                     one: after B decode steps, the last B (a window)

H2O's plain sum favours early positions (more queries have read them); kvpress's ObservedAttentionPress divides each
sum by the number of queries that could see the position, which puts them level. Both are published; the page shows
both, and on the bundled model their ranking flips.

SnapKV follows its paper's code (FasterDecoding/SnapKV, snapkv_utils.py) and kvpress's SnapKVPress: only the prefix
columns (the positions before the observation window) are scored and pooled, with avg_pool1d's zero padding counted
in the mean; the query heads that share a kv_head are averaged (kvpress). The window is OBSERVATION queries (kvpress:
64, the paper 32; scaled to these small models), and never more than half the budget, so at least half of what the
prompt keeps is chosen by score (the paper asserts budget > window).

Positions keep the rotation they were written with: keys are cached after RoPE (or, for GPT-2, the position
embedding was added before them), so a held key still says "I am position 37" when position 300 reads it, and the
next position is numbered by how many positions the run has seen, not by how many the cache holds. StreamingLLM does
it differently: it caches keys before RoPE and rotates them by their slot in the cache (0 .. B-1), so the model
never sees a distance longer than it trained on; here a distance is always the true one.
"""

from __future__ import annotations

import torch

from engine.transformers_internals import OwnLayer

SINKS = 4  # StreamingLLM keeps the first four positions
OBSERVATION = 16  # SnapKV's observation window: the prompt's last queries (kvpress: 64; scaled to a 64-position budget)
KERNEL = 5  # SnapKV smooths the scores over neighbouring positions (kvpress's kernel_size, the paper's too)
SCORED = ("heavy", "heavy-avg", "snap", "snap-capped")  # the rules that read the attention weights
RULES = ("window", "sinks", *SCORED)


def snap_window(budget: int, prompt: int) -> int:
    """SnapKV's observation window: OBSERVATION queries, at most half the budget, and shorter than the prompt."""
    return max(1, min(OBSERVATION, budget // 2, prompt - 1))


class EvictingLayer(OwnLayer):
    """One layer's keys and values under an eviction rule, each held row remembering its position.

        keys, values   [batch, kv_head, held, head_dim]   what the layer holds (held <= budget between passes,
                                                          except snap: its budget binds the prompt only)
        positions      [batch, kv_head, held]             the position each held row was written at
        scores         [batch, kv_head, held]             the rule's score of each held row (heavy: H2O's sum)
    """

    def __init__(self, rule: str, budget: int):
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"unknown eviction rule {rule!r}")
        self.rule, self.budget = rule, budget
        self.positions = self.scores = None
        self.passes = 0  # observed passes: the first is the prefill
        self.prefill_length = 0

    # ------------------------------------------------------------ what transformers asks of a layer

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        b, h = key_states.shape[:2]
        self.positions = torch.empty(b, h, 0, dtype=torch.long, device=self.device)
        self.scores = torch.empty(b, h, 0, dtype=torch.float32, device=self.device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append the fed positions and return everything held: this pass attends to all of it."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, h, q_len = key_states.shape[:3]
        new = torch.arange(self.seen, self.seen + q_len, device=self.device)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        self.positions = torch.cat([self.positions, new.expand(b, h, q_len)], dim=-1)
        self.scores = torch.cat([self.scores, torch.zeros(b, h, q_len, device=self.device)], dim=-1)
        self.seen += q_len
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """Positions seen, not held: the next position's number, so its RoPE rotation is its true position."""
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """Keys a pass attends to (held + fed); the offset makes the fed rows the last, so they stay causal."""
        held = self.held
        return held + query_length, self.seen - held

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise RuntimeError("an evicting cache cannot be rolled back: what it dropped is gone")

    @property
    def held(self) -> int:
        return 0 if self.keys is None or self.keys.dim() < 3 else self.keys.shape[-2]

    def nbytes(self) -> int:
        """K and V bytes held, from the tensors (positions and scores are bookkeeping, not the cache)."""
        if not self.held:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()

    # ------------------------------------------------------------ after this layer's attention

    def observe(self, weights: torch.Tensor | None) -> None:
        """Score the held positions by this pass's attention [batch, head, query_pos, key_pos], then evict."""
        self.passes += 1
        prefill = self.passes == 1
        if prefill:
            self.prefill_length = self.seen
        if weights is not None and self.rule in SCORED:
            self.scores = self.scores + score(self.rule, weights.float(), self.positions, prefill, self.budget)
        if self.rule == "snap" and not prefill:
            return  # SnapKV compresses the prompt once; a decoded position is never evicted
        if self.held > self.budget:
            self.keep(top_b(self.protected(), self.ranked(), self.positions, self.budget))

    def ranked(self) -> torch.Tensor:
        """[batch, kv_head, held] what the rule ranks by: H2O's sum, or that sum per query that could see the row."""
        if self.rule == "heavy-avg":  # queries at positions p .. seen - 1 could read position p
            return self.scores / (self.seen - self.positions).clamp(min=1)
        return self.scores

    def protected(self) -> torch.Tensor:
        """[batch, kv_head, held] True where a row is kept whatever its score (sinks, the recent half, new rows)."""
        p = self.positions
        if self.rule == "sinks":
            return p < SINKS
        if self.rule in ("heavy", "heavy-avg"):
            return p >= self.seen - max(1, self.budget // 2)
        if self.rule == "snap-capped":  # rows decoded after the prefill (none at the prefill itself)
            return p >= self.prefill_length
        return torch.zeros_like(p, dtype=torch.bool)

    def keep(self, index: torch.Tensor) -> None:
        """Keep the rows `index` [batch, kv_head, budget] (in position order) of every per-row tensor."""
        rows = index.unsqueeze(-1)
        self.keys = self.keys.gather(2, rows.expand(-1, -1, -1, self.keys.shape[-1]))
        self.values = self.values.gather(2, rows.expand(-1, -1, -1, self.values.shape[-1]))
        self.positions, self.scores = self.positions.gather(2, index), self.scores.gather(2, index)


def top_b(protected: torch.Tensor, scores: torch.Tensor, positions: torch.Tensor, budget: int) -> torch.Tensor:
    """Indices of the `budget` rows to keep per kv_head: protected rows first, then the highest score, then the newest.

    Three stable sorts, last key first; the kept rows come back in position order, so a layer's rows stay sorted
    by position (the picture and a reader expect it).
    """
    order = positions.argsort(dim=-1)  # oldest .. newest
    order = order.gather(-1, scores.gather(-1, order).argsort(dim=-1, stable=True))  # by score; ties: the newest last
    order = order.gather(-1, protected.gather(-1, order).int().argsort(dim=-1, stable=True))  # protected last of all
    keep = order[..., -budget:]
    return keep.gather(-1, positions.gather(-1, keep).argsort(dim=-1))


def score(rule: str, weights: torch.Tensor, positions: torch.Tensor, first_pass: bool, budget: int) -> torch.Tensor:
    """What this pass adds to each held row's score, [batch, kv_head, held], from weights [batch, head, q, held].

    The query heads that share a kv_head (GQA) are summed (H2O) or averaged (kvpress's presses) onto it.
    """
    b, heads, q_len, k_len = weights.shape
    kv_heads = positions.shape[1]
    grouped = weights.reshape(b, kv_heads, heads // kv_heads, q_len, k_len)
    if rule == "heavy":  # H2O: every query's attention accumulates on the keys it read
        return grouped.sum(dim=(2, 3))
    if rule == "heavy-avg":  # the same sum (averaged over the group); ranked() divides by the queries that could see it
        return grouped.sum(dim=3).mean(dim=2)
    if not first_pass:  # snap scores once, at the prefill
        return torch.zeros(b, kv_heads, k_len, device=weights.device)
    return snap_scores(grouped, snap_window(budget, q_len))


def snap_scores(grouped: torch.Tensor, window: int) -> torch.Tensor:
    """SnapKV's score of every prompt position, from the prefill's weights [batch, kv_head, group, query_pos, key_pos].

    The last `window` queries' attention to each prefix position (the positions before the window), averaged over
    those queries, smoothed by avg_pool1d over KERNEL neighbours (zero padding counted, as the paper's code and
    kvpress), averaged over the group; the window's own positions get the top score, so they are always kept.
    """
    b, kv_heads, group, q_len, k_len = grouped.shape
    prefix = k_len - window
    if prefix < 1:  # a one-position prompt: nothing before the window to score
        return torch.ones(b, kv_heads, k_len, device=grouped.device)
    seen = grouped[:, :, :, -window:, :prefix].mean(dim=3)  # [batch, kv_head, group, prefix]
    pooled = torch.nn.functional.avg_pool1d(seen.reshape(-1, 1, prefix), KERNEL, stride=1, padding=KERNEL // 2)
    scores = pooled.view(b, kv_heads, group, prefix).mean(dim=2)
    return torch.cat([scores, scores.max().expand(b, kv_heads, window)], dim=-1)
