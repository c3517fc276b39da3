"""A decode pass shared by B requests, each feeding one token (estimates, from the core's per-pass estimates).

The pass reads its weights once for all of them, so FLOPs grow with B and weight bytes do not: in bf16 the
intensity is about B FLOP/byte (2 FLOPs per weight per token over 2 bytes per weight) until the K/V reads, which
grow with B too, weigh in. The batch at which a pass reaches a device's ridge is `saturating_batch`: one
intensity, as a roofline chart places the pass. Batching stops being free sooner, at `batch_knee`: the attention
reads each request's K/V in kernels apart from the products, and the two times add.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.forward.estimates import kv_moved, step_flops, weights_read
from engine.forward.spec import ModelSpec


@dataclass(frozen=True)
class BatchedDecode:
    """One decode pass for `batch` requests, each at `context` known positions, feeding one token each (estimates)."""

    batch: int
    context: int
    flops: float  # batch × a one-token step's FLOPs (each request: the body, its own attention, its LM-head row)
    weight_bytes: float  # the weights read once for all (`weights_read` of batch tokens)
    kv_bytes: float  # every request's own K/V

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """FLOPs / bytes: about batch FLOP/byte in bf16 while the weights dominate the bytes."""
        return self.flops / self.bytes


def batched_decode(spec: ModelSpec, batch: int, context: int, elem_bytes: float) -> BatchedDecode:
    """One decode pass for `batch` requests at `context` positions each (estimates): see `BatchedDecode`."""
    return BatchedDecode(batch=batch, context=context, flops=batch * step_flops(spec, 1, context),
                         weight_bytes=weights_read(spec, batch) * elem_bytes,
                         kv_bytes=batch * kv_moved(spec, 1, context, elem_bytes))


def weights_knee(weights: float, flops_each: float, more_each: float, ridge: float) -> float:
    """The batch n at which a decode step for n sequences stops being its weights' read (the Scale page's measured
    knee). The products read the weights once for all n and do n · flops_each of arithmetic; each sequence's
    attention reads its own K/V (more_each bytes) in kernels of its own, on the memory side at any n (a kv_head's
    few query heads share each K/V row read). Their times add: the flat stretch ends where
    n · (flops_each / peak + more_each / bandwidth) = weights / bandwidth, that is
    n = ridge · weights / (flops_each + ridge · more_each). The same bytes counted into one intensity
    (`saturating_batch`) suppose one kernel overlapping the K/V reads with the arithmetic: on an H200 that put
    Llama-3-8B's knee at ~377 sequences where it measured ~110 (docs/measurements.md)."""
    return ridge * weights / (flops_each + ridge * more_each)


def batch_knee(spec: ModelSpec, context: int, elem_bytes: float, ridge: float) -> float:
    """`weights_knee` for spec's decode at `context` positions a request (estimates)."""
    one = batched_decode(spec, 1, context, elem_bytes)
    return weights_knee(one.weight_bytes, one.flops, one.kv_bytes, ridge)


MAX_BATCH = 1 << 20


def saturating_batch(spec: ModelSpec, context: int, elem_bytes: float, ridge: float) -> int | None:
    """The smallest batch whose decode pass reaches `ridge` FLOP/byte (the compute side of a device's roofline);
    None when no batch does: at long contexts each request's K/V reads grow as fast as its FLOPs."""
    def reaches(b: int) -> bool:
        return batched_decode(spec, b, context, elem_bytes).intensity >= ridge

    hi = 1
    while not reaches(hi):  # intensity grows with the batch: double until it reaches the ridge, then bisect
        if hi >= MAX_BATCH:
            return None
        hi *= 2
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid + 1, hi)
    return hi
