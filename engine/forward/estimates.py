"""FLOPs and bytes-moved *estimates* for one forward pass.

These are computed from the model's figures (engine.forward.spec.ModelSpec), not measured;
the UI labels them "estimate". Per layer, for q_len fed rows on top of `past` known
positions (a matmul of [m, k] by [k, n] costs 2·m·k·n FLOPs):

    Q = x·W_q        2 · q_len · d_model · head·head_dim
    K = x·W_k        2 · q_len · d_model · kv_head·head_dim     } only the fed rows: with the cache,
    V = x·W_v        2 · q_len · d_model · kv_head·head_dim     } old positions are never projected again
    scores = Q·Kᵀ    2 · head · head_dim · pairs               } pairs = the (query, key) pairs the mask
    out = softmax·V  2 · head · head_dim · pairs               } lets through: these grow with the context
    W_o              2 · q_len · head·head_dim · d_model
    MLP              2 · q_len · (the block's other parameters: the ACTIVE ones of a mixture of experts)
  + LM head          2 · d_model · vocab, for the one row whose logits are used

    bytes moved = every matmul weight read once + one row of each lookup table per fed token
                  + the cached K/V read + the new K/V written

A lookup table is an untied input embedding or a learned position table (GPT-2's wpe): a pass reads the
rows its tokens look up and multiplies by neither (Llama-3-8B's untied embedding is 1.05 GB; a decode step
reads one 8 KB row of it). A mixture of experts reads the experts its tokens are routed to: at one token,
experts_per_token of them (the active parameters); at many, nearly all (`experts_read`, uniform routing).

Batched decode (`batched_decode`): B requests each feed one token, and the pass reads its weights once for
all of them, so FLOPs grow with B and weight bytes do not: in bf16 the intensity is about B FLOP/byte
(2 FLOPs per weight per token over 2 bytes per weight) until the K/V reads, which grow with B too, weigh in.
The batch at which a pass reaches a device's ridge (`saturating_batch`) is where batching stops being free.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.forward.spec import ModelSpec


def pairs(spec: ModelSpec, layer: int, q_len: int, past: int) -> int:
    """Query-key pairs layer `layer` scores: each fed row at position p sees span(p) keys (causal, windowed)."""
    w = spec.window(layer)
    if w is None:  # closed form of the sum below, for speed on long contexts
        return q_len * past + q_len * (q_len + 1) // 2
    return sum(spec.span(layer, p) for p in range(past, past + q_len))


def attention_flops(spec: ModelSpec, q_len: int, past: int) -> float:
    """Q·Kᵀ and softmax·V over every layer: 2 · head · (K width + V width) per (query, key) pair."""
    return float(sum(2 * spec.heads * (spec.k_dim + spec.v_dim) * pairs(spec, layer, q_len, past)
                     for layer in range(spec.layers)))


def step_flops(spec: ModelSpec, q_len: int, past: int, logit_rows: int = 1) -> float:
    """Estimated FLOPs of a forward pass over q_len fed positions with `past` known ones."""
    body = 2 * spec.body_parameters * q_len
    return float(body + attention_flops(spec, q_len, past) + 2 * spec.d_model * spec.vocab * logit_rows)


def experts_read(spec: ModelSpec, tokens: int) -> float:
    """Share of a mixture's expert parameters a pass over `tokens` tokens reads: each token is routed to
    experts_per_token of `experts`; if routing were uniform, an expert is missed by all with probability
    (1 - k/E)^tokens. One token: k/E (the active parameters); hundreds: nearly all. 0 for a dense model."""
    if not spec.expert_parameters:
        return 0.0
    return 1.0 - (1.0 - spec.experts_per_token / spec.experts) ** tokens


def weights_read(spec: ModelSpec, tokens: int) -> float:
    """Parameters a pass over `tokens` fed tokens reads: every matmul weight once (LM head included), the experts
    its tokens are routed to, and one row of each lookup table per token (an untied input embedding, a learned
    position table), never the whole table."""
    dense = spec.parameters - spec.expert_parameters - spec.lookup_parameters
    rows = (0 if spec.tied_embeddings else min(tokens, spec.vocab)) * spec.d_model
    if spec.position_table:
        rows += min(tokens, spec.position_table // spec.d_model) * spec.d_model
    return float(dense + spec.expert_parameters * experts_read(spec, tokens) + rows)


def kv_moved(spec: ModelSpec, q_len: int, past: int, elem_bytes: float) -> float:
    """The cached K/V a pass reads and the new K/V it writes, every layer."""
    per_pos = spec.kv_bytes_per_position(elem_bytes)
    return float(sum(per_pos * (spec.kept(layer, past) + q_len) for layer in range(spec.layers)))


def step_bytes(spec: ModelSpec, q_len: int, past: int, elem_bytes: float) -> float:
    """Estimated bytes moved: the weights the pass reads (`weights_read`), the cached K/V read, the new K/V written."""
    return weights_read(spec, q_len) * elem_bytes + kv_moved(spec, q_len, past, elem_bytes)


def intensity(spec: ModelSpec, q_len: int, past: int, elem_bytes: float) -> float:
    """A pass's arithmetic intensity (FLOP/byte) in a given dtype: a prediction for a device that runs in it
    (a datacenter GPU: bf16, 2 bytes), not what this CPU in fp32 measured."""
    return step_flops(spec, q_len, past) / step_bytes(spec, q_len, past, elem_bytes)


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
