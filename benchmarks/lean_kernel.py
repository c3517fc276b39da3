"""`python -m benchmarks.lean_kernel [--size 112M] [--rounds 21]`: the lean pass's decode step with its one-row kernel
(engine/forward/streamed.py), with the same kernel reading the matrix as one block (one stream, not STREAMS), and
with `F.linear` alone, side by side on this machine.

All are the same LeanLlama over the same rung's weights, compiled whole; they differ only in how a one-row product
is computed. Each is compiled and run twice first (excluded), then the two alternate for `--rounds` rounds, so a slow
minute falls on both alike. A pass over 8 rows (a prefill) is timed beside them, on `F.linear` as every pass over
several rows is. Prints the medians, the fastest runs and the weights' bytes (a decode step reads them all once).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from engine.forward import streamed
from engine.forward.lean import LeanLlama, compiled_pass, run_once
from engine.load.load import load_model
from physics.rungs import rung_model

CONTEXT = 128


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lean_kernel")
    ap.add_argument("--size", default="112M")
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rlm = rung_model(load_model("default", device="cpu"), args.size)
    ids = torch.randint(0, 1000, (1, CONTEXT), generator=torch.Generator().manual_seed(0))
    one, where = ids[:, :1], torch.tensor([CONTEXT])
    passes = {}
    for name, one_row, streams, x, pos in (
            (f"decode, streamed one-row kernel ({streamed.STREAMS} blocks)", True, streamed.STREAMS, one, where),
            ("decode, streamed, one block", True, 1, one, where),
            ("decode, F.linear", False, 1, one, where),
            ("8 rows (a prefill), F.linear", False, 1, ids[:, :8], torch.arange(8))):
        lean = LeanLlama(rlm.model, max_batch=1, max_len=CONTEXT + 2, one_row_kernel=one_row)
        lean.streams = streams
        with torch.no_grad():
            lean(ids, torch.arange(CONTEXT))  # the context a decode step reads
        fn = compiled_pass(lean)
        warm = run_once(fn, x, pos) + run_once(fn, x, pos)
        print(f"{name}: compiled and warmed in {warm / 1e3:.1f} s ({lean.kernel})", flush=True)
        passes[name] = (fn, x, pos)
    samples = {name: [] for name in passes}
    for _ in range(args.rounds):
        for name, (fn, x, pos) in passes.items():
            samples[name].append(run_once(fn, x, pos))
    weights = sum(p.numel() * p.element_size() for p in rlm.model.parameters())
    print(f"{rlm.spec.name}, {weights / 1e6:.0f} MB of weights, context {CONTEXT}, {args.rounds} rounds, one thread:")
    for name, got in samples.items():
        print(f"  {name:48} median {statistics.median(got):6.1f} ms   fastest {min(got):6.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
