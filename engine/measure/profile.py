"""Where the time of one decode step goes, measured.

A cached decode step must at least read every weight once: bytes moved / bandwidth is its
memory lower bound. A small model's measured step is many times that bound. To say why,
the step is taken apart:

    the whole step      the next decode-shaped pass, timed (median), through engine.forward.run_pass
    its matmuls alone   every weight matrix of the model multiplied by a tensor of the step's shape,
                        timed in a tight loop: the arithmetic and weight reads, with no Python between
    the rest            the whole step minus its matmuls: attention's small ops, norms, RoPE, cache
                        writes, and the Python and dispatch around each of them
    ops per step        how many aten operations the pass issues (torch.profiler counts them)

Every pass is rolled back afterwards, so the run itself is unchanged.
"""

from __future__ import annotations

import statistics
import time

import torch

from engine.load import device as dev
from engine.forward.cache import roll_back


def decode_breakdown(stepper, bandwidth: float, repeats: int = 5) -> dict:
    """The next decode-shaped pass of `stepper`: whole, its matmuls alone, the rest, and its memory bound."""
    from torch.profiler import ProfilerActivity, profile

    from engine.forward.estimates import step_bytes
    from engine.forward.run import run_pass

    lm = stepper.lm
    if not stepper.traces:
        raise ValueError("run prefill first")
    cache = stepper.cache if stepper.use_cache else None
    ids = stepper.ids[:, -1:] if cache is not None else stepper.ids
    past = cache.get_seq_length() if cache is not None else 0

    timed = run_pass(lm, ids, cache, repeats=repeats)  # a warm-up run, then `repeats` timed ones
    roll_back(cache, ids.shape[1])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_pass(lm, ids, cache)
    roll_back(cache, ids.shape[1])
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))

    wall = timed.timing.forward_ms
    matmul_ms = matmuls_alone(lm, ids.shape[1], repeats)
    bound_ms = step_bytes(lm.spec, ids.shape[1], past, lm.elem_bytes) / bandwidth * 1e3
    return {"wall_ms": wall, "matmul_ms": matmul_ms, "rest_ms": max(0.0, wall - matmul_ms), "ops": ops,
            "memory_bound_ms": bound_ms, "runs": repeats, "device": dev.describe(lm.device)}


@torch.inference_mode()
def matmuls_alone(lm, rows: int, repeats: int = 5, loops: int = 20) -> float:
    """ms to multiply every weight matrix of the model once by `rows` rows (the LM head by one row: only the
    last position's logits are computed), each timed in a tight loop after a device sync; median of `repeats`."""
    head = lm.model.get_output_embeddings()
    mats = []
    for module in lm.model.modules():
        w = getattr(module, "weight", None)
        if not isinstance(w, torch.Tensor) or w.dim() != 2 or type(module).__name__ not in ("Linear", "Conv1D"):
            continue
        n = 1 if module is head else rows
        transposed = type(module).__name__ == "Conv1D"  # GPT-2 stores [in, out]
        x = torch.randn(n, w.shape[0] if transposed else w.shape[1], device=w.device, dtype=w.dtype)
        mats.append((x, w, transposed))
    if head is not None and not any(w is head.weight for _, w, _ in mats):  # a tied LM head is an Embedding
        w = head.weight
        mats.append((torch.randn(1, w.shape[1], device=w.device, dtype=w.dtype), w, False))

    def once() -> float:
        dev.sync(lm.device)
        t0 = time.perf_counter()
        for _ in range(loops):
            for x, w, transposed in mats:
                x @ w if transposed else torch.nn.functional.linear(x, w)
        dev.sync(lm.device)
        return (time.perf_counter() - t0) * 1e3 / loops

    once()  # warm-up
    return statistics.median(once() for _ in range(repeats))
