"""Read Q, K, V and the attention pattern off every layer while the model computes them.

transformers lets a model's attention layers call a registered attention function
instead of their own. We register one, `decode_lab`, that calls the layer's *own*
eager function (the one in its modeling file, so Gemma's soft-capping, GPT-2's scaling
and every family's quirks stay exactly as transformers wrote them) and, when a pass is
being recorded, keeps a reference to what went in and came out:

    q        [batch, head, query_pos, head_dim]     the queries of the fed positions (after RoPE)
    k, v     [batch, kv_head, key_pos, head_dim]    every key/value this pass scored: cache + new
    pattern  [batch, head, query_pos, key_pos]      softmax(q·kᵀ / √head_dim + mask)

Nothing is copied here; the stepper keeps what it needs. A model family whose
attention does not go through transformers' attention interface is loaded with plain
`eager` instead, and its Q/K/V shapes are then derived from the config (and labelled so).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

import torch

from engine import transformers_internals

IMPLEMENTATION = "decode_lab"
_active: ContextVar[list | None] = ContextVar("decode_lab_capture", default=None)
_paged: ContextVar = ContextVar("decode_lab_paged", default=None)  # engine.forward.paged: many requests, one pass
_observer: ContextVar = ContextVar("decode_lab_observer", default=None)  # a cache that scores positions by attention


@dataclass(frozen=True)
class Capture:
    """One attention layer's inputs and weights during one forward pass (references, not copies)."""

    layer: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    pattern: torch.Tensor


def _eager(module):
    """The layer's own eager attention function (its modeling file's)."""
    return transformers_internals.eager_attention(module)


def recording_attention(module, query, key, value, attention_mask, **kwargs):
    """The layer's own eager attention, plus a note of its tensors when a recording is active.

    In a paged pass (many requests laid end to end) each request's queries attend to its own keys only
    (engine.forward.paged.PagedPass.attend), inside this layer's sliding window if it has one.
    """
    paged = _paged.get()
    if paged is not None:
        return paged.attend(_eager(module), module, query, key, value, **kwargs)
    out, weights = _eager(module)(module, query, key, value, attention_mask, **kwargs)
    captures = _active.get()
    if captures is not None:
        captures.append(Capture(transformers_internals.layer_index(module), query, key, value, weights))
    observer = _observer.get()
    if observer is not None:  # after this layer's attention: an evicting cache scores and drops positions now
        observer(transformers_internals.layer_index(module), weights)
    return out, weights


class paged_pass:
    """`with paged_pass(p):` every attention layer of the passes inside attends request by request (p.attend)."""

    def __init__(self, p):
        self.p = p

    def __enter__(self):
        self._token = _paged.set(self.p)
        return self.p

    def __exit__(self, *exc) -> None:
        _paged.reset(self._token)


class recording:
    """`with recording() as captures:` every attention layer of the passes inside appends a Capture."""

    def __enter__(self) -> list[Capture]:
        self.captures: list[Capture] = []
        self._token = _active.set(self.captures)
        return self.captures

    def __exit__(self, *exc) -> None:
        _active.reset(self._token)


class observing:
    """`with observing(fn):` every attention layer of the passes inside calls fn(layer, weights) after attending.

    weights [batch, head, query_pos, key_pos]. An evicting cache (H2O's heavy hitters, SnapKV) scores the positions
    it holds by the attention they get; fn None observes nothing.
    """

    def __init__(self, fn):
        self.fn = fn

    def __enter__(self):
        self._token = _observer.set(self.fn)
        return self.fn

    def __exit__(self, *exc) -> None:
        _observer.reset(self._token)


def register() -> None:
    """Make `decode_lab` a valid attn_implementation (idempotent)."""
    transformers_internals.register_attention(IMPLEMENTATION, recording_attention)


def supports(config) -> bool:
    """Does this config's model family route attention through transformers' attention interface?"""
    return transformers_internals.routes_attention(config)
