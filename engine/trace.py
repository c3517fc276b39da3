"""One small frozen record per forward pass.

Tensors in a trace are already detached, on the CPU and in float16, so a page
rerun never holds the GPU and a session's memory is easy to bound. Names follow
the shape vocabulary in engine/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Candidate:
    """One of the most likely next tokens, before and after the sampling processors."""

    token_id: int
    token: str
    p_before: float
    p_after: float


@dataclass(frozen=True)
class ShapeRow:
    """One tensor of the step: its name, its shape, what the dims mean, and whether it was measured."""

    tensor: str
    shape: tuple[int, ...]
    dims: str  # e.g. "[batch, pos, d_model]"
    source: str  # "measured" (read off a real tensor) or "derived" (computed from the config)


@dataclass(frozen=True)
class StepTrace:
    """Everything one forward pass did, as the UI and the JSON export see it."""

    phase: str  # "prefill" or "decode"
    step: int  # 0 for prefill, then 1, 2, ...
    use_cache: bool
    fed_ids: tuple[int, ...]  # tokens fed to this forward pass
    fed_tokens: tuple[str, ...]
    q_len: int  # positions computed this step (prefill: s; decode: 1 with cache, n without)
    kv_len: int  # positions attended to
    token_id: int  # the token chosen after this step
    token: str
    rule: str  # how it was chosen
    top: tuple[Candidate, ...]
    # attention weights [layer, head, row, kv_len] for the NEW rows only: prefill all s rows,
    # decode one row (even without the cache, where kv_len x kv_len were computed). None if too big.
    attention: torch.Tensor | None = field(repr=False, compare=False)
    attention_note: str
    kv_shapes: tuple[tuple[int, ...], ...]  # per layer: keys (and values) [batch, kv_head, pos, head_dim]
    kv_bytes_per_layer: tuple[int, ...]  # keys + values, measured numel * element_size
    kv_bytes: int
    shapes: tuple[ShapeRow, ...]
    forward_ms: float
    sample_ms: float
    warmup: bool  # True if this pass was the first on a freshly loaded model: excluded from medians
    flops_estimate: float
    bytes_estimate: float  # weights + KV read and written: an estimate, not a measurement

    @property
    def latency_ms(self) -> float:
        return self.forward_ms + self.sample_ms

    @property
    def intensity_estimate(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved, both estimates (high = compute-bound, low = memory-bound)."""
        return self.flops_estimate / self.bytes_estimate

    def to_dict(self, attention: bool = False) -> dict:
        """Plain JSON-ready dict; attention weights only when asked (they can be large)."""
        d = {
            "phase": self.phase, "step": self.step, "use_cache": self.use_cache,
            "fed_ids": list(self.fed_ids), "fed_tokens": list(self.fed_tokens),
            "q_len": self.q_len, "kv_len": self.kv_len,
            "token_id": self.token_id, "token": self.token, "rule": self.rule,
            "top": [c.__dict__ for c in self.top],
            "kv_shapes": [list(s) for s in self.kv_shapes],
            "kv_bytes_per_layer": list(self.kv_bytes_per_layer), "kv_bytes": self.kv_bytes,
            "shapes": [{"tensor": r.tensor, "shape": list(r.shape), "dims": r.dims, "source": r.source}
                       for r in self.shapes],
            "latency_ms": round(self.latency_ms, 4), "forward_ms": round(self.forward_ms, 4),
            "sample_ms": round(self.sample_ms, 4), "warmup": self.warmup,
            "flops_estimate": self.flops_estimate, "bytes_estimate": self.bytes_estimate,
            "attention_note": self.attention_note,
        }
        if attention and self.attention is not None:
            d["attention"] = self.attention.float().numpy().round(5).tolist()
        return d
