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

Which parameters a pass reads, and which it multiplies by (engine/forward/estimates.py counts them):

    matmul weights    every pass reads each once (the LM head included): the bulk of a decode step's bytes
    lookup tables     an untied input embedding and a learned position table (GPT-2's wpe): a pass reads
                      one row per fed token and multiplies by neither
    experts           a mixture of experts routes each token to experts_per_token of its experts: a token's
                      FLOPs and a one-token step's bytes count the ACTIVE parameters, not the total
    MLA (DeepSeek)    K heads are qk_nope + qk_rope wide (192), V heads v_head_dim (128); the cache holds
                      one latent of kv_lora_rank + qk_rope (576) per position per layer instead
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
    max_positions_set: bool = True  # False: the config names no limit and the app stops at DEFAULT_POSITIONS
    windows: tuple[int | None, ...] = ()  # per layer; () = every layer full
    mla_dim: int | None = None  # MLA latent width per token per layer (DeepSeek): K/V heads do not apply
    tied_embeddings: bool = True
    source: str = ""
    k_head_dim: int | None = None  # a K head's width where it is not head_dim (MLA: qk_nope + qk_rope = 192)
    v_head_dim: int | None = None  # a V head's width where it is not head_dim (MLA: v_head_dim = 128)
    position_table: int = 0  # parameters of a learned position table (GPT-2's wpe); 0 for RoPE and the like
    experts: int = 0  # routed experts per MoE layer (0: a dense model)
    experts_per_token: int = 0  # experts each token is routed to
    active_parameters: float | None = None  # parameters one token uses (MoE); None: every parameter (dense)

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

    @property
    def k_dim(self) -> int:
        """Width of one K head (and of a Q head: they are dotted together)."""
        return self.k_head_dim or self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    def kv_bytes_per_position(self, elem_bytes: float) -> float:
        """One layer, one position: K and V of every kv_head (or the MLA latent)."""
        if self.mla_dim:
            return self.mla_dim * elem_bytes
        return self.kv_heads * (self.k_dim + self.v_dim) * elem_bytes

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
    def lm_head_parameters(self) -> int:
        return self.vocab * self.d_model

    @property
    def lookup_parameters(self) -> int:
        """Tables a pass looks rows up in and never multiplies by: an untied input embedding (a tied one is also the
        LM head, a matmul read in full) and a learned position table."""
        return (0 if self.tied_embeddings else self.lm_head_parameters) + self.position_table

    @property
    def used_parameters(self) -> float:
        """Parameters one token uses: the active ones of a mixture of experts, every one of a dense model."""
        return self.parameters if self.active_parameters is None else self.active_parameters

    @property
    def expert_parameters(self) -> float:
        """All routed experts' parameters together (0 for a dense model), from the total and the active count:
        a token leaves (experts - experts_per_token) / experts of them unused."""
        if not self.experts or self.active_parameters is None or self.experts <= self.experts_per_token:
            return 0.0
        return (self.parameters - self.active_parameters) * self.experts / (self.experts - self.experts_per_token)

    @property
    def body_parameters(self) -> float:
        """Parameters one position multiplies by, without the LM head and the lookup tables (active ones for MoE)."""
        return max(0.0, self.used_parameters - self.lookup_parameters - self.lm_head_parameters)

    @property
    def attention_parameters(self) -> int:
        """Per layer: W_q, W_k, W_v and the output projection W_o."""
        return (self.d_model * self.heads * (self.k_dim + self.v_dim)
                + self.d_model * self.kv_heads * (self.k_dim + self.v_dim))

    @property
    def mlp_parameters(self) -> float:
        """Per layer, the rest of the block (MLP and norms): what the config's parameter count leaves."""
        return max(0.0, self.body_parameters / max(1, self.layers) - self.attention_parameters)


def from_config(config, name: str, parameters: float, source: str = "") -> ModelSpec:
    """A transformers config (the live model's, or one read from a folder or the hub)."""
    from engine.forward.cache import layer_windows

    heads = config.num_attention_heads
    d_model = config.hidden_size
    layers = config.num_hidden_layers
    mla = k_dim = v_dim = None
    if getattr(config, "kv_lora_rank", None):  # MLA: the real head widths, not the config's head_dim (= qk_rope)
        rope = getattr(config, "qk_rope_head_dim", 0) or 0
        mla = config.kv_lora_rank + rope
        k_dim = (getattr(config, "qk_nope_head_dim", 0) or 0) + rope or None
        v_dim = getattr(config, "v_head_dim", None)
    windows = layer_windows(config)
    experts, per_token, active = moe(config, parameters, d_model, layers)
    return ModelSpec(
        name=name,
        architecture=(getattr(config, "architectures", None) or [config.model_type])[0],
        layers=layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=k_dim or getattr(config, "head_dim", None) or d_model // heads,
        d_model=d_model,
        vocab=config.vocab_size,
        parameters=parameters,
        max_positions=max_positions(config),
        max_positions_set=bool(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)),
        windows=windows if any(w is not None for w in windows) else (),
        mla_dim=mla,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
        source=source,
        k_head_dim=k_dim,
        v_head_dim=v_dim,
        position_table=position_rows(config) * d_model,
        experts=experts,
        experts_per_token=per_token,
        active_parameters=active,
    )


DEFAULT_POSITIONS = 2048  # where the app stops a model whose config names no limit


def max_positions(config) -> int:
    return int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
               or DEFAULT_POSITIONS)


# model_type -> extra rows of its learned position table (OPT and BioGPT keep 2 more: their position ids start at 2)
LEARNED_POSITIONS = {"gpt2": 0, "gpt_bigcode": 0, "gpt_neo": 0, "opt": 2, "biogpt": 2}


def position_rows(config) -> int:
    """Rows of the family's learned position table (GPT-2's wpe: n_positions); 0 where positions are computed
    (RoPE, ALiBi, sinusoids)."""
    extra = LEARNED_POSITIONS.get(getattr(config, "model_type", None))
    return 0 if extra is None else max_positions(config) + extra


EXPERT_FIELDS = ("num_local_experts", "n_routed_experts", "num_experts")  # Mixtral; DeepSeek; Qwen MoE, OLMoE


def moe(config, parameters: float, d_model: int, layers: int) -> tuple[int, int, float | None]:
    """(experts, experts per token, active parameters) of a mixture of experts; (0, 0, None) for a dense model.

    Active = total - the experts a token does not use: each routed expert is a gated MLP of 3 x d_model x its
    width, in every MoE layer (DeepSeek keeps its first `first_k_dense_replace` layers dense). An estimate from
    the config: Mixtral-8x7B gives 12.9 B of 46.7 B, as Mistral AI states.
    """
    experts = next((int(v) for f in EXPERT_FIELDS if (v := getattr(config, f, None))), 0)
    per_token = int(getattr(config, "num_experts_per_tok", None) or 0)
    if experts <= 1 or not 0 < per_token < experts:
        return 0, 0, None
    width = getattr(config, "moe_intermediate_size", None) or getattr(config, "intermediate_size", None) or 0
    moe_layers = layers - int(getattr(config, "first_k_dense_replace", 0) or 0)
    unused = moe_layers * (experts - per_token) * 3 * d_model * width
    return experts, per_token, max(0.0, float(parameters) - unused)
