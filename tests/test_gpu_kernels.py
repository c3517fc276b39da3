"""The GPU's int8 and int4 products (topics/bytes/gpu_kernels.py), run here in Triton's interpreter: each gives the
product of the matrix its storage keeps, worked out in float64 from the stored bytes, at shapes no block size
divides; a compiled pass calls them inside its graph; and a lean pass decoding over them picks fp32's next token."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from engine.forward.lean import LeanLlama
from engine.load.load import load_model
from engine.paths import ROOT
from topics.bytes import gpu_kernels, storage

SHAPES = ((96, 256), (37, 384), (5, 1024), (1000, 128))  # rows not a multiple of any block, groups 1 … 8


@pytest.fixture
def interpreter():
    """Triton's interpreter (CPU tensors), which tests/conftest.py turns on before Triton is first imported."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    assert os.environ.get("TRITON_INTERPRET") == "1" and isinstance(tl.zeros, InterpretedFunction), \
        "Triton was imported before its interpreter was asked for (tests/conftest.py, pytest_configure)"
    gpu_kernels._kernels.cache_clear()
    yield
    gpu_kernels._kernels.cache_clear()


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def rounded_to_bf16(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Each output within one unit in the last place of bf16 (2⁻⁷ of its own value: Triton's interpreter cuts the
    bits off where a GPU rounds), and the fp32 sums' own error (1e-5 of the largest output)."""
    return bool(((got.double() - want).abs() <= want.abs() * 2 ** -7 + 1e-5 * want.abs().max()).all())


@pytest.mark.parametrize("by_bits", (True, False))
@pytest.mark.parametrize("n, k", SHAPES)
def test_int8_kernel_gives_the_stored_rows_times_x(interpreter, n, k, by_bits):
    """y[n] = scale[n] · Σ q[n, k] x[k], against the int8 bytes and scales multiplied out in float64; each weight
    widened by its bits (every byte from −128 to 127 among them) or by the conversion instruction."""
    gen = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=gen).bfloat16()
    x = torch.randn(k, generator=gen).bfloat16()
    held = storage.NarrowWeight(w, torch.int8)
    if n == 96:  # every byte an int8 can hold, in the first row
        held.q[0, :256] = torch.arange(-128, 128, dtype=torch.int8)
    want = (held.q.double() * held.scale.double()[:, None]) @ x.double()
    got = gpu_kernels.int8_rows(x, held.q, held.scale, by_bits)
    assert got.shape == (n,) and got.dtype == torch.bfloat16
    assert rounded_to_bf16(got, want)


def read_back(packed: torch.Tensor, scale_zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the steps, the matrix in float64) read from int4's bytes by hand: byte t of a group holds weight t low and
    weight t + GROUP/2 high; each weight (step − 8) · scale + zero."""
    n, k = packed.shape[0], packed.shape[1] * 2
    b = packed.view(n, -1, gpu_kernels.GROUP // 2).long()  # bytes, a group's half-row each
    q = torch.cat((b & 15, b >> 4), -1).view(n, k)
    s, z = scale_zero.double().transpose(0, 1).unbind(-1)  # [n, groups]
    return q, ((q.double() - 8).view(n, -1, gpu_kernels.GROUP) * s[..., None] + z[..., None]).view(n, k)


@pytest.mark.parametrize("by_bits", (True, False))
@pytest.mark.parametrize("n, k", SHAPES)
def test_int4_kernel_gives_the_stored_groups_times_x(interpreter, n, k, by_bits):
    """Each weight read back from its byte's half ((byte >> 4 or byte & 15) − 8) · scale + zero, in float64."""
    gen = torch.Generator().manual_seed(n * k)
    w = torch.randn(n, k, generator=gen)
    x = torch.randn(k, generator=gen).bfloat16()
    steps, scale_zero = storage.int4_groups(w)
    packed = gpu_kernels.pack_int4(steps)
    assert packed.shape == (n, k // 2) and packed.dtype == torch.uint8
    q, kept = read_back(packed, scale_zero)
    assert torch.equal(q, steps.long()) and torch.equal(gpu_kernels.unpack_int4(packed).long(), q)
    assert relative(kept.float(), w.double()) < 0.2  # 16 steps a group: the storage's rounding, not a kernel's
    got = gpu_kernels.int4_rows(x, packed, scale_zero, by_bits)
    assert rounded_to_bf16(got, kept @ x.double())


def test_the_gpus_own_block_sizes_give_the_same_products(interpreter, monkeypatch):
    """The block sizes a GPU runs (gpu_kernels.BLOCKS: int8's wider tile past LONG_ROW, int4's 16 groups a tile),
    run here in the interpreter at a row of 9,216 (nine int8 tiles; four and a half int4 tiles, the last masked)."""
    n, k = 13, 9216
    gpu = {name: {key: v for key, v in b.items() if key != "num_warps"} for name, b in gpu_kernels.BLOCKS.items()}
    monkeypatch.setattr(gpu_kernels, "INTERPRETER_BLOCKS",
                        {"int8": {**gpu["int8"], "BLOCK_K": gpu_kernels.LONG_BLOCK_K}, "int4": gpu["int4"]})
    assert k >= gpu_kernels.LONG_ROW and gpu_kernels.blocks("int4", k)["GROUPS"] == 16
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(n, k, generator=gen).bfloat16()
    x = torch.randn(k, generator=gen).bfloat16()
    held = storage.NarrowWeight(w, torch.int8)
    want = (held.q.double() * held.scale.double()[:, None]) @ x.double()
    assert relative(gpu_kernels.int8_rows(x, held.q, held.scale), want) < 8e-3
    steps, scale_zero = storage.int4_groups(w.float())
    packed = gpu_kernels.pack_int4(steps)
    assert relative(gpu_kernels.int4_rows(x, packed, scale_zero), read_back(packed, scale_zero)[1] @ x.double()) < 8e-3


def test_a_compiled_pass_calls_the_kernels_inside_its_graph(interpreter):
    """One row through the kernel, several rows through the widened matrix, compiled whole (fullgraph), each the
    product of what its storage keeps."""
    w = torch.randn(80, 256, generator=torch.Generator().manual_seed(1)).bfloat16()
    for name in ("int8", "int4"):
        module = storage.narrow(w, name, triton=True)
        assert module.triton and "Triton" in module.kernel, name
        kept = storage.rounded(w, name).double()
        for rows in (1, 3):
            x = torch.randn(1, rows, 256, generator=torch.Generator().manual_seed(rows)).bfloat16()
            torch._dynamo.reset()
            with torch.no_grad():
                got = torch.compile(module, fullgraph=True)(x)
            assert got.shape == (1, rows, 80) and got.dtype == torch.bfloat16, (name, rows)
            assert relative(got, x.double() @ kept.T) < 2e-2, (name, rows)
    torch._dynamo.reset()


@pytest.mark.slow  # the interpreter runs every program of every product in numpy: ~30 s
def test_a_lean_pass_over_the_kernels_decodes_fp32s_next_token(interpreter, monkeypatch):
    """The int8 and int4 lean passes as a GPU builds them (the kernels for one row), prefill then a decode step on
    the bundled model: within their storage's rounding of fp32's logits, the same top token."""
    lm = load_model("tinystories-llama", device="cpu", dtype="float32", warmup=False)
    ids = lm.tokenizer("Once upon a time, there was a little", return_tensors="pt")["input_ids"]
    n = ids.shape[1]
    monkeypatch.setattr(gpu_kernels, "why_not", lambda device: None)  # build as on a GPU
    with torch.no_grad():
        fp32 = LeanLlama(lm.model, 1, n + 1)
        fp32(ids[:, :-1], torch.arange(n - 1))
        want = fp32(ids[:, -1:], torch.tensor([n - 1])).float()
        for name, tol in (("int8", 0.15), ("int4", 0.5)):
            lean = storage.lean_pass(lm.model, name, n + 1)
            assert "Triton" in lean.kernel and all(m.triton for m in lean.w1), name
            lean(ids[:, :-1], torch.arange(n - 1))  # several rows: the widened matrices
            got = lean(ids[:, -1:], torch.tensor([n - 1])).float()  # one row: the kernels
            assert relative(got, want.double()) < tol, name
            assert got.argmax(-1).item() == want.argmax(-1).item(), name


def test_the_kernels_compile_for_a_hopper_gpu_and_read_weights_in_wide_loads():
    """Triton compiles both kernels for an H100/H200 (compute capability 9.0) with no GPU here, in a process
    without its interpreter: a kernel that does not compile would cost a lent GPU's minutes. Their PTX reads the
    weights 16 bytes a thread a load, not byte by byte (as int8's did before Triton was told its sizes' alignment)
    nor 8 (int4's, with its row's bytes computed inside the kernel): a memory-bound product that loads a few
    bytes at a time reads below the bandwidth. And they widen no weight with the integer-to-float conversion
    (`cvt.rn.f32.s*`, a quarter of the rate of the float arithmetic beside it), where the kernels with it have one
    a weight: 32 a thread a tile for int8, 128 for int4."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from topics.bytes import gpu_kernels; "
            "print(json.dumps([gpu_kernels.ptx_for(90), gpu_kernels.ptx_for(90, by_bits=False)]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    ptx, converted = json.loads(run.stdout.strip().splitlines()[-1])
    conversions = {name: len(re.findall(r"cvt\.rn\.f32\.s\d+", text)) for name, text in ptx.items()}
    assert conversions == {"int8": 0, "int4": 0}, conversions
    assert {name: len(re.findall(r"cvt\.rn\.f32\.s\d+", text)) for name, text in converted.items()} == \
        {"int8": 32, "int4": 128}
    loads = {name: set(re.findall(r"ld\.global((?:\.v\d)?)\.b(\d+)", text)) for name, text in ptx.items()}
    widest = {name: max((int(v[2:] or 1) if v else 1) * int(bits) // 8 for v, bits in got)
              for name, got in loads.items()}
    assert ".target sm_90" in ptx["int8"] and widest == {"int8": 16, "int4": 16}, (widest, loads)
