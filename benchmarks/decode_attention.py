"""`python -m benchmarks.decode_attention [--context 20480] [--rounds 9]`: a decode step's attention over a long K/V
cache, each kernel the lean pass could use, side by side on this machine.

The shape is the ≥ 100 M rung's (6 kv_heads of head_dim 32, 4 query heads to each, fp32), `--layers` layers' caches
so that no kernel finds them in the last-level cache. Every round runs, in turn: a plain sum of the same tensors
(the bytes' own read), torch's `scaled_dot_product_attention` as the lean pass calls it without the CPU kernel
(`enable_gqa`, the step's mask), the same with each kv_head's query heads grouped as rows and no mask, and
engine/forward/flash_decode.cpp. Prints each one's median rate (K/V bytes over its time) and its ratio to the
plain sum, from the same rounds. docs/measurements.md has a run.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from engine.forward import flash_decode
from engine.timing import timed

KV_HEADS, GROUP, HEAD_DIM = 6, 4, 32


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.decode_attention")
    ap.add_argument("--context", type=int, default=20480)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    n, gen = args.context, torch.Generator().manual_seed(0)
    shape = (1, KV_HEADS, n + 1, HEAD_DIM)  # a static cache one position longer than the step reads
    caches = [(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)) for _ in range(args.layers)]
    q = torch.randn(1, KV_HEADS * GROUP, 1, HEAD_DIM, generator=gen)
    grouped, pos = q.view(1, KV_HEADS, GROUP, HEAD_DIM), torch.tensor([n - 1])
    mask = torch.ones(1, n + 1, dtype=torch.bool)
    mask[:, n:] = False
    why = flash_decode.why_not(q.device, q.dtype, HEAD_DIM, GROUP)
    kernels = {
        "plain sum of the same K/V": lambda k, v: (k[:, :, :n].sum(), v[:, :, :n].sum()),
        "SDPA, enable_gqa, the step's mask": lambda k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=True),
        "SDPA, query heads grouped as rows": lambda k, v: F.scaled_dot_product_attention(
            grouped, k[:, :, :n], v[:, :, :n]),
    }
    if why is None:
        kernels["flash_decode.cpp"] = lambda k, v: flash_decode.attend(q, k, v, pos, n)
    else:
        print(f"flash_decode.cpp left out: {why}")
    rates = {name: [] for name in kernels}
    work = 2 * KV_HEADS * n * HEAD_DIM * 4 * args.layers
    with torch.no_grad():
        for name, fn in kernels.items():  # warm-up, excluded
            fn(*caches[0])
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                ms = timed(lambda fn=fn: [fn(k, v) for k, v in caches], repeats=1, warmup=0).forward_ms
                rates[name].append(work / (ms / 1e3) / 1e9)
    plain = statistics.median(rates["plain sum of the same K/V"])
    print(f"{args.layers} layers × {n:,} positions × {KV_HEADS} kv_heads of {HEAD_DIM}, fp32 "
          f"({work / 1e6:,.0f} MB of K/V), {GROUP} query heads a kv_head, one thread, {args.rounds} rounds:")
    for name, got in rates.items():
        print(f"  {name:36} {statistics.median(got):6.1f} GB/s ({min(got):.1f}–{max(got):.1f}), "
              f"×{statistics.median(got) / plain:.2f} the plain sum")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
