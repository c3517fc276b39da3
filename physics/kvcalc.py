"""KV-cache memory for real models, computed from their published figures.

    KV bytes = Σ over layers  2 (K and V) × kv_heads × head_dim × bytes per element × positions kept × batch

A full layer keeps every token; a sliding-window layer keeps only its window (engine.forward.spec
says exactly how many). Everything here is an *estimate* from a config, except where a
test checks it against the bytes the engine measured on the live model's real tensors.
MLA (DeepSeek-V3) caches one compressed latent per token per layer instead of K and V
per head: latent_dim × layers × bytes × tokens × batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from engine.forward.spec import ModelSpec
from engine.paths import ASSETS
from physics.units import human_bytes

KV_DTYPES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int4": 0.5}
MAX_TOKENS = 100_000_000  # a calculator input beyond this is a typo, not a context length
MAX_BATCH = 1_000_000


def _table() -> pd.DataFrame:
    """The bundled table of published model figures (assets/model_configs.csv), read for `from_table`."""
    return pd.read_csv(ASSETS / "model_configs.csv")


def model_names() -> tuple[str, ...]:
    """The published models the bundled table has, in its order (each one `from_table` reads)."""
    return tuple(str(n) for n in _table()["name"])


@dataclass(frozen=True)
class Accelerator:
    """One card's datasheet figures (assets/accelerators.csv); None where the table has none."""

    name: str
    memory_gb: float | None
    bandwidth_gb_s: float | None
    peak_tflops_fp32: float | None
    peak_tflops_bf16: float | None  # dense fp16/bf16 tensor peak (no sparsity)

    @property
    def has_roof(self) -> bool:
        """A bandwidth and a peak: a roofline can be drawn from it (roofline.from_datasheet)."""
        return self.bandwidth_gb_s is not None and (self.peak_tflops_bf16 or self.peak_tflops_fp32) is not None


def _num(value) -> float | None:
    return None if pd.isna(value) else float(value)


def accelerators() -> tuple[Accelerator, ...]:
    """Every card of the bundled datasheet table, in its order."""
    return tuple(Accelerator(name=str(r["name"]), memory_gb=_num(r["memory_gb"]),
                             bandwidth_gb_s=_num(r["memory_bandwidth_gb_s"]),
                             peak_tflops_fp32=_num(r["peak_tflops_fp32"]),
                             peak_tflops_bf16=_num(r["peak_tflops_fp16_bf16_dense"]))
                 for r in pd.read_csv(ASSETS / "accelerators.csv").to_dict("records"))


def accelerator(name: str) -> Accelerator:
    """One card by its name in the table ('NVIDIA H100 SXM')."""
    found = next((a for a in accelerators() if a.name == name), None)
    if found is None:
        raise KeyError(f"'{name}' is not in the accelerators table")
    return found


def _int(value) -> int | None:
    return None if pd.isna(value) else int(value)


GATED = ("Llama", "Mistral", "Qwen2", "Qwen3", "Gemma", "Phi3")  # blocks with q, k, v, o and a gated MLP (3 matrices)
SHAPE_WITHIN = 0.05  # a count from the shapes this far from the published figure: the formula missed the family


def shape_parameters(r) -> float | None:
    """A dense row's parameters counted from its config's shapes (the embedding, the LM head unless tied, and each
    layer's q, k, v, o, a gated MLP's three matrices and two norms): Llama-3-70B has 70.55 B, not the nominal 70.0.
    None for a row the formula does not describe (experts, MLA, another MLP), or whose count strays from the
    published one by more than SHAPE_WITHIN."""
    if not str(r["architecture"]).startswith(GATED) or _int(r["experts"]) or _int(r["mla_kv_dim"]) \
            or pd.isna(r["intermediate_size"]):
        return None
    d, heads, layers = int(r["d_model"]), int(r["num_attention_heads"]), int(r["num_layers"])
    kv = _int(r["num_key_value_heads"]) or heads
    hd = _int(r["head_dim"]) or d // heads
    ff, vocab = int(r["intermediate_size"]), int(r["vocab_size"])
    tied = str(r["tie_word_embeddings"]).lower() != "false"
    per_layer = d * heads * hd * 2 + d * kv * hd * 2 + 3 * d * ff + 2 * d
    count = float(vocab * d * (1 if tied else 2) + layers * per_layer + d)
    published = float(r["params_billion"]) * 1e9
    return count if abs(count / published - 1) <= SHAPE_WITHIN else None


def from_table(name: str) -> ModelSpec:
    rows = _table()
    row = rows[rows["name"].str.lower() == name.lower()]
    if row.empty:
        raise KeyError(f"'{name}' is not in the table; known: {', '.join(rows['name'])}")
    r = row.iloc[0]
    heads, layers, d_model = int(r["num_attention_heads"]), int(r["num_layers"]), int(r["d_model"])
    window, full_every = _int(r["sliding_window"]), _int(r["full_every"])
    windows: tuple = ()
    if window:  # full_every k: every k-th layer is full, the rest slide; 0: every layer slides
        windows = tuple(None if full_every and (i + 1) % full_every == 0 else window for i in range(layers))
    rope = _int(r["qk_rope_head_dim"]) or 0  # MLA (DeepSeek): K heads are qk_nope + qk_rope wide, V heads v_head_dim
    k_dim = (_int(r["qk_nope_head_dim"]) or 0) + rope or None
    active = r["active_params_billion"]
    return ModelSpec(
        name=r["name"], architecture=r["architecture"], layers=layers, heads=heads,
        kv_heads=_int(r["num_key_value_heads"]) or heads,
        head_dim=k_dim or _int(r["head_dim"]) or d_model // heads, d_model=d_model,
        vocab=int(r["vocab_size"]), parameters=float(r["params_billion"]) * 1e9,
        max_positions=_int(r["max_position_embeddings"]), windows=windows, mla_dim=_int(r["mla_kv_dim"]),
        tied_embeddings=str(r["tie_word_embeddings"]).lower() != "false", source=str(r["source"]),
        k_head_dim=k_dim, v_head_dim=_int(r["v_head_dim"]),
        position_table=(_int(r["position_table_rows"]) or 0) * d_model,
        experts=_int(r["experts"]) or 0, experts_per_token=_int(r["experts_per_token"]) or 0,
        active_parameters=None if pd.isna(active) else float(active) * 1e9,
    )


def from_live(lm) -> ModelSpec:
    """The live model (a LoadedModel), named as the sidebar names it."""
    return replace(lm.spec, source="live model (its config and weights)")


def from_source(source: str) -> ModelSpec:
    """A Hugging Face id or local folder: its config only, never its weights."""
    from engine.forward.spec import from_config
    from engine.load.checks import check_causal_lm, estimate_parameters, parameter_bound
    from engine.load.load import read_config

    cfg = read_config(source)  # checks the figures: a config of 20,000 layers never gets further
    check_causal_lm(cfg, source)
    text = cfg.get_text_config(decoder=True)
    try:
        params = float(estimate_parameters(text)) if parameter_bound(text) < 2e11 else float(parameter_bound(text))
    except Exception:  # noqa: BLE001 - an exotic config: the KV figures still stand
        params = float(parameter_bound(text))
    return from_config(text, source, params, f"config.json of {source}")


def check_inputs(tokens, batch) -> None:
    """Refuse figures no model has: negative, zero or absurd token counts and batches."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
        raise ValueError(f"tokens must be a whole number from 1 to {MAX_TOKENS:,} (got {tokens!r})")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be a whole number from 1 to {MAX_BATCH:,} (got {batch!r})")


def formula(a: ModelSpec, tokens: int, batch: int, elem_bytes: float) -> str:
    """The formula with this model's numbers substituted, one term per kind of layer."""
    total = a.kv_bytes(tokens, batch, elem_bytes)
    if a.mla_dim:
        return (f"latent {a.mla_dim} × layers {a.layers} × {elem_bytes:g} B × tokens {tokens:,} × batch {batch} "
                f"= {total:,.0f} B ({human_bytes(total)})  [MLA: one compressed latent per token per layer]")
    head = f"kv_heads {a.kv_heads} × head_dim {a.head_dim} × {elem_bytes:g} B"
    groups: dict[int | None, int] = {}
    for layer in range(a.layers):
        groups[a.window(layer)] = groups.get(a.window(layer), 0) + 1
    terms = []
    for window, count in groups.items():
        kept = tokens if window is None else min(tokens, window - 1)
        what = f"tokens {tokens:,}" if window is None else f"kept {kept:,} (window {window:,} − 1)"
        terms.append(f"2 × {count} {'full' if window is None else 'sliding'} layers × {head} × {what}")
    if len(terms) == 1 and None in groups:
        terms = [f"2 × layers {a.layers} × {head} × tokens {tokens:,}"]
    return " + ".join(terms) + f" × batch {batch} = {total:,.0f} B ({human_bytes(total)})"


def counted_parameters(a: ModelSpec) -> float:
    """The parameters a model's weights hold: counted from its table row's shapes where the row has them
    (`shape_parameters`), else the spec's own figure (a live model's count, a config's estimate)."""
    rows = _table()
    row = rows[rows["name"] == a.name]
    counted = shape_parameters(row.iloc[0]) if not row.empty else None
    return counted if counted and a.parameters == float(row.iloc[0]["params_billion"]) * 1e9 else a.parameters


def weight_bytes(a: ModelSpec, elem_bytes: float) -> float:
    """The weights' bytes resident in memory: every parameter, counted from the shapes where the table has them."""
    return counted_parameters(a) * elem_bytes


@dataclass(frozen=True)
class Fit:
    """What fits beside a model's resident weights in one accelerator's memory (estimates from the config)."""

    free_for_kv: float  # bytes left once the weights are in (negative: the weights alone do not fit)
    max_batch: int  # sequences of the asked-for length whose caches fit
    max_tokens_batch1: int  # the longest context whose cache fits, at batch 1
    context_limit: int | None  # the model's max_position_embeddings: more is memory arithmetic only


@dataclass(frozen=True)
class Cards:
    """Enough accelerators for a model's weights plus one for the caches (estimates; activations not counted)."""

    weights: float  # bytes of the weights
    cards: int
    card_bytes: float  # memory of one card
    max_batch: int  # sequences of the asked-for length whose caches fit beside the weights
    per_sequence: float  # KV bytes of one such sequence


def largest_fit(a: ModelSpec, memory_bytes: float, weight_elem: float, kv_elem: float, tokens: int) -> Fit:
    """With the weights resident, the largest batch at `tokens`, and the longest context at batch 1."""
    free = memory_bytes - weight_bytes(a, weight_elem)
    per_seq = a.kv_bytes(tokens, 1, kv_elem)
    max_tokens = 0
    if free > 0:  # the longest context whose cache fits: search, since sliding layers stop growing
        lo, hi = 0, MAX_TOKENS
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if a.kv_bytes(mid, 1, kv_elem) <= free else (lo, mid - 1)
        max_tokens = lo
    return Fit(free, int(free // per_seq) if free > 0 and per_seq > 0 else 0, max_tokens, a.max_positions)


def context_note(a: ModelSpec, tokens: int) -> str | None:
    """A plain warning when `tokens` is more than the model can read (its max_position_embeddings), else None."""
    if a.max_positions and tokens > a.max_positions:
        return (f"{a.name} reads at most {a.max_positions:,} positions (its max_position_embeddings): a context of "
                f"{tokens:,} tokens is memory arithmetic only, the model cannot use it. The KV bytes shown are what "
                "such a cache would take.")
    return None


def cards_for(a: ModelSpec, tokens: int, card_bytes: float = 80e9, elem_bytes: float = 2.0) -> Cards:
    """Accelerators of `card_bytes` each: enough for the weights plus one for the caches, and how many
    sequences of `tokens` then fit beside the weights (estimates; activations not counted)."""
    weights = weight_bytes(a, elem_bytes)
    cards = int(-(-weights // card_bytes)) + 1
    fit = largest_fit(a, cards * card_bytes, elem_bytes, elem_bytes, tokens)
    return Cards(weights, cards, card_bytes, fit.max_batch, a.kv_bytes(tokens, 1, elem_bytes))


def formula_latex(a: ModelSpec, tokens: int, batch: int, elem_bytes: float) -> str:
    """The KV formula with a model's numbers substituted, as LaTeX: one product when every layer keeps every
    position, else the sum over layers (a sliding layer keeps only its window)."""
    total = f"{a.kv_bytes(tokens, batch, elem_bytes):,.0f}".replace(",", "{,}")  # LaTeX: braces around a comma
    if a.mla_dim:
        return (rf"{a.mla_dim} \times {a.layers}\ \text{{layers}} \times {elem_bytes:g}\,\text{{bytes}} \times "
                rf"{tokens} \times {batch} = {total}\ \text{{bytes}}")
    if not a.sliding_layers:
        return (rf"2 \times {batch} \times {a.kv_heads} \times {tokens} \times {a.head_dim} \times {elem_bytes:g}\,"
                rf"\text{{bytes}} \times {a.layers}\ \text{{layers}} = {total}\ \text{{bytes}}")
    return (rf"\sum_{{\text{{layer}}}} 2 \times {batch} \times {a.kv_heads} \times pos_{{\text{{kept}}}} \times "
            rf"{a.head_dim} \times {elem_bytes:g}\,\text{{bytes}} = {total}\ \text{{bytes}}")
