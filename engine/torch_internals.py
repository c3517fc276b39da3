"""Every use of torch that is not its public API, in one place, each named with what it is for.

torch is pinned (requirements.txt); `WRITTEN_FOR` is the version this file was written against, and
tests/test_internals.py fails with a clear message when another one is installed, so an upgrade starts here.

    torch._dynamo.utils.counters              how often inductor declined CUDA graphs (a step then launches
                                              every kernel)
    torch._dynamo.config.recompile_limit      compiled graphs kept per function (a ladder's shapes need more
                                              than torch's default 8)
    torch._dynamo.mark_dynamic                one graph for every size of a tensor's dimension (documented in
                                              torch.compile's dynamic shapes, but under the private module)
    torch._inductor.config.cpp.threads        the threads inductor's C++ kernels are compiled for (else the count
                                              torch.get_num_threads() gives when they compile is baked into each)
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from engine.pins import written_for_problem

WRITTEN_FOR = "2.13"  # torch's major.minor
RECOMPILE_LIMIT = 64


def version_problem() -> str | None:
    """None when the installed torch is the one this file was written against, else what to check."""
    return written_for_problem("torch", torch.__version__, WRITTEN_FOR, "engine/torch_internals.py")


def allow_recompiles(limit: int = RECOMPILE_LIMIT) -> None:
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)


def graph_skips() -> int:
    """How many times inductor has declined CUDA graphs in this process."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """Compile one graph for every size of `t`'s dimension `dim` (a pass over n rows, for every n >= 2)."""
    torch._dynamo.mark_dynamic(t, dim)


@contextmanager
def inductor_cpu_threads(n: int):
    """Compile inductor's CPU kernels for `n` threads, whatever torch.get_num_threads() is while they compile (a
    background measurement compiles outside the model's turn, at the students' thread count, and times inside it)."""
    import torch._inductor.config as config

    before = config.cpp.threads
    config.cpp.threads = n
    try:
        yield
    finally:
        config.cpp.threads = before
