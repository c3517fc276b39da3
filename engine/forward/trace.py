"""One small frozen record per forward pass.

Tensors in a trace are already detached, on the CPU and in float16, so a page
rerun never holds the GPU and a session's memory is easy to bound. Names follow
the shape vocabulary in engine/__init__.py; recorded tensors are named by where
they live in the model:

    blocks.{layer}.resid_in      [batch, pos, d_model]               the rows fed to the block
    blocks.{layer}.attn.q        [batch, head, query_pos, head_dim]  queries of the fed rows: used once, never kept
    blocks.{layer}.attn.k / .v   [batch, kv_head, pos, head_dim]     keys/values computed this pass (the fed rows)
    blocks.{layer}.kv.keys/.values [batch, kv_head, pos, head_dim]   what the layer's cache holds after the pass
    blocks.{layer}.attn.pattern  [batch, head, query_pos, key_pos]   softmax(q·kᵀ/√head_dim + mask)
    lm_head.logits               [batch, pos, vocab]                 only the last position's row is computed
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.forward.run import Timing


@dataclass(frozen=True)
class Candidate:
    """One of the most likely next tokens: its raw logit, and its probability before and after the warpers."""

    token_id: int
    token: str
    logit: float
    p_before: float
    p_after: float


@dataclass(frozen=True)
class ShapeRow:
    """One tensor of the step: where it lives, its shape, what the dims mean, and whether it was measured."""

    tensor: str  # e.g. "blocks.{0..3}.attn.q": the layers it stands for
    shape: tuple[int, ...]
    dims: str  # e.g. "[batch, head, query_pos, head_dim]"
    source: str  # "measured" (read off a real tensor) or "derived" (computed from the config)


DIMS = {
    "resid_in": "[batch, pos, d_model]",
    "attn.q": "[batch, head, query_pos, head_dim]",
    "attn.k": "[batch, kv_head, pos, head_dim]",
    "attn.v": "[batch, kv_head, pos, head_dim]",
    "kv.keys": "[batch, kv_head, pos, head_dim]",
    "kv.values": "[batch, kv_head, pos, head_dim]",
    "attn.pattern": "[batch, head, query_pos, key_pos]",
}


@dataclass(frozen=True)
class LayerTrace:
    """What one layer did in one forward pass. Layers differ: a sliding-window layer keeps and reads less."""

    layer: int
    window: int | None  # sliding window of this layer; None = it attends to every earlier position
    kv_len: int  # keys the newest query scored in this layer (kv_len of the step, capped by the window)
    cached: int  # positions this layer's cache holds after the pass (0 with the cache off)
    kv_bytes: int  # keys + values held, measured: numel * element_size
    shapes: dict = field(compare=False)  # "attn.q" -> shape, ... (see DIMS)
    measured: bool  # q/k/v shapes read off the real tensors (False: derived from the config)
    # attention weights [head, query_pos, key_pos] of the rows kept (see StepTrace.pattern_rows), over the
    # key positions key_start .. key_start + width - 1; None when too big to keep
    pattern: torch.Tensor | None = field(repr=False, compare=False)
    key_start: int = 0


@dataclass(frozen=True)
class StepTrace:
    """Everything one forward pass did, as the UI and the JSON export see it."""

    phase: str  # "prefill", "decode", or "verify" (a speculative pass checking k guesses: q_len = k + 1)
    step: int  # 0 for prefill, then 1, 2, ...
    use_cache: bool
    past: int  # positions already in the cache before this pass = the position of the first fed token
    fed_ids: tuple[int, ...]  # tokens fed to this forward pass
    fed_tokens: tuple[str, ...]
    q_len: int  # positions computed this step (prefill: s; decode: 1 with cache, n without)
    kv_len: int  # positions in the sequence after this pass's tokens: what a full layer's newest query scores
    token_id: int  # the token chosen after this step
    token: str
    rule: str  # how it was chosen
    top: tuple[Candidate, ...]
    layers: tuple[LayerTrace, ...]  # () when recording is off (benchmarks): nothing per layer is kept
    pattern_rows: int  # query rows kept per layer: the last `pattern_rows` of the fed rows
    attention_note: str
    hidden_shape: tuple[int, ...] | None  # blocks.*.resid_in
    logits_shape: tuple[int, ...]  # lm_head.logits
    timing: Timing
    flops_estimate: float
    bytes_estimate: float  # weights + KV read and written: an estimate, not a measurement

    # ------------------------------------------------------------ derived views

    @property
    def forward_ms(self) -> float:
        return self.timing.forward_ms

    @property
    def sample_ms(self) -> float:
        return self.timing.sample_ms

    @property
    def latency_ms(self) -> float:
        """Median forward time of the timed repeats + the time to choose the token."""
        return self.timing.forward_ms + self.timing.sample_ms

    @property
    def intensity_estimate(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved, both estimates (high = compute-bound, low = memory-bound)."""
        return self.flops_estimate / self.bytes_estimate

    @property
    def kv_bytes(self) -> int:
        return sum(layer.kv_bytes for layer in self.layers)

    @property
    def kv_bytes_per_layer(self) -> tuple[int, ...]:
        return tuple(layer.kv_bytes for layer in self.layers)

    @property
    def kv_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Per layer, keys (and values) held: [batch, kv_head, pos, head_dim]; () with the cache off."""
        return tuple(layer.shapes["kv.keys"] for layer in self.layers if "kv.keys" in layer.shapes)

    @property
    def recomputed(self) -> int:
        """Positions whose K and V were already known before this pass and were computed again (cache off)."""
        return 0 if self.use_cache or self.phase == "prefill" else self.q_len - 1

    @property
    def shapes(self) -> tuple[ShapeRow, ...]:
        """The step's tensors; layers with the same shape share a row (blocks.{0..3}.attn.q)."""
        rows = [ShapeRow("input_ids", (1, self.q_len), "[batch, pos]", "measured")]
        names = ["resid_in", "attn.q", "attn.k", "attn.v", "kv.keys", "kv.values", "attn.pattern"]
        for name in names:
            groups: list[tuple[list[int], tuple, bool]] = []
            for layer in self.layers:
                shape = layer.shapes.get(name)
                if shape is None:
                    continue
                if groups and groups[-1][1] == shape and groups[-1][2] == layer.measured \
                        and groups[-1][0][-1] == layer.layer - 1:
                    groups[-1][0].append(layer.layer)
                else:
                    groups.append(([layer.layer], shape, layer.measured))
            for ids, shape, measured in groups:
                where = f"{ids[0]}" if len(ids) == 1 else f"{{{ids[0]}..{ids[-1]}}}"
                source = "measured" if measured or name in ("resid_in", "kv.keys", "kv.values") else "derived"
                rows.append(ShapeRow(f"blocks.{where}.{name}", tuple(shape), DIMS[name], source))
        rows.append(ShapeRow("lm_head.logits", self.logits_shape, "[batch, pos, vocab]", "measured"))
        return tuple(rows)

    def to_dict(self, attention: bool = False) -> dict:
        """Plain JSON-ready dict; attention weights only when asked (they can be large)."""
        d = {
            "phase": self.phase, "step": self.step, "use_cache": self.use_cache,
            "past": self.past, "fed_ids": list(self.fed_ids), "fed_tokens": list(self.fed_tokens),
            "q_len": self.q_len, "kv_len": self.kv_len, "recomputed": self.recomputed,
            "token_id": self.token_id, "token": self.token, "rule": self.rule,
            "top": [c.__dict__ for c in self.top],
            "kv_shapes": [list(s) for s in self.kv_shapes],
            "kv_bytes_per_layer": list(self.kv_bytes_per_layer), "kv_bytes": self.kv_bytes,
            "layers": [{"layer": x.layer, "window": x.window, "kv_len": x.kv_len, "cached": x.cached,
                        "kv_bytes": x.kv_bytes, "key_start": x.key_start,
                        "shapes": {k: list(v) for k, v in x.shapes.items()},
                        "source": "measured" if x.measured else "derived"} for x in self.layers],
            "shapes": [{"tensor": r.tensor, "shape": list(r.shape), "dims": r.dims, "source": r.source}
                       for r in self.shapes],
            "latency_ms": round(self.latency_ms, 4), "forward_ms": round(self.forward_ms, 4),
            "forward_ms_samples": [round(x, 4) for x in self.timing.samples_ms],
            "warmup_ms": None if self.timing.warmup_ms is None else round(self.timing.warmup_ms, 4),
            "sample_ms": round(self.sample_ms, 4),
            "flops_estimate": self.flops_estimate, "bytes_estimate": self.bytes_estimate,
            "attention_note": self.attention_note,
        }
        if attention:
            d["attention"] = [None if x.pattern is None else x.pattern.float().numpy().round(5).tolist()
                              for x in self.layers]
        return d
