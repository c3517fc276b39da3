"""Where the time of one decode step goes, measured with torch.profiler.

A cached decode step must at least read every weight once: bytes moved / bandwidth
is its memory lower bound. A small model's measured step is many times that bound,
and the profiler says why: the step is split into

    matmuls        aten::mm / addmm / bmm / linear / matmul kernels (the work the bound describes)
    other kernels  softmax, norms, RoPE, activation, KV-cache concatenation, copies
    overhead       everything between kernels: Python, transformers' module calls, dispatch, launches

The pass profiled is a repeat of the latest decode step, rolled back afterwards, so the
run itself is unchanged.
"""

from __future__ import annotations

import statistics
import time

import torch

from engine import device as dev
from engine.cache import roll_back

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")


def decode_breakdown(stepper, bandwidth: float, repeats: int = 5) -> dict:
    """Where the next decode-shaped pass spends its time, as medians over `repeats` runs each way.

    The step's wall time is measured without the profiler (the profiler's own bookkeeping would be
    counted as overhead); the time inside kernels is read from profiled runs of the same pass.
    """
    from torch.profiler import ProfilerActivity, profile

    lm = stepper.lm
    if not stepper.traces:
        raise ValueError("run prefill first")
    cached = stepper.use_cache
    ids = stepper.ids[:, -1:] if cached else stepper.ids
    past = stepper.cache.get_seq_length() if cached else 0
    mask = torch.ones(1, past + ids.shape[1], dtype=torch.long, device=lm.device)
    kwargs = dict(input_ids=ids.to(lm.device), attention_mask=mask, use_cache=cached, logits_to_keep=1)
    if cached:
        kwargs["past_key_values"] = stepper.cache
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if lm.device.type == "cuda" else [])

    def once(profiler=None):
        dev.sync(lm.device)
        t0 = time.perf_counter()
        lm.model(**kwargs)
        dev.sync(lm.device)
        wall = (time.perf_counter() - t0) * 1e3
        if cached:
            roll_back(stepper.cache, ids.shape[1])
        return wall

    walls, kernels = [], []
    with lm.turn(), torch.inference_mode():
        once()  # warm-up, dropped
        for _ in range(repeats):
            walls.append(once())
        for _ in range(repeats):
            with profile(activities=activities) as prof:
                once()
            kernels.append(_split(prof, lm.device.type == "cuda"))
    wall = statistics.median(walls)
    matmul_ms = statistics.median(k[0] for k in kernels)
    other_ms = statistics.median(k[1] for k in kernels)
    from engine.estimates import step_bytes

    bound_ms = step_bytes(lm.spec, ids.shape[1], past, lm.elem_bytes) / bandwidth * 1e3
    return {"wall_ms": wall, "matmul_ms": matmul_ms, "other_kernels_ms": other_ms,
            "overhead_ms": max(0.0, wall - matmul_ms - other_ms), "memory_bound_ms": bound_ms,
            "runs": repeats, "device": dev.describe(lm.device)}


def _split(prof, cuda: bool) -> tuple[float, float]:
    """(ms in matmul ops, ms in every other op), from the ops' own (self) time on the device that ran them."""
    matmul = other = 0.0
    for e in prof.key_averages():
        us = (e.self_device_time_total if cuda else e.self_cpu_time_total)
        if not us or e.key.startswith("ProfilerStep"):
            continue
        if e.key in MATMUL_OPS or (cuda and "gemm" in e.key.lower()):
            matmul += us
        elif e.key.startswith("aten::") or cuda:
            other += us
    return matmul / 1e3, other / 1e3
