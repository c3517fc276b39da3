"""The lean pass with its weights stored in fewer bytes: fp32; bf16, fp16, int8 or int4 weight-only; a bf16 model.

The experiment changes the bytes and nothing else, so bf16, fp16, int8 and int4 are weight-only, as gpt-fast's and
torchao's are: the matrices (q, k, v, o, the MLP's three, the output head) are stored narrow, and the arithmetic,
the activations and the K/V cache stay fp32. On a CPU a one-row product is the lean pass's streamed kernel
(engine/forward/streamed.py) over the narrow matrix, each weight widened as it is read; on a GPU, int8's and int4's
are Triton kernels written for them (topics/bytes/gpu_kernels.py: what inductor and torch's int8 and int4 kernels
made of them read far below bf16's rate). A product over several rows widens the matrix, applies int8's scales, and
calls `F.linear` (int4 on a CPU: torch's int4 kernel). int8 stores each row rounded to 255 steps of its own scale
(symmetric: the row's largest magnitude over 127, one fp32 scale a row).

"bf16 model" is the other thing "bf16" means: the whole model cast (`model.to(torch.bfloat16)`, as loading it
with `torch_dtype=torch.bfloat16` does), weights, activations, cache and arithmetic. Its prefill runs bf16
arithmetic, which a CPU with bf16 dot products (AVX-512 BF16) does faster than fp32's: the arithmetic's rate
moves, not the bytes (topics/bytes/draw.py says which).

Each is built over a converted copy, so the readable model's Parameters are never changed (tests/test_bytes.py).
`read_bytes` counts what one decode step reads from the tensors the pass holds (numel * element_size): every
matrix, scale and norm, the output head, and one row of the embedding table.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from engine.forward import streamed
from engine.forward.lean import LeanLlama
from topics.bytes import gpu_kernels

STORAGES = ("fp32", "bf16", "fp16", "int8", "int4", "bf16 model")  # on a CPU: fp32 the reference, fp32 math
GPU_STORAGES = ("bf16 model", "int8", "int4")  # on a GPU: a bf16 model the reference, weight-only over it (bf16 math)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8, "int4": "int4",
          "bf16 model": torch.bfloat16}  # what a weight is stored as
GROUP, INNER_K_TILES = gpu_kernels.GROUP, 8  # int4: weights per scale and zero point along a row (gpt-fast's), the kernel's tiling
MATRICES = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")


class NarrowWeight(torch.nn.Module):
    """A matrix [out, in] stored in fewer bytes, multiplied in its input's dtype (weight-only): `q` in bf16 or
    fp16, or int8 rows with a `scale` each (w ≈ q * scale[:, None]). int4 is Int4Weight (`narrow` picks).
    `triton`: one row's int8 product is the Triton kernel (topics/bytes/gpu_kernels.py), as on a GPU."""

    def __init__(self, w: torch.Tensor, dtype: torch.dtype, triton: bool = False):
        super().__init__()
        w, model_dtype = w.detach().float(), w.dtype
        scale = None
        if dtype == torch.int8:
            scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
            w = torch.round(w / scale[:, None]).clamp(-127, 127)
        self.register_buffer("q", w.to(dtype))
        self.register_buffer("scale", None if scale is None else scale.to(model_dtype))  # the activations' dtype
        self.triton = triton and scale is not None
        # one row streamed on a CPU, and int8's on a GPU without Triton; bf16's or fp16's on a GPU: F.linear
        self.streamed = not self.triton and (w.device.type == "cpu" or scale is not None)
        one = ("a Triton kernel written for int8 (topics/bytes/gpu_kernels.py)" if self.triton else
               "the streamed dot product, each weight widened as it is read" if self.streamed else None)
        rows = "the matrix widened" + (", its scales applied" if scale is not None else "") + ", then F.linear"
        self.kernel = f"one row: {one}; several rows: {rows}" if one else rows

    def dequantized(self) -> torch.Tensor:
        return self.q.float() * (1.0 if self.scale is None else self.scale.float()[:, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[:-1].numel() == 1 and self.triton:
            return gpu_kernels.int8_rows(x.reshape(-1), self.q, self.scale).view(*x.shape[:-1], -1)
        if x.shape[:-1].numel() == 1 and self.streamed:  # each weight widened as it is read
            y = streamed.rows_times(x, self.q)
            return y if self.scale is None else y * self.scale
        # several rows: the matrix widened, its scales applied before the product. gpt-fast's
        # `F.linear(x, q.to(x.dtype)) * scales` is a form inductor rewrites to torch's own int8 kernel
        # (`_weight_int8pack_mm`); on the H200 that read int8 weights at 1 TB/s and took 5.9 s for a 384-token
        # prefill (docs/measurements.md), so neither product here takes that form (tests/test_bytes.py).
        return F.linear(x, self.q.to(x.dtype) if self.scale is None else self.q.to(x.dtype) * self.scale[:, None])


class Int4Weight(torch.nn.Module):
    """int4 as gpt-fast stores it: each group of GROUP weights along a row in 16 steps from its least value
    (w ≈ (q - 8) * scale + zero), two a byte. With `triton` (a GPU), packed for the Triton kernel
    (gpu_kernels.pack_int4), which multiplies one row; several rows widen the matrix to x's dtype, then F.linear.
    Else packed for torch's int4 kernel (`_weight_int4pack_mm_for_cpu` on a CPU, tinygemm's `_weight_int4pack_mm`
    on a GPU): its inputs rounded to bf16 for this product alone, the kernel's one fast input dtype. It holds the
    packed bytes and the scales and zeros only."""

    def __init__(self, w: torch.Tensor, triton: bool = False):
        super().__init__()
        steps, scale = int4_groups(w)
        self.triton = triton
        if triton:
            q = gpu_kernels.pack_int4(steps)
        elif w.device.type == "cuda":  # two a byte, the even weight high (torchao's and gpt-fast's packing)
            q = torch.ops.aten._convert_weight_to_int4pack(
                (steps[:, ::2] << 4 | steps[:, 1::2]).to(torch.uint8).contiguous(), INNER_K_TILES)
        else:
            q = torch.ops.aten._convert_weight_to_int4pack_for_cpu(steps, INNER_K_TILES)
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)
        torchs = "_weight_int4pack_mm" + ("" if w.device.type == "cuda" else "_for_cpu")
        self.kernel = ("one row: a Triton kernel written for int4 (topics/bytes/gpu_kernels.py); several rows: the "
                       "matrix widened, then F.linear" if triton else f"torch's int4 kernel ({torchs}), bf16 inputs")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.triton and x.shape[:-1].numel() == 1:
            return gpu_kernels.int4_rows(x.reshape(-1), self.q, self.scale).view(*x.shape[:-1], -1)
        if self.triton:
            return F.linear(x, int4_widened(gpu_kernels.unpack_int4(self.q), self.scale, x.dtype))
        mm = (torch.ops.aten._weight_int4pack_mm if x.device.type == "cuda"
              else torch.ops.aten._weight_int4pack_mm_for_cpu)
        y = mm(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), self.q, GROUP, self.scale)
        return y.to(x.dtype).view(*x.shape[:-1], -1)


def int4_groups(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(steps [out, in], 0 … 15 as int32; each group's scale and zero, [in / GROUP, out, 2] in bf16)."""
    groups = w.detach().float().view(w.shape[0], -1, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    step = ((high - low) / 15).clamp(min=1e-12)
    steps = torch.round((groups - low[..., None]) / step[..., None]).clamp(0, 15).to(torch.int32).view(w.shape)
    return steps, torch.stack((step, low + 8 * step), -1).transpose(0, 1).contiguous().to(torch.bfloat16)


def rounded(w: torch.Tensor, storage: str) -> torch.Tensor:
    """What the storage keeps of `w`, back in fp32: the damage's weights and the tests' reference."""
    if storage != "int4":
        return NarrowWeight(w, DTYPES[storage]).dequantized()
    return int4_widened(*int4_groups(w))


def int4_widened(steps: torch.Tensor, scale_zero: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The matrix int4 keeps, [out, in] in `dtype`, from its steps and its groups' scales and zeros (int4_groups):
    (q - 8) * scale + zero, group by group."""
    scale, zero = scale_zero.to(dtype).transpose(0, 1).unbind(-1)  # [out, in / GROUP] each
    groups = steps.to(dtype).view(steps.shape[0], -1, GROUP) - 8
    return (groups * scale[..., None] + zero[..., None]).view(steps.shape)


def narrow(w: torch.Tensor, storage: str, triton: bool | None = None) -> torch.nn.Module:
    """`w` stored as the storage says: an Int4Weight for int4, else a NarrowWeight. `triton` (by default: on a GPU
    where Triton runs) multiplies one row by int8 or int4 with the kernels written for them (gpu_kernels.py)."""
    if triton is None:
        triton = gpu_kernels.why_not(w.device) is None
    return Int4Weight(w, triton) if storage == "int4" else NarrowWeight(w, DTYPES[storage], triton)


class WeightOnly(LeanLlama):
    """The lean pass over narrow matrices (NarrowWeight), everything else as the model's (fp32 on a CPU)."""

    def __init__(self, model, storage: str, max_len: int):
        super().__init__(model, 1, max_len)
        for name in MATRICES:
            setattr(self, name, torch.nn.ModuleList([narrow(w, storage) for w in getattr(self, name)]))
        head = self.lm_head
        del self.lm_head  # a Parameter's name: freed for the module
        self.lm_head = narrow(head, storage)
        self.kernel = f"weight-only {storage}, {arithmetic(self)} arithmetic: {self.lm_head.kernel}"

    def linear(self, x: torch.Tensor, w: NarrowWeight) -> torch.Tensor:
        return w(x)


def lean_pass(model, storage: str, max_len: int) -> LeanLlama:
    """The lean pass over `model`'s weights stored as `storage` (a converted copy; the model is left as it is)."""
    if storage in ("bf16", "fp16", "int8", "int4"):
        return WeightOnly(model, storage, max_len)  # holds the model's norms and table, converts its matrices
    if storage == "bf16 model" and next(model.parameters()).dtype != torch.bfloat16:
        model = copy.deepcopy(model).to(torch.bfloat16)
    elif storage == "fp32" and next(model.parameters()).dtype != torch.float32:
        model = copy.deepcopy(model).float()
    return LeanLlama(model, 1, max_len)


def for_device(device: torch.device) -> tuple[str, ...]:
    """The storages timed on this device, the reference first."""
    return GPU_STORAGES if device.type == "cuda" else STORAGES


def arithmetic(lean: LeanLlama) -> str:
    """The dtype a pass's arithmetic runs in: its activations' (the embedding table's)."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[lean.embed.dtype]


def nbytes(t) -> int:
    if isinstance(t, (NarrowWeight, Int4Weight)):  # what a pass reads
        return nbytes(t.q) + (0 if t.scale is None else nbytes(t.scale))
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
    """A copy of `model` as the storage runs it, against fp32: the weight-only storages' matrices (every 2-D
    weight but the embedding table) rounded and back, run in fp32; the bf16 model cast whole, run in bf16."""
    if storage == "bf16 model":
        return copy.deepcopy(model).to(torch.bfloat16)
    out = copy.deepcopy(model)
    with torch.no_grad():
        embeds = {id(m.weight) for m in out.modules() if isinstance(m, torch.nn.Embedding)}
        for p in out.parameters():
            if p.dim() == 2 and id(p) not in embeds:
                p.copy_(rounded(p, storage))
        head = out.get_output_embeddings()  # rounded as the pass stores it, untied from a shared input table
        head.weight = torch.nn.Parameter(rounded(head.weight, storage), requires_grad=False)
    return out
