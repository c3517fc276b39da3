"""Evicting caches: each layer holds at most `budget` positions between passes, and a rule says which.

A pass appends its new keys and values, attends to everything the layer holds (the budget plus the fed positions),
and only then, once this layer's attention weights exist, the layer drops down to its budget. Which rows stay:
first the rows a rule protects, then the highest score, then the newest (per kv_head, so heads may differ):

    window   no score, nothing protected                           -> the last B positions (a sliding window)
    sinks    the first SINKS positions protected                   -> the first 4 and the last B - 4 (StreamingLLM)
    heavy    the attention each position has received, summed     -> the last B/2, plus the B/2 most attended
             over every query so far (H2O's accumulated score);      of the rest (H2O's heavy hitters)
             the recent half protected
    snap     at the prefill, the attention the prompt's last       -> the prompt positions the end of the prompt
             OBSERVATION queries pay each position, smoothed over     looks at (SnapKV), then every new position
             KERNEL neighbours (the window itself scores the top);    (kvpress's SnapKVPress, SnapKV's defaults
             every position decoded later protected                   scaled down to these small models)

H2O's plain sum favours early positions (more queries have read them); kvpress's ObservedAttentionPress divides
each sum by the number of queries that could see the position. This is H2O's rule, as published.

Positions keep the rotation they were written with: keys are cached after RoPE (or, for GPT-2, the position
embedding was added before them), so a held key still says "I am position 37" when position 300 reads it, and the
next position is numbered by how many positions the run has seen, not by how many the cache holds. StreamingLLM does
it differently: it caches keys before RoPE and rotates them by their slot in the cache (0 .. B-1), so the model
never sees a distance longer than it trained on; here a distance is always the true one.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

SINKS = 4  # StreamingLLM keeps the first four positions
OBSERVATION = 16  # SnapKV's observation window: the prompt's last queries (kvpress: 64; scaled to a 64-position budget)
KERNEL = 5  # SnapKV smooths the scores over neighbouring positions (kvpress's kernel_size)


class EvictingLayer(DynamicLayer):
    """One layer's keys and values, at most `budget` positions between passes, each remembering its position.

        keys, values   [batch, kv_head, held, head_dim]   what the layer holds (held <= budget between passes)
        positions      [batch, kv_head, held]             the position each held row was written at
        scores         [batch, kv_head, held]             the rule's score of each held row
    """

    def __init__(self, rule: str, budget: int):
        super().__init__()
        self.rule, self.budget = rule, budget
        self.cumulative_length = 0  # positions this layer has seen: the next one's position
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
        new = torch.arange(self.cumulative_length, self.cumulative_length + q_len, device=self.device)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        self.positions = torch.cat([self.positions, new.expand(b, h, q_len)], dim=-1)
        self.scores = torch.cat([self.scores, torch.zeros(b, h, q_len, device=self.device)], dim=-1)
        self.cumulative_length += q_len
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """Positions seen, not held: the next position's number, so its RoPE rotation is its true position."""
        return self.cumulative_length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """Keys a pass attends to (held + fed); the offset makes the fed rows the last, so they stay causal."""
        held = self.held
        return held + query_length, self.cumulative_length - held

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
        if self.passes == 1:
            self.prefill_length = self.cumulative_length
        if weights is not None and self.rule in ("heavy", "snap"):
            self.scores = self.scores + score(self.rule, weights.float(), self.positions, self.passes == 1)
        if self.held > self.budget:
            self.keep(top_b(self.protected(), self.scores, self.positions, self.budget))

    def protected(self) -> torch.Tensor:
        """[batch, kv_head, held] True where a row is kept whatever its score (sinks, the recent half, new rows)."""
        p = self.positions
        if self.rule == "sinks":
            return p < SINKS
        if self.rule == "heavy":
            return p >= self.cumulative_length - max(1, self.budget // 2)
        if self.rule == "snap":  # rows decoded after the prefill (none at the prefill itself)
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


def score(rule: str, weights: torch.Tensor, positions: torch.Tensor, first_pass: bool) -> torch.Tensor:
    """What this pass adds to each held row's score, [batch, kv_head, held], from weights [batch, head, q, held].

    The query heads that share a kv_head (GQA) are summed (heavy) or averaged (snap) onto it.
    """
    b, heads, q_len, k_len = weights.shape
    kv_heads = positions.shape[1]
    grouped = weights.reshape(b, kv_heads, heads // kv_heads, q_len, k_len)
    if rule == "heavy":  # H2O: every query's attention accumulates on the keys it read
        return grouped.sum(dim=(2, 3))
    if not first_pass:  # snap scores once, at the prefill
        return torch.zeros(b, kv_heads, k_len, device=weights.device)
    window = min(OBSERVATION, q_len)
    seen = grouped[:, :, :, -window:, :].mean(dim=3)  # [batch, kv_head, group, held]: the last queries' attention
    pooled = torch.nn.functional.avg_pool1d(seen.flatten(0, 2).unsqueeze(1), KERNEL, stride=1, padding=KERNEL // 2,
                                            count_include_pad=False).view(b, kv_heads, -1, k_len)
    scores = pooled.mean(dim=2)
    scores[..., k_len - window:] = scores.max()  # the observation window itself is always kept (kvpress)
    return scores
