"""Every use of transformers that is not its public API, in one place, each named with what it is for.

transformers is pinned (requirements.txt); `WRITTEN_FOR` is the version this file was written against, and
tests/test_internals.py fails with a clear message when another one is installed, so an upgrade starts here.
Its public API (AutoModelForCausalLM, DynamicCache, StaticCache, Cache, GenerationConfig, ContinuousBatchingConfig,
the logits processors, AttentionInterface, AttentionMaskInterface, set_attn_implementation, generate,
generate_batch, transformers.utils.logging) is called where it is needed. What is not public:

  the attention a layer runs (engine/forward/capture.py)
    masking_utils.eager_mask              the mask function registered beside our attention: eager's own
    <modeling module>.eager_attention_forward
                                          a family's own eager attention, which ours calls (so every family's
                                          scaling and soft-capping stay transformers' own)
    <modeling module>.ALL_ATTENTION_FUNCTIONS
                                          present where a family dispatches its attention through the interface
    <attention module>.layer_idx          which layer is attending
    a 4D attention_mask                   passed through as the mask, unchanged (engine/forward/paged.py hands its
                                          layers a placeholder and masks each request itself)
    update(keys, values, layer_idx), get_seq_length(), is_compileable
                                          what a model's layers ask of its cache: paged.py's PagedPass stands in
                                          for one with these three
  the model and its config
    config._attn_implementation           the attention a model was loaded with
    model._supports_sdpa                  whether a family can run torch's SDPA (compiled.py's view)
    model._compiled_call                  set once generate has compiled the forward itself (compiled.time_recipe)
    cache_utils.get_layer_types_and_kwargs
                                          each layer's kind and sliding window, as transformers reads a config
  the static cache (physics/compiled.py)
    StaticCache.early_initialization      every layer's K/V allocated before any compiled region (a fixed address)
    StaticLayer.cumulative_length         where a layer writes next: a device tensor every update advances in
                                          place; set to rewind a step so it can be timed again
  cache layers of our own (topics/budget: evicting, quantized)
    cache_utils.DynamicLayer              their base: keys, values, device, dtype, is_initialized and
                                          lazy_initialization come from it; a subclass overrides update,
                                          get_seq_length, get_mask_sizes and crop
    <layer>.cumulative_length             positions a layer has seen, under transformers' own name:
                                          CacheLayerMixin.reset() zeroes an attribute of that name (`OwnLayer.seen`)
  continuous batching (topics/serving/reference.py)
    the "ContinuousBatchingLogger" logger, and generate_batch's request ids "req_<i>", in the order given
  the hub (engine/load/checks.py)
    utils.hub.cached_file and its _raise_exceptions_for_* keywords: a small file of a repository, or None
"""

from __future__ import annotations

import sys

import transformers
from transformers.cache_utils import DynamicLayer

from engine.pins import written_for_problem

WRITTEN_FOR = "5.23"  # transformers' major.minor
_eager_of: dict[type, object] = {}


def version_problem() -> str | None:
    """None when the installed transformers is the one this file was written against, else what to check."""
    return written_for_problem("transformers", transformers.__version__, WRITTEN_FOR,
                               "engine/transformers_internals.py")


# ---------------------------------------------------------------- the attention a layer runs


def register_attention(name: str, attention) -> None:
    """Make `name` a valid attn_implementation that runs `attention`, with eager's mask (idempotent)."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import eager_mask

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, eager_mask)


def eager_attention(module):
    """The eager attention function of the modeling file that defines this attention module."""
    fn = _eager_of.get(type(module))
    if fn is None:
        fn = _eager_of[type(module)] = sys.modules[type(module).__module__].eager_attention_forward
    return fn


def routes_attention(config) -> bool:
    """Does this config's model family route attention through the attention interface (and keep an eager one)?"""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        return False
    module = sys.modules.get(cls.__module__)
    return module is not None and all(hasattr(module, name) for name in ("eager_attention_forward",
                                                                        "ALL_ATTENTION_FUNCTIONS"))


def layer_index(module) -> int:
    """The index of the layer an attention module belongs to."""
    return module.layer_idx


# ---------------------------------------------------------------- the model and its config


def attn_implementation(config) -> str:
    """The attention a model was loaded with: "eager", "sdpa", or a registered name."""
    return config._attn_implementation


def supports_sdpa(model) -> bool:
    return bool(getattr(model, "_supports_sdpa", False))


def compiled_by_generate(model) -> bool:
    """generate compiled the model's forward itself (a static cache on a GPU)."""
    return getattr(model, "_compiled_call", None) is not None


def layer_kinds(config) -> tuple[list[str], list[dict]]:
    """Per layer: its kind ("full_attention", "sliding_attention", ...) and its keyword arguments (the window)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    kinds, kwargs = get_layer_types_and_kwargs(config)
    if isinstance(kwargs, dict):  # transformers < 5.2x returned one dict for every layer
        kwargs = [kwargs] * len(kinds)
    return list(kinds), list(kwargs)


# ---------------------------------------------------------------- the static cache


def allocate_static(cache, batch: int, kv_heads: int, head_dim: int, dtype, device) -> None:
    """Allocate every layer of a StaticCache now (it would on its first update, maybe inside a compiled region)."""
    cache.early_initialization(batch, kv_heads, head_dim, dtype, device)


def set_write_position(cache, pos: int) -> None:
    """Make every layer of a static cache write its next keys at `pos` (transformers 5.x keeps that position on
    each layer as a device tensor, `cumulative_length`, that every update advances in place, a captured graph's
    replays too; older versions wrote where `cache_position` said)."""
    import torch

    for layer in getattr(cache, "layers", ()):
        length = getattr(layer, "cumulative_length", None)
        if isinstance(length, torch.Tensor):
            length.fill_(pos)


# ---------------------------------------------------------------- cache layers of our own


class OwnLayer(DynamicLayer):
    """The base of a cache layer of our own: transformers' DynamicLayer (keys, values, device, dtype,
    is_initialized, lazy_initialization), with the positions it has seen kept under transformers' own name."""

    def __init__(self):
        super().__init__()
        self.cumulative_length = 0

    @property
    def seen(self) -> int:
        """Positions this layer has seen, the next one's position (held or not); transformers' reset() zeroes it."""
        return self.cumulative_length

    @seen.setter
    def seen(self, n: int) -> None:
        self.cumulative_length = n


# ---------------------------------------------------------------- continuous batching


BATCH_LOGGER = "ContinuousBatchingLogger"  # it logs that psutil is missing, on every call


def batch_tokens(out) -> list[list[int]]:
    """generate_batch's results (request id -> output), as each request's generated tokens in the order given."""
    by_index = sorted(out.values(), key=lambda o: int(o.request_id.rsplit("_", 1)[-1]))  # ids are req_0, req_1, ...
    return [list(o.generated_tokens) for o in by_index]


# ---------------------------------------------------------------- the hub


def hub_file(repo: str, name: str, local_only: bool) -> str | None:
    """A file of a hub repository, from the local cache (or downloaded unless local_only); None when absent."""
    from transformers.utils.hub import cached_file

    return cached_file(repo, name, local_files_only=local_only, _raise_exceptions_for_missing_entries=False,
                       _raise_exceptions_for_connection_errors=False, _raise_exceptions_for_gated_repo=False)
