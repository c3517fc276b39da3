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

A decode pass shared by B requests is estimated from these in physics/batched.py.
"""

from __future__ import annotations

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
