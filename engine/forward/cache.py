"""The one place that knows how transformers lays out its KV cache.

transformers' cache API changed across 4.4x -> 5.x (`key_cache` lists are gone;
each layer is now `cache.layers[i]` with `.keys` and `.values`; `crop` takes a
negative count; sliding-window layers keep only their window). Everything else in
the engine asks this module, so the next change is a one-file fix.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from engine import transformers_internals

SLIDING_KINDS = ("sliding_attention", "chunked_attention", "hybrid_sliding")


def new_cache(config) -> DynamicCache:
    """An empty cache, one layer object per model layer (sliding-window layers keep only their window).

    Past recording is switched on, so a sliding layer can be rolled back after a pass
    (a repeated timing, a rejected speculative guess); `trim` drops the extra again.
    """
    cache = DynamicCache(config=config)
    cache.activate_past_recording()
    return cache


def layer_windows(config) -> tuple[int | None, ...]:
    """Per layer: None for full attention, else the sliding window (transformers' own reading of the config)."""
    kinds, kwargs = transformers_internals.layer_kinds(config.get_text_config(decoder=True))
    return tuple(kw.get("sliding_window") if kind in SLIDING_KINDS else None for kind, kw in zip(kinds, kwargs))


def kv_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """(keys, values) per layer, each [batch, kv_head, pos, head_dim]; None for a layer that holds nothing."""
    out = []
    for layer in getattr(cache, "layers", []):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        out.append((keys, values) if keys is not None and keys.numel() > 0 else None)
    return out


def layer_bytes(layer) -> int:
    """Bytes one layer holds, measured from its tensors (numel * element_size of keys and values); a layer that
    stores something else (a quantized one: codes, scales) counts its own tensors with `nbytes()`."""
    if hasattr(layer, "nbytes"):
        return int(layer.nbytes())
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if keys is None or keys.numel() == 0:
        return 0
    return keys.numel() * keys.element_size() + values.numel() * values.element_size()


def kv_length(cache) -> int:
    """Positions the cache has seen (0 for no cache); a sliding layer may hold fewer of them."""
    return 0 if cache is None else int(cache.get_seq_length())


def roll_back(cache, positions: int) -> None:
    """Forget the last `positions` positions of every layer (they were written by a pass we undo)."""
    if cache is not None and positions > 0:
        cache.crop(-positions)
    trim(cache)


def trim(cache) -> None:
    """Bring sliding-window layers back to their window after a pass (full layers are untouched)."""
    if cache is not None:
        cache.crop(0)
