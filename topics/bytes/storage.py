"""The lean pass with its weights stored in fewer bytes: fp32, bf16, fp16, or int8 weight-only.

Each storage is the lean pass (engine.forward.lean) built over a converted copy of the rung's model, so the readable
model's Parameters are never changed (tests/test_bytes.py checks them). bf16 and fp16 store every weight, every
activation and the K/V cache in that dtype; the one-row products are the lean pass's streamed kernel, the prefill's
`F.linear`. int8 is weight-only, as gpt-fast's is: each matrix's rows stored as int8 with one bf16 scale per row
(symmetric, the row's largest magnitude over 127), activations and cache in bf16, every product torch's
`_weight_int8pack_mm` (the stock CPU kernel that reads int8 weights; it scales each output by its row's scale).

`read_bytes` counts what one decode step reads from the tensors the pass holds (numel * element_size): every
matrix, norm and scale, the output head, and one row of the embedding table.
"""

from __future__ import annotations

import copy

import torch

from engine.forward.lean import LeanLlama

STORAGES = ("fp32", "bf16", "fp16", "int8")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.bfloat16}
INT8_KERNEL = "torch._weight_int8pack_mm (int8 weights, one bf16 scale per row, bf16 activations)"
MATRICES = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")


class Int8Weight(torch.nn.Module):
    """A matrix [out, in] stored as int8 rows and a scale per row: w ≈ q * scale[:, None]."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        w = w.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        self.register_buffer("q", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))

    def dequantized(self) -> torch.Tensor:
        return self.q.float() * self.scale.float()[:, None]


class Int8Lean(LeanLlama):
    """The lean pass with int8 weight-only matrices (its products: `_weight_int8pack_mm`)."""

    def __init__(self, model, max_batch: int, max_len: int):
        super().__init__(model, max_batch, max_len, one_row_kernel=False)
        for name in MATRICES:
            setattr(self, name, torch.nn.ModuleList([Int8Weight(w) for w in getattr(self, name)]))
        head = self.lm_head
        del self.lm_head  # a Parameter's name: freed for the module
        self.lm_head = Int8Weight(head)
        self.kernel = INT8_KERNEL

    def linear(self, x: torch.Tensor, w) -> torch.Tensor:
        out = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), w.q, w.scale)
        return out.view(*x.shape[:-1], w.q.shape[0])


def converted(model, storage: str):
    """A copy of `model` in the storage's dtype (the readable model itself for fp32 when it is fp32 already)."""
    dtype = DTYPES[storage]
    if storage == "fp32" and next(model.parameters()).dtype == torch.float32:
        return model
    return copy.deepcopy(model).to(dtype)


def lean_pass(model, storage: str, max_len: int, one_row_kernel: bool = True) -> LeanLlama:
    """The lean pass over `model`'s weights stored as `storage` (a converted copy; the model is left as it is)."""
    copy_ = converted(model, storage)
    if storage == "int8":
        return Int8Lean(copy_, 1, max_len)
    return LeanLlama(copy_, 1, max_len, one_row_kernel=one_row_kernel)


def nbytes(t) -> int:
    if isinstance(t, Int8Weight):
        return nbytes(t.q) + nbytes(t.scale)
    return t.numel() * t.element_size()


def read_bytes(lean: LeanLlama) -> int:
    """Bytes one decode step reads from the weights, counted from the pass's own tensors (K/V apart)."""
    total = sum(nbytes(w) for name in MATRICES for w in getattr(lean, name))
    total += sum(nbytes(w) for w in (*lean.attn_norm, *lean.mlp_norm, lean.norm, lean.lm_head))
    return total + lean.embed[0].numel() * lean.embed.element_size()  # one row of the embedding table


def kv_bytes_per_token(lean: LeanLlama) -> int:
    """K and V bytes one position adds to the cache, counted from the cache's tensors (every layer)."""
    return sum(c[0, :, 0].numel() * c.element_size() for c in (*lean.k_cache, *lean.v_cache))


def weight_damage(model, storage: str):
    """A copy of `model` whose weights carry the storage's rounding, run in fp32 (the damage measured apart from
    the arithmetic): bf16/fp16 rounded and back; int8 every matrix (2-D weight, embeddings apart) per row."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        embeds = {id(m.weight) for m in out.modules() if isinstance(m, torch.nn.Embedding)}
        for p in out.parameters():
            if storage in ("bf16", "fp16"):
                p.copy_(p.to(DTYPES[storage]).float())
            elif storage == "int8" and p.dim() == 2 and id(p) not in embeds:
                p.copy_(Int8Weight(p).dequantized())
    return out
