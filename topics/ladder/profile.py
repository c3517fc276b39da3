"""Where the time of one decode step goes, measured.

A cached decode step must at least read every weight once: bytes moved / bandwidth is its
memory lower bound. A small model's measured step is many times that bound. To say why,
the step is taken apart:

    the whole step      the next decode-shaped pass, timed (median), through engine.forward.run.run_pass
    its matmuls alone   every weight matrix of the model multiplied by a tensor of the step's shape,
                        timed in a tight loop: the arithmetic and weight reads, with no Python between
    the rest            the whole step minus its matmuls: attention's small ops, norms, RoPE, cache
                        writes, and the Python and dispatch around each of them
    ops per step        how many aten operations the pass issues (torch.profiler counts them)

Every pass is rolled back afterwards, so the run itself is unchanged. `where_time_goes` does it on a run of
its own (a 100-token prefill and 8 cached decode steps), so a page can show it before anyone has stepped.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import torch

from engine.forward.cache import roll_back
from engine.timing import span
from physics import machine


@dataclass(frozen=True)
class Breakdown:
    """One decode step taken apart: the whole step, its matmuls alone, the rest, and its memory bound."""

    wall_ms: float  # the whole step, median of `runs` timed runs
    matmul_ms: float  # every weight matrix multiplied once, alone (median)
    rest_ms: float  # the whole step minus its matmuls, at least 0
    ops: int  # aten operations the step issues (torch.profiler)
    memory_bound_ms: float  # bytes moved / bandwidth (an estimate)
    runs: int
    device: str  # the device, in words
    bandwidth: float  # bytes/s the memory bound was computed with

    def at_bandwidth(self, bandwidth: float) -> "Breakdown":
        """The same step, its memory bound at this bandwidth instead of the one it was made with."""
        return replace(self, memory_bound_ms=self.memory_bound_ms * self.bandwidth / bandwidth, bandwidth=bandwidth)


@dataclass(frozen=True)
class DemoRun:
    """A run made to measure when a session has none: its steps (for the roofline) and its next step taken apart."""

    traces: tuple  # StepTrace per pass
    breakdown: Breakdown


def decode_breakdown(stepper, bandwidth: float, repeats: int = 5) -> Breakdown:
    """The next decode-shaped pass of `stepper`: whole, its matmuls alone, the rest, and its memory bound."""
    from torch.profiler import ProfilerActivity, profile

    from engine.forward.estimates import step_bytes
    from engine.forward.run import run_pass

    lm = stepper.lm
    if not stepper.records:
        raise ValueError("run prefill first")
    cache = stepper.cache if stepper.use_cache else None
    ids = stepper.ids[:, -1:] if cache is not None else stepper.ids
    past = cache.get_seq_length() if cache is not None else 0

    # trim=False: a sliding-window layer keeps what the pass pushed out, so rolling the pass back restores it exactly
    timed = run_pass(lm, ids, cache, repeats=repeats, trim=False)  # a warm-up run, then `repeats` timed ones
    roll_back(cache, ids.shape[1])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_pass(lm, ids, cache, trim=False)
    roll_back(cache, ids.shape[1])
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))

    wall = timed.timing.forward_ms
    matmul_ms = matmuls_alone(lm, ids.shape[1], repeats)
    bound_ms = step_bytes(lm.spec, ids.shape[1], past, lm.elem_bytes) / bandwidth * 1e3
    return Breakdown(wall, matmul_ms, max(0.0, wall - matmul_ms), ops, bound_ms, repeats, machine.describe(lm.device),
                     bandwidth)


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
        with span(lm.device) as took:
            for _ in range(loops):
                for x, w, transposed in mats:
                    x @ w if transposed else torch.nn.functional.linear(x, w)
        return took.ms / loops

    once()  # warm-up
    return statistics.median(once() for _ in range(repeats))


DEMO_TEXT = "Once upon a time, there was a little girl named Lily."  # repeated to a 100-token prompt


def demo_run(lm, prompt_tokens: int = 100, decode_steps: int = 8):
    """A run to measure when a session has none: a `prompt_tokens` prefill, then `decode_steps` cached decode
    steps; one more token is allowed, so the run is not finished and its next step can be taken apart."""
    from engine.generate.stepper import Stepper

    ids = lm.tokenizer(" ".join([DEMO_TEXT] * 12))["input_ids"][: min(prompt_tokens, lm.spec.max_positions // 2)]
    run = Stepper(lm, lm.tokenizer.decode(ids, skip_special_tokens=True), max_new_tokens=decode_steps + 2,
                  stop_on_eos=False)
    run.run(decode_steps + 1)
    return run


def where_time_goes(lm, bandwidth: float, repeats: int = 5) -> DemoRun:
    """The demo run's steps (for the roofline) and its next decode step taken apart (`decode_breakdown`)."""
    run = demo_run(lm)
    breakdown = decode_breakdown(run, bandwidth, repeats)
    traces = list(run.records)
    run.free()
    return DemoRun(tuple(traces), breakdown)


def breakdown_frame(b: Breakdown):
    """`decode_breakdown`'s numbers as the table a page shows: each part of one decode step, in ms."""
    import pandas as pd

    return pd.DataFrame([  # the number first: a part's long words pushed it past a phone's edge
        {"ms": round(b.memory_bound_ms, 3), "part": "memory lower bound: bytes moved / measured bandwidth (estimate)"},
        {"ms": round(b.matmul_ms, 3), "part": "the step's matmuls alone, every weight matrix once (measured)"},
        {"ms": round(b.rest_ms, 3),
         "part": f"the rest: {b.ops} aten ops of attention, norms, RoPE, cache writes, and the Python around them"},
        {"ms": round(b.wall_ms, 3), "part": f"the whole step (median of {b.runs})"},
    ])


def breakdown_note(b: Breakdown, which: str = "") -> str:
    """The table in one sentence: which share of the step each part is. `which`: the step and where it was timed
    ("your run's step 4, measured now"), so that it is not read as the ladder's rung, another step with its own split."""
    wall = b.wall_ms
    where = f"{b.device}, {which}" if which else b.device
    if b.matmul_ms >= wall:  # two timings taken apart disagree: say so rather than print "122 %"
        return (f"On {where}: the matmuls timed alone ({b.matmul_ms:.2f} ms) took as long as the whole step "
                f"({wall:.2f} ms) or longer, so here the step is about its matmuls and little else; timings taken "
                "while other work shares the machine move about, so read these as rough and measure again.")
    if b.matmul_ms < b.memory_bound_ms:  # a lower bound beaten: the bandwidth it was made with read low
        return (f"On {where}: the matmuls timed alone ({b.matmul_ms:.2f} ms) beat the memory bound "
                f"({b.memory_bound_ms:.2f} ms, an estimate), so the bandwidth probe read low: it ran while other "
                f"work shared the machine, or these weights sit in a cache faster than the probe's copy. The other "
                f"{b.rest_ms / wall:.0%} of the step is the many small operations around the matmuls.")
    return (f"On {where}: the memory bound is {b.memory_bound_ms / wall:.0%} of the step and the matmuls "
            f"{b.matmul_ms / wall:.0%}; the other {b.rest_ms / wall:.0%} is the many small operations around "
            "them. A bigger model makes each matmul longer and that share smaller.")
