"""One record of a model's figures: what the UI shows, what the estimates and the KV calculator need.

The same `ModelSpec` describes the live model (read from its config and weights), a row
of the published table (assets/model_configs.csv) and a config read from the hub or a
folder. Attention is per layer: `windows[layer]` is None for a layer that attends to
every earlier position, or the size of its sliding window (Mistral: every layer 4,096;
Gemma 2: every other layer; Gemma 3: five sliding layers to one full one).

How many positions a layer keeps, as transformers' DynamicCache keeps them:

    full layer:     every position so far                 kept(n) = n
    sliding layer:  the last window - 1 between steps     kept(n) = min(n, window - 1)
                    (the step's new position makes `window` keys to attend to)
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelSpec:
    """The figures of one model; counts are plain ints (`layers` counts, `layer` indexes)."""

    name: str
    architecture: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    d_model: int
    vocab: int
    parameters: float  # a count (an estimate for published rows)
    max_positions: int | None = None
    windows: tuple[int | None, ...] = ()  # per layer; () = every layer full
    mla_dim: int | None = None  # MLA latent width per token per layer (DeepSeek): K/V heads do not apply
    tied_embeddings: bool = True
    source: str = ""

    # ------------------------------------------------------------ attention kind

    @property
    def attention(self) -> str:
        """MHA (every head has its own K/V), GQA (groups share), MQA (one K/V head), MLA (a latent)."""
        if self.mla_dim:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def window(self, layer: int) -> int | None:
        return self.windows[layer] if self.windows else None

    @property
    def sliding_layers(self) -> int:
        return sum(w is not None for w in self.windows)

    def layer_pattern(self) -> str:
        """'every layer full', or e.g. '15 sliding (window 512) + 3 full'."""
        if not self.sliding_layers:
            return "every layer attends to every position"
        sizes = sorted({w for w in self.windows if w is not None})
        full = self.layers - self.sliding_layers
        return (f"{self.sliding_layers} sliding (window {', '.join(f'{w:,}' for w in sizes)})"
                + (f" + {full} full" if full else ", no full layer"))

    def as_mha(self) -> "ModelSpec":
        """The same model if every query head had its own K/V head (what GQA/MQA/MLA save against)."""
        return replace(self, name=f"{self.name} as MHA", kv_heads=self.heads, mla_dim=None)

    # ------------------------------------------------------------ KV cache

    def kept(self, layer: int, positions: int) -> int:
        """Positions layer `layer` holds in its cache after `positions` tokens (see the module docstring)."""
        w = self.window(layer)
        return positions if w is None else min(positions, w - 1)

    def span(self, layer: int, query_pos: int) -> int:
        """Keys the query at absolute position `query_pos` attends to in layer `layer` (itself included)."""
        w = self.window(layer)
        return query_pos + 1 if w is None else min(query_pos + 1, w)

    def kv_bytes_per_position(self, elem_bytes: float) -> float:
        """One layer, one position: K and V (or the MLA latent)."""
        if self.mla_dim:
            return self.mla_dim * elem_bytes
        return 2 * self.kv_heads * self.head_dim * elem_bytes

    def kv_bytes_per_layer(self, tokens: int, batch: int = 1, elem_bytes: float = 2.0) -> list[float]:
        return [self.kv_bytes_per_position(elem_bytes) * self.kept(layer, tokens) * batch
                for layer in range(self.layers)]

    def kv_bytes(self, tokens: int, batch: int = 1, elem_bytes: float = 2.0) -> float:
        return sum(self.kv_bytes_per_layer(tokens, batch, elem_bytes))

    def kv_bytes_per_token(self, elem_bytes: float) -> float:
        """What one more token adds while every layer still keeps every position (short contexts)."""
        return self.kv_bytes_per_position(elem_bytes) * self.layers

    # ------------------------------------------------------------ cost

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.d_model * (1 if self.tied_embeddings else 2)

    @property
    def body_parameters(self) -> float:
        """Parameters used in matmuls per position, without the embedding lookup and the LM head."""
        return max(0.0, self.parameters - self.embedding_parameters)

    @property
    def attention_parameters(self) -> int:
        """Per layer: W_q, W_k, W_v and the output projection W_o."""
        return 2 * self.d_model * self.heads * self.head_dim + 2 * self.d_model * self.kv_heads * self.head_dim

    @property
    def mlp_parameters(self) -> float:
        """Per layer, the rest of the block (MLP and norms): what the config's parameter count leaves."""
        return max(0.0, self.body_parameters / max(1, self.layers) - self.attention_parameters)


def from_config(config, name: str, parameters: float, source: str = "") -> ModelSpec:
    """A transformers config (the live model's, or one read from a folder or the hub)."""
    from engine.forward.cache import layer_windows

    heads = config.num_attention_heads
    d_model = config.hidden_size
    mla = None
    if getattr(config, "kv_lora_rank", None):
        mla = config.kv_lora_rank + getattr(config, "qk_rope_head_dim", 0)
    windows = layer_windows(config)
    return ModelSpec(
        name=name,
        architecture=(getattr(config, "architectures", None) or [config.model_type])[0],
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or d_model // heads,
        d_model=d_model,
        vocab=config.vocab_size,
        parameters=parameters,
        max_positions=max_positions(config),
        windows=windows if any(w is not None for w in windows) else (),
        mla_dim=mla,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
        source=source,
    )


def max_positions(config) -> int:
    return int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 2048)
