"""KV-cache memory for real models, computed from their published figures.

    KV bytes = 2 (K and V) x layers x kv_heads x head_dim x bytes per element x tokens x batch

Everything here is an *estimate* from a config, except where a test checks it
against the bytes the engine measured on the live model's real tensors.
MLA (DeepSeek-V3) caches one compressed latent per token per layer instead of
K and V per head: latent_dim x layers x bytes x tokens x batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from engine.figures import _layout

ASSETS = Path(__file__).resolve().parent.parent / "assets"
KV_DTYPES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class Arch:
    """The figures KV size and weight memory depend on."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    parameters: float  # count (may be an estimate from a published figure)
    max_positions: int | None = None
    mla_dim: int | None = None  # MLA latent width per token per layer (DeepSeek): K/V heads do not apply
    source: str = ""

    @property
    def attention(self) -> str:
        if self.mla_dim:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def as_mha(self) -> "Arch":
        """The same model if every query head had its own K/V head (what GQA/MQA/MLA save against)."""
        return replace(self, name=f"{self.name} as MHA", kv_heads=self.heads, mla_dim=None)


def table() -> pd.DataFrame:
    """The bundled table of published model figures (with its source column)."""
    return pd.read_csv(ASSETS / "model_configs.csv")


def accelerators() -> pd.DataFrame:
    return pd.read_csv(ASSETS / "accelerators.csv")


def from_table(name: str) -> Arch:
    rows = table()
    row = rows[rows["name"].str.lower() == name.lower()]
    if row.empty:
        raise KeyError(f"'{name}' is not in the table; known: {', '.join(rows['name'])}")
    r = row.iloc[0]
    heads = int(r["num_attention_heads"])
    head_dim = int(r["head_dim"]) if pd.notna(r["head_dim"]) else int(r["d_model"]) // heads
    return Arch(name=r["name"], layers=int(r["num_layers"]), heads=heads,
                kv_heads=int(r["num_key_value_heads"]) if pd.notna(r["num_key_value_heads"]) else heads,
                head_dim=head_dim, parameters=float(r["params_billion"]) * 1e9,
                max_positions=int(r["max_position_embeddings"]) if pd.notna(r["max_position_embeddings"]) else None,
                mla_dim=int(r["mla_kv_dim"]) if pd.notna(r["mla_kv_dim"]) else None, source=str(r["source"]))


def from_summary(summary) -> Arch:
    """The live model (an engine ModelSummary)."""
    return Arch(name=summary.source, layers=summary.layers, heads=summary.heads, kv_heads=summary.kv_heads,
                head_dim=summary.head_dim, parameters=summary.parameters, max_positions=summary.max_positions,
                source="live model (its config and weights)")


def from_config(source: str) -> Arch:
    """A Hugging Face id or local folder: its config only, never its weights."""
    from engine.loading import estimate_parameters, max_positions, read_config

    cfg = read_config(source)
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    mla = None
    if getattr(cfg, "kv_lora_rank", None):
        mla = cfg.kv_lora_rank + getattr(cfg, "qk_rope_head_dim", 0)
    try:
        params = float(estimate_parameters(cfg))
    except Exception:  # noqa: BLE001 - an exotic config: the KV figures still stand
        params = 0.0
    return Arch(name=source, layers=cfg.num_hidden_layers, heads=heads, kv_heads=kv,
                head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, parameters=params,
                max_positions=max_positions(cfg), mla_dim=mla, source=f"config.json of {source}")


def resolve(name_or_source: str) -> Arch:
    """A table name first, then a bundled model / hub id / folder (config only)."""
    try:
        return from_table(name_or_source)
    except KeyError:
        return from_config(name_or_source)


def bytes_per_token(a: Arch, elem_bytes: float) -> float:
    if a.mla_dim:
        return a.layers * a.mla_dim * elem_bytes
    return 2 * a.layers * a.kv_heads * a.head_dim * elem_bytes


def kv_bytes(a: Arch, tokens: int, batch: int = 1, elem_bytes: float = 2.0) -> float:
    return bytes_per_token(a, elem_bytes) * tokens * batch


def formula(a: Arch, tokens: int, batch: int, elem_bytes: float) -> str:
    """The formula with this model's numbers substituted."""
    total = kv_bytes(a, tokens, batch, elem_bytes)
    if a.mla_dim:
        return (f"latent {a.mla_dim} × layers {a.layers} × {elem_bytes:g} B × tokens {tokens:,} × batch {batch} "
                f"= {total:,.0f} B ({human(total)})  [MLA: one compressed latent per token per layer]")
    return (f"2 × layers {a.layers} × kv_heads {a.kv_heads} × head_dim {a.head_dim} × {elem_bytes:g} B × "
            f"tokens {tokens:,} × batch {batch} = {total:,.0f} B ({human(total)})")


def weight_bytes(a: Arch, elem_bytes: float) -> float:
    return a.parameters * elem_bytes


def largest_fit(a: Arch, memory_bytes: float, weight_elem: float, kv_elem: float, tokens: int) -> dict:
    """With the weights resident, the largest batch at `tokens`, and the longest context at batch 1."""
    free = memory_bytes - weight_bytes(a, weight_elem)
    per_seq = kv_bytes(a, tokens, 1, kv_elem)
    return {"free_for_kv": free,
            "max_batch": int(free // per_seq) if free > 0 and per_seq > 0 else 0,
            "max_tokens_batch1": int(free // bytes_per_token(a, kv_elem)) if free > 0 else 0}


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n:.1f}"


def growth_figure(archs: list[Arch], max_tokens: int, batch: int, elem_bytes: float) -> go.Figure:
    """KV bytes against context length, several models at once."""
    xs = [int(max_tokens * i / 50) for i in range(1, 51)]
    fig = go.Figure()
    for a in archs:
        fig.add_trace(go.Scatter(x=xs, y=[kv_bytes(a, x, batch, elem_bytes) / 2**30 for x in xs],
                                 name=f"{a.name} ({a.attention})", mode="lines", line=dict(width=3)))
    fig.update_xaxes(title="context length (tokens)")
    fig.update_yaxes(title=f"KV cache GiB (batch {batch}, estimate)", rangemode="tozero")
    return _layout(fig, "KV-cache size against context length", height=420)
