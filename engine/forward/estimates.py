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
    MLP              2 · q_len · (the block's other parameters)
  + LM head          2 · d_model · vocab, for the one row whose logits are used

    bytes moved = every weight read once + the cached K/V read + the new K/V written
"""

from __future__ import annotations

from engine.forward.spec import ModelSpec


def pairs(spec: ModelSpec, layer: int, q_len: int, past: int) -> int:
    """Query-key pairs layer `layer` scores: each fed row at position p sees span(p) keys (causal, windowed)."""
    w = spec.window(layer)
    if w is None:  # closed form of the sum below, for speed on long contexts
        return q_len * past + q_len * (q_len + 1) // 2
    return sum(spec.span(layer, p) for p in range(past, past + q_len))


def matmuls(spec: ModelSpec, q_len: int, past: int, layer: int = 0) -> list[dict]:
    """The attention's five matmuls, W_o and the MLP of one layer, with shapes and FLOPs (estimates)."""
    d, h, kvh, hd = spec.d_model, spec.heads, spec.kv_heads, spec.head_dim
    n = pairs(spec, layer, q_len, past)
    keys = spec.span(layer, past + q_len - 1)
    return [
        {"op": "Q = x·W_q", "shape": f"[{q_len}, {d}] × [{d}, {h * hd}]", "flops": 2 * q_len * d * h * hd,
         "grows": "fed rows"},
        {"op": "K = x·W_k", "shape": f"[{q_len}, {d}] × [{d}, {kvh * hd}]", "flops": 2 * q_len * d * kvh * hd,
         "grows": "fed rows"},
        {"op": "V = x·W_v", "shape": f"[{q_len}, {d}] × [{d}, {kvh * hd}]", "flops": 2 * q_len * d * kvh * hd,
         "grows": "fed rows"},
        {"op": "scores = Q·Kᵀ", "shape": f"{h} heads × [{q_len}, {hd}] × [{hd}, {keys}]", "flops": 2 * h * hd * n,
         "grows": "context"},
        {"op": "out = softmax·V", "shape": f"{h} heads × [{q_len}, {keys}] × [{keys}, {hd}]", "flops": 2 * h * hd * n,
         "grows": "context"},
        {"op": "x·W_o", "shape": f"[{q_len}, {h * hd}] × [{h * hd}, {d}]", "flops": 2 * q_len * h * hd * d,
         "grows": "fed rows"},
        {"op": "MLP", "shape": f"[{q_len}, {d}] through {spec.mlp_parameters:,.0f} params",
         "flops": 2 * q_len * spec.mlp_parameters, "grows": "fed rows"},
    ]


def step_flops(spec: ModelSpec, q_len: int, past: int, logit_rows: int = 1) -> float:
    """Estimated FLOPs of a forward pass over q_len fed positions with `past` known ones."""
    body = 2 * spec.body_parameters * q_len
    attention = sum(4 * spec.heads * spec.head_dim * pairs(spec, layer, q_len, past) for layer in range(spec.layers))
    return float(body + attention + 2 * spec.d_model * spec.vocab * logit_rows)


def step_bytes(spec: ModelSpec, q_len: int, past: int, elem_bytes: float) -> float:
    """Estimated bytes moved: all weights once, the cached K/V read, the new K/V written."""
    per_pos = spec.kv_bytes_per_position(elem_bytes)
    kv = sum(per_pos * (spec.kept(layer, past) + q_len) for layer in range(spec.layers))
    return float(spec.parameters * elem_bytes + kv)
