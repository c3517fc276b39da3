"""The lean pass's second CPU kernel: a decode step's attention as flash-decoding does it (flash_decode.cpp).

A decode step reads its whole K/V cache, so each position of context should cost its bytes over the read rate
(topics/bytes/). torch's attention does not get near that on a CPU for one query position: SDPA with `enable_gqa`
read the cache at about a quarter of a plain read's rate, FlexAttention at half (docs/measurements.md has the
figures). flash_decode.cpp reads each K and V row once, for every query head of its group, keeps the softmax
running block by block, and writes no score per position out. What it still pays is arithmetic: 2 FLOPs a cache
byte where 4 query heads share each kv_head, about half the bytes' time at a CPU's matmul peak, not all of it
hidden behind the reads; its scores are summed eight at a time (AVX2), since summed one by one they set its time.

It is built on first use with the C++ compiler inductor uses (the compiled lean pass needs one anyway), against
torch's own headers, once per head_dim and group, into the temporary directory. It registers itself as a torch op
(`TORCH_LIBRARY`), so a compiled pass calls it inside its graph, from C++: on the Intel Xeon 2-core VM a call took
about 50 µs in a decode step, where the same kernel behind a Python custom op took 172 µs (its Python, run from
caches the weights had just flushed: 2 ms of a 20 ms step; docs/measurements.md). Where it cannot run (a GPU, a
cache not in fp32, more than 16 query heads per kv_head, no compiler) the pass keeps SDPA and `why_not` says why.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_suffix(".cpp")
# the first that builds; the second for a compiler without OpenMP, -march=native or C++20 (one thread; torch's
# headers warn under C++17, and build)
FLAGS = (("-O3", "-march=native", "-fopenmp", "-ffast-math", "-shared", "-fPIC", "-std=c++20"),
         ("-O3", "-ffast-math", "-shared", "-fPIC", "-std=c++17"))
MAX_GROUP = 16  # more query heads per kv_head than this keep SDPA (its scores sit on the stack)
NAME = "flash-decoding written for a CPU (engine/forward/flash_decode.cpp): each K/V row read once"
SDPA = "torch's scaled_dot_product_attention over the cache, masked"


def why_not(device: torch.device, dtype: torch.dtype, head_dim: int, group: int) -> str | None:
    """None when a decode step on this cache runs flash_decode.cpp; otherwise why it keeps SDPA, in words."""
    if device.type != "cpu":
        return f"a {device.type} runs SDPA's own kernels"
    if dtype != torch.float32:
        return f"the kernel reads an fp32 cache; this one is {str(dtype).removeprefix('torch.')}"
    if group > MAX_GROUP:
        return f"the kernel takes up to {MAX_GROUP} query heads per kv_head; this model has {group}"
    _lib, error = _library(head_dim, group)
    return error


def op_name(head_dim: int, group: int) -> str:
    """The op one build registers (its head_dim and group are fixed when it is compiled)."""
    return f"flash_decode_d{head_dim}_g{group}"


def _torch_flags() -> list[str]:
    """Compile and link against the torch this process runs: its headers, its libraries, its C++ ABI."""
    from torch.utils import cpp_extension

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return ([f"-I{d}" for d in cpp_extension.include_paths()] + [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
            + [f"-L{d}" for d in cpp_extension.library_paths()]
            + [f"-Wl,-rpath,{d}" for d in cpp_extension.library_paths()] + ["-lc10", "-ltorch_cpu", "-ltorch"])


@functools.cache
def _library(head_dim: int, group: int) -> tuple[str | None, str | None]:
    """(the op built and loaded for this head_dim and group, None), or (None, why it could not be built)."""
    name = op_name(head_dim, group)
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        return None, "no C++ compiler on this machine to build the decode kernel"
    key = hashlib.sha256(SOURCE.read_bytes() + repr(FLAGS).encode() + compiler.encode()
                         + torch.__version__.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"decode_lab_kernels_{os.getuid()}"
    built = folder / f"flash_decode_{key}_{head_dim}_{group}.so"
    if not built.exists():
        folder.mkdir(parents=True, exist_ok=True)
        part = built.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")  # others may build it too
        error = ""
        for flags in FLAGS:
            try:
                done = subprocess.run([compiler, *flags, f"-DHEAD_DIM={head_dim}", f"-DGROUP={group}", str(SOURCE),
                                       "-o", str(part), *_torch_flags()], capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as e:
                return None, f"the decode kernel did not build ({compiler}: {e})"
            if done.returncode == 0:
                break
            error = done.stderr.strip()[:200]
        else:
            return None, f"the decode kernel did not build ({compiler}: {error})"
        os.replace(part, built)
    if not hasattr(torch.ops.decode_lab, name):  # (loaded already when a test has cleared this cache)
        torch.ops.load_library(str(built))
        torch.library.register_fake(f"decode_lab::{name}")(_shape)
    return name, None


def _shape(q, k_cache, v_cache, input_pos, kv_len):
    return torch.empty_like(q)  # what a compiler traces: the output is q's shape


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, input_pos: torch.Tensor,
           kv_len: int) -> torch.Tensor:
    """q [batch, head, 1, head_dim] against a static cache [batch, kv_head, max_len, head_dim], every sequence at
    position input_pos[0]: attends to the positions up to it (and below kv_len where kv_len > 0), as SDPA with
    the pass's causal mask does; [batch, head, 1, head_dim]. The op flash_decode.cpp registers (built first)."""
    head_dim, group = q.shape[-1], q.shape[1] // k_cache.shape[1]
    if not torch.compiler.is_compiling():  # a compiled pass's module built it already (LeanLlama calls why_not)
        _name, error = _library(head_dim, group)
        if error:
            raise RuntimeError(error)
    return getattr(torch.ops.decode_lab, op_name(head_dim, group))(q, k_cache, v_cache, input_pos, kv_len)
