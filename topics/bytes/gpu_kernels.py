"""A decode step's product over narrow weights on a GPU, written in Triton: one row times int8 or int4 matrices.

A decode step multiplies one row by every matrix, so halving the weights' bytes should halve its time, if the
product reads the narrow weights as fast as cuBLAS reads bf16's. On an H200 none of torch's paths
does (docs/measurements.md): inductor's compiled int8 product read 0.86 TB/s where bf16 read 1.8, torch's own
`_weight_int8pack_mm` 0.19, and torch's int4 kernel (tinygemm) 0.6. Engines write a kernel for it (gpt-fast's int4
is tinygemm; vLLM's and llama.cpp's are their own). These two are the plainest form of one: each program takes a
block of output rows, walks along them a tile at a time, widens each weight to fp32 as it is read, multiplies it by
x and keeps the sums; int8's row scale, or int4's group scale and zero, applied to the sums, not to every weight.

    int8_rows(x, q, scale)          y[n] = scale[n] · Σ_k q[n, k] · x[k]                (q int8 [N, K], a scale a row)
    int4_rows(x, packed, scale)     y[n] = Σ_g scale[g, n] · Σ_k∈g (q[n, k] − 8) · x[k] + zero[g, n] · Σ_k∈g x[k]

Each weight is widened to fp32 by its bits (BY_BITS): an integer u of 0 … 2²³ put in the mantissa of 2²³
(0x4B000000 | u, the float 2²³ + u), then 2²³ and the weight's offset taken off, exact. That is an integer `or`
and a float subtraction, which a GPU runs at full rate, where the integer-to-float conversion runs at a quarter of it
(16 a cycle an SM on an H100 or H200): with one conversion a weight, the kernels widened about 2.7 G weights a
millisecond on an H200, int8 and int4 alike (docs/measurements.md). by_bits=False keeps the conversion, to time
the two side by side (benchmarks/weight_only.py).

int4 packs two weights a byte within each group of GROUP: byte t of a group holds weight t (low four bits) and
weight t + GROUP/2 (high), so a tile of bytes is two contiguous halves of x (`pack_int4`). The scales and zeros are
the layout torch's int4 kernel takes ([K / GROUP, N, 2], bf16), so one quantization serves both.

Each is a torch custom op, so a compiled pass calls it inside its graph, CUDA graphs included. Triton runs where
torch's CUDA build ships it; on a CPU the same kernels run in Triton's interpreter (TRITON_INTERPRET=1), which is
how the tests check their arithmetic without a GPU (it has to be on before Triton is first imported:
tests/conftest.py). The block sizes on a GPU are fixed, as measured (BLOCKS); the interpreter's are smaller, so
the tests' small matrices still take several tiles a row.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace

import torch

GROUP = 128  # int4: weights per scale and zero along a row (gpt-fast's), as topics/bytes/storage.py quantizes

# Block sizes on a GPU, measured on an H200 (2026-11-30, docs/measurements.md): each kernel in a CUDA graph over 24
# matrices of Llama-3-8B's MLP shapes, [14,336 × 4,096] and [4,096 × 14,336] (past its 60 MB L2), at every size of a
# grid. The fastest: int8 8 rows a program, 512 columns a tile (1,024 where a row is 8,192 or longer), 2.5–2.7 TB/s;
# int4 8 rows, 16 groups a tile, 1.3 TB/s (cuBLAS's bf16 3.6–3.9). Triton's autotuner, which times one matrix its
# L2 holds, had picked int4 sizes ×1.12–1.27 slower, and compiled 18 sizes a shape in every run. (Swept with each
# weight converted, before BY_BITS: the fastest sizes by bits are not yet measured.)
BLOCKS = {"int8": dict(BLOCK_N=8, BLOCK_K=512, num_warps=4), "int4": dict(BLOCK_N=8, GROUPS=16, num_warps=4)}
LONG_ROW, LONG_BLOCK_K = 8192, 1024  # int8: rows of LONG_ROW weights or more take LONG_BLOCK_K columns a tile
INTERPRETER_BLOCKS = {"int8": dict(BLOCK_N=8, BLOCK_K=256), "int4": dict(BLOCK_N=8, GROUPS=2)}


def why_not(device: torch.device) -> str | None:
    """None when a pass on this device multiplies by the Triton kernels; otherwise why not, in words. (A CPU runs
    its own products; the interpreter, for the tests, is asked for by name.)"""
    if device.type != "cuda":
        return f"a {device.type} runs its own products"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (torch's CUDA builds ship it)"
    return None


def pack_int4(steps: torch.Tensor) -> torch.Tensor:
    """steps [N, K] (0 … 15) → [N, K / 2] uint8: in each group of GROUP, byte t holds weight t low, t + GROUP/2 high."""
    g = steps.to(torch.uint8).view(steps.shape[0], -1, 2, GROUP // 2)
    return (g[:, :, 0] | g[:, :, 1] << 4).view(steps.shape[0], -1)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """pack_int4's inverse: [N, K / 2] uint8 → steps [N, K] (0 … 15, uint8)."""
    g = packed.view(packed.shape[0], -1, GROUP // 2)
    return torch.stack((g & 15, g >> 4), 2).view(packed.shape[0], -1)


@torch.library.custom_op("decode_lab::int8_rows", mutates_args=())
def int8_rows(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, by_bits: bool = True) -> torch.Tensor:
    """x [K] (one row) times q [N, K] int8, each row times its scale [N]: y [N] in x's dtype. by_bits: each weight
    widened by its bits (`_kernels`), else by the conversion instruction (to time the two side by side)."""
    n, k = q.shape
    x, y = x.contiguous(), x.new_empty(n)
    b = blocks("int8", k)
    _kernels().int8[(-(-n // b["BLOCK_N"]),)](x, q, scale, y, n, k, BY_BITS=by_bits, **b)
    return y


@int8_rows.register_fake
def _(x, q, scale, by_bits=True):
    return x.new_empty(q.shape[0])


@torch.library.custom_op("decode_lab::int4_rows", mutates_args=())
def int4_rows(x: torch.Tensor, packed: torch.Tensor, scale_zero: torch.Tensor, by_bits: bool = True) -> torch.Tensor:
    """x [K] (one row) times the int4 matrix `packed` [N, K / 2] (pack_int4), its groups' scales and zeros
    [K / GROUP, N, 2]: y [N] in x's dtype. by_bits: as int8_rows'."""
    n, k = packed.shape[0], packed.shape[1] * 2
    x, y = x.contiguous(), x.new_empty(n)
    b = blocks("int4", k)
    _kernels().int4[(-(-n // b["BLOCK_N"]),)](x, packed, scale_zero, y, n, k, k // 2, GROUP=GROUP, BY_BITS=by_bits,
                                               **b)
    return y


@int4_rows.register_fake
def _(x, packed, scale_zero, by_bits=True):
    return x.new_empty(packed.shape[0])


def blocks(kernel: str, k: int) -> dict:
    """The block sizes (and warps) kernel "int8" or "int4" runs with over rows of k weights: BLOCKS on a GPU, the
    interpreter's smaller ones on a CPU."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return INTERPRETER_BLOCKS[kernel]
    return {**BLOCKS[kernel], "BLOCK_K": LONG_BLOCK_K} if kernel == "int8" and k >= LONG_ROW else BLOCKS[kernel]


def said() -> str:
    """The GPU's block sizes, in words (a recording's note)."""
    return (f"the narrow kernels' block sizes (measured, fixed): int8 {BLOCKS['int8']['BLOCK_N']} rows a program, "
            f"{BLOCKS['int8']['BLOCK_K']} columns a tile ({LONG_BLOCK_K:,} in rows of {LONG_ROW:,} or more); int4 "
            f"{BLOCKS['int4']['BLOCK_N']} rows, {BLOCKS['int4']['GROUPS']} groups of {GROUP} a tile")


def ptx_for(capability: int = 90, by_bits: bool = True) -> dict[str, str]:
    """Each kernel as Triton compiles it for a GPU of this compute capability (90: an H100 or H200), with no GPU
    here: its PTX, by name, at its GPU block sizes (BLOCKS), its pointers and sizes multiples of 16 as Triton's JIT
    marks them for such shapes; by_bits as int8_rows'. Needs Triton's interpreter off in this process (it changes
    what its language is made of)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernels = _kernels()
    sizes = {"N": "i32", "K": "i32"}  # at Llama-3-8B's shapes every size is a multiple of 16
    made = {"int8": ({"x": "*bf16", "q": "*i8", "scale": "*bf16", "y": "*bf16", **sizes}, {}),
            "int4": ({"x": "*bf16", "packed": "*u8", "scale_zero": "*bf16", "y": "*bf16", **sizes, "row_bytes": "i32"},
                     {"GROUP": GROUP})}
    out = {}
    for name, (signature, constants) in made.items():
        constants = {**constants, "BY_BITS": by_bits, **{k: v for k, v in BLOCKS[name].items() if k != "num_warps"}}
        source = ASTSource(fn=getattr(kernels, name), signature={**signature, **dict.fromkeys(constants, "constexpr")},
                           constexprs=constants, attrs={(i,): [["tt.divisibility", 16]] for i in range(len(signature))})
        options = {"num_warps": BLOCKS[name]["num_warps"]}
        out[name] = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options).asm["ptx"]
    return out


@functools.cache
def _kernels():
    """The two kernels, made on first use (Triton imported only then; its interpreter read from the environment)."""
    import triton
    import triton.language as tl

    @triton.jit
    def int8(x, q, scale, y, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BY_BITS: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        live = rows < N
        at = rows.to(tl.int64)[:, None] * K  # the first weight of each row
        sums = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            cols = start + tl.arange(0, BLOCK_K)
            w = tl.load(q + at + cols[None, :], mask=live[:, None] & (cols < K)[None, :], other=0)
            if BY_BITS:  # the byte with its top bit flipped is the weight + 128: 2²³ + it as a float, less 2²³ + 128
                w = ((w.to(tl.uint8, bitcast=True).to(tl.int32) ^ 0x80) | 0x4B000000).to(tl.float32, bitcast=True)
                w -= 8388736.0
            sums += w.to(tl.float32) * tl.load(x + cols, mask=cols < K, other=0).to(tl.float32)[None, :]
        out = tl.sum(sums, axis=1) * tl.load(scale + rows, mask=live, other=0).to(tl.float32)
        tl.store(y + rows, out.to(y.dtype.element_ty), mask=live)

    @triton.jit
    def int4(x, packed, scale_zero, y, N, K, row_bytes, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
             GROUPS: tl.constexpr, BY_BITS: tl.constexpr):
        half: tl.constexpr = GROUP // 2
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        live = rows < N
        # the first byte of each row; row_bytes (K / 2) passed apart, so Triton sees it a multiple of 16 where it
        # is and reads 16 bytes at a time (computed here from K, it knew only 8)
        at = rows.to(tl.int64)[:, None, None] * row_bytes
        t = tl.arange(0, half)
        out = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for first in range(0, K // GROUP, GROUPS):
            g = first + tl.arange(0, GROUPS)  # this tile's groups
            real = g < K // GROUP
            b = tl.load(packed + at + (g * half)[None, :, None] + t[None, None, :],
                        mask=live[:, None, None] & real[None, :, None], other=0).to(tl.int32)
            low = tl.load(x + (g * GROUP)[:, None] + t[None, :], mask=real[:, None], other=0).to(tl.float32)
            high = tl.load(x + (g * GROUP + half)[:, None] + t[None, :], mask=real[:, None], other=0).to(tl.float32)
            if BY_BITS:  # each half, 0 … 15, as the float 2²³ + it, less 2²³ + 8
                lo = ((b & 15) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
                hi = ((b >> 4) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
            else:
                lo, hi = ((b & 15) - 8).to(tl.float32), ((b >> 4) - 8).to(tl.float32)
            dots = tl.sum(lo * low[None] + hi * high[None], 2)
            xs = tl.sum(low, 1) + tl.sum(high, 1)  # [GROUPS]
            sz = (g[None, :].to(tl.int64) * N + rows[:, None]) * 2  # scale_zero[g, n, 0]
            both = live[:, None] & real[None, :]
            s = tl.load(scale_zero + sz, mask=both, other=0).to(tl.float32)
            z = tl.load(scale_zero + sz + 1, mask=both, other=0).to(tl.float32)
            out += tl.sum(s * dots + z * xs[None, :], 1)
        tl.store(y + rows, out.to(y.dtype.element_ty), mask=live)

    return SimpleNamespace(int8=int8, int4=int4)
