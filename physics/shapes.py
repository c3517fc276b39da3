"""Shapes from the world: a published model's configuration, built with random weights, for timing only.

A rung of the size ladder can be a real model's shape (`Llama-3-8B`: 32 layers x 4096, 8 KV heads of 128,
a 128 K vocabulary) rather than the loaded model's shape grown: a shape no model has measures a kernel mix no
one runs (a kernel profile of a 7 B model grown from the bundled one's head_dim 32 spent half its time in
small elementwise kernels). The figures come from assets/model_configs.csv (each row names its source); the
config is transformers' own class for the row's family (Llama, Qwen2, Phi3: built in, never remote code).

Whether the input embedding and the LM head share one matrix is not a column of the table: it is the choice
whose exact parameter count lies nearer the published one (SmolLM2-135M: 135 M tied, 163 M untied;
Llama-3-8B: 8.03 B untied, 7.50 B tied). Every shape is labelled with its model everywhere it is shown:
"Llama-3-8B's shape, random weights: timing only".
"""

from __future__ import annotations

import csv
import functools

from engine.errors import StepError
from engine.paths import ASSETS

# families transformers builds from a config alone (architecture in the table -> its config class)
FAMILIES = {"LlamaForCausalLM": "LlamaConfig", "Qwen2ForCausalLM": "Qwen2Config", "Phi3ForCausalLM": "Phi3Config",
            "MistralForCausalLM": "MistralConfig"}
# the shapes a ladder offers by name, smallest first (each a row of assets/model_configs.csv)
OFFERED = ("SmolLM2-135M", "SmolLM2-360M", "Qwen2.5-0.5B", "TinyLlama-1.1B", "SmolLM2-1.7B", "Phi-3-mini",
           "Qwen2.5-7B", "Llama-3-8B")


def weights_words(name: str) -> str:
    """How every rung of a real shape is labelled."""
    return f"{name}'s shape, random weights: timing only"


@functools.lru_cache(maxsize=1)
def _rows() -> dict[str, dict]:
    with open(ASSETS / "model_configs.csv", newline="", encoding="utf-8") as f:
        return {row["name"]: row for row in csv.DictReader(f)}


def is_shape(name: str) -> bool:
    """Is `name` a published model whose shape a rung can take (a row of a family transformers builds)?"""
    row = _rows().get(str(name).strip())
    return row is not None and row["architecture"] in FAMILIES


def lookup(name: str) -> str:
    """The table's spelling of a shape's name (case and spaces forgiven), or a StepError listing the offered ones."""
    want = str(name).strip().lower()
    for key in _rows():
        if key.lower() == want and is_shape(key):
            return key
    raise StepError(f"No published shape named {str(name)[:40]!r}: choose one of {', '.join(OFFERED)} "
                    "(or a parameter count such as 110M).")


def published_parameters(name: str) -> float:
    """The row's parameter count as published (params_billion), a count."""
    return float(_rows()[lookup(name)]["params_billion"]) * 1e9


def shape_config(name: str, min_positions: int = 0):
    """transformers' config of the row's family with the row's figures; the embeddings tied or not as the
    published parameter count says (see the module docstring)."""
    import transformers

    from engine.load.checks import estimate_parameters

    row = _rows()[lookup(name)]
    cls = getattr(transformers, FAMILIES[row["architecture"]])
    d, heads = int(row["d_model"]), int(row["num_attention_heads"])
    figures = dict(
        hidden_size=d, num_hidden_layers=int(row["num_layers"]), num_attention_heads=heads,
        num_key_value_heads=int(row["num_key_value_heads"] or heads), intermediate_size=int(row["intermediate_size"]),
        vocab_size=int(row["vocab_size"]),
        max_position_embeddings=max(int(row["max_position_embeddings"]), min_positions))
    head_dim = int(row["head_dim"] or d // heads)
    if head_dim != d // heads:
        figures["head_dim"] = head_dim
    if row["sliding_window"]:
        figures["sliding_window"] = int(row["sliding_window"])
    elif "sliding_window" in cls().to_dict():
        figures["sliding_window"] = None  # full attention everywhere, as the row says (Phi-3's default is 2047)
    published = published_parameters(name)
    best = None
    for tied in (True, False):
        config = cls(**figures, tie_word_embeddings=tied)
        config.architectures = [row["architecture"]]
        count = estimate_parameters(config)
        if best is None or abs(count - published) < abs(best[0] - published):
            best = (count, config)
    return best[1]
