"""FLOPs and bytes-moved *estimates* for one forward pass.

These are computed from the config, not measured; the UI labels them
"estimate". The usual transformer accounting:

    matmul FLOPs   = 2 * (non-embedding params) * q_len  +  2 * d_model * vocab * logit_rows
    attention FLOPs = 2 * 2 * layer * head * head_dim * (query-key pairs)
                      (QK^T and weights x V; pairs = q_len * past + q_len * (q_len + 1) / 2)
    bytes moved    = every weight read once + KV cache read + new K/V written
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """The figures of a model the estimates need."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    d_model: int
    vocab: int
    parameters: int
    bytes_per_param: int

    @classmethod
    def from_summary(cls, s, bytes_per_param: int) -> "CostModel":
        return cls(s.layers, s.heads, s.kv_heads, s.head_dim, s.d_model, s.vocab, s.parameters, bytes_per_param)

    @property
    def body_parameters(self) -> int:
        """Parameters used in matmuls per position, without the embedding lookup and the LM head."""
        return max(0, self.parameters - self.vocab * self.d_model)

    def kv_bytes_per_pos(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param


def pairs(q_len: int, past: int) -> int:
    """Query-key pairs a causal pass computes: each new row sees the past plus itself and earlier new rows."""
    return q_len * past + q_len * (q_len + 1) // 2


def step_flops(c: CostModel, q_len: int, past: int, logit_rows: int = 1) -> float:
    """Estimated FLOPs of a forward pass over q_len new positions with `past` cached ones."""
    matmul = 2 * c.body_parameters * q_len + 2 * c.d_model * c.vocab * logit_rows
    attention = 4 * c.layers * c.heads * c.head_dim * pairs(q_len, past)
    return float(matmul + attention)


def step_bytes(c: CostModel, q_len: int, past: int) -> float:
    """Estimated bytes moved: all weights once, the cached K/V read, the new K/V written."""
    return float(c.parameters * c.bytes_per_param + c.kv_bytes_per_pos() * (past + q_len))


def generation_flops(c: CostModel, prompt_len: int, new_tokens: int, use_cache: bool) -> list[float]:
    """Per-step FLOPs estimate of a whole generation: prefill, then decode steps."""
    out = [step_flops(c, prompt_len, 0)]
    for i in range(1, new_tokens):
        n = prompt_len + i
        out.append(step_flops(c, 1, n - 1) if use_cache else step_flops(c, n, 0))
    return out
