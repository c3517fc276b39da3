"""The one place that knows how transformers lays out its KV cache.

transformers' cache API changed across 4.4x -> 5.x (`key_cache` lists are gone;
each layer is now `cache.layers[i]` with `.keys` and `.values`). Everything else in
the engine asks this module, so the next change is a one-file fix.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache(config) -> DynamicCache:
    """An empty cache that grows by one position per decode step."""
    return DynamicCache(config=config)


def kv_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each [batch, kv_head, pos, head_dim]; empty layers skipped."""
    out = []
    for layer in getattr(cache, "layers", []):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is not None and keys.numel() > 0:
            out.append((keys, values))
    return out


def kv_length(cache) -> int:
    """Positions held in the cache (0 for no cache)."""
    return 0 if cache is None else int(cache.get_seq_length())
