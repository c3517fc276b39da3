"""`python -m benchmarks.decode_attention [--device cuda] [--context 20480] [--rounds 9]`: a decode step's attention
over a long K/V cache, each kernel the lean pass could use, side by side with plain reads of the same bytes.

Two shapes: the ≥ 100 M rung's (6 kv_heads of head_dim 32, 4 query heads to each, fp32: a CPU's default) and
Llama-3-8B's (8 kv_heads of 128, 4 to each, bf16: a GPU's default, the shape `engine bytes --device cuda` draws its
context line at), `--layers` layers' caches so that no kernel finds them in the last-level cache. Every round
runs, in turn: a plain sum of every cache tensor whole, in its own dtype; the same bytes summed as 4-byte words where
the cache holds 2-byte numbers (a bf16 sum widens each number first); a matrix-vector product over the words
(physics.roofline.as_rows: topics/bytes/measure.py predicts the context's slope from the faster of these last two,
physics.roofline.plain_read); torch's `scaled_dot_product_attention` as the lean pass calls it without the CPU
kernel (`enable_gqa`, the step's mask), the same with each kv_head's query heads grouped as rows and no mask, and
engine/forward/flash_decode.cpp where it runs (a CPU, fp32). Prints each one's median rate (the bytes it read over
its time: the K/V's, the product's whole rows of them) and its ratio to the plain sum, from the same rounds.
docs/measurements.md has runs.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from engine.forward import flash_decode
from engine.timing import timed
from physics.roofline import STREAM_COLUMNS, as_rows, as_words

SHAPES = {  # kv_heads, query heads a kv_head, head_dim, dtype, default context, default layers
    "rung": (6, 4, 32, torch.float32, 20480, 16),
    "llama-3-8b": (8, 4, 128, torch.bfloat16, 65536, 32),
}
PLAIN = "plain sum of the same K/V"
PRODUCT = "a matrix-vector product over the words"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.decode_attention")
    ap.add_argument("--device", default="cpu", help="cpu (one thread) or cuda")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="default: rung on a CPU, llama-3-8b on a GPU")
    ap.add_argument("--context", type=int, help="positions the step reads (default: the shape's)")
    ap.add_argument("--layers", type=int, help="caches, one a layer (default: the shape's)")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    kv_heads, group, head_dim, dtype, context, layers = SHAPES[args.shape or ("rung" if device.type == "cpu"
                                                                              else "llama-3-8b")]
    n, layers = args.context or context, args.layers or layers
    if device.type == "cpu":
        torch.set_num_threads(1)
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (1, kv_heads, n + 1, head_dim)  # a static cache one position longer than the step reads

    def randn(*size):
        return torch.randn(size, generator=gen, device=device, dtype=dtype)

    caches = [(randn(*shape), randn(*shape)) for _ in range(layers)]
    q = randn(1, kv_heads * group, 1, head_dim)
    grouped, pos = q.view(1, kv_heads, group, head_dim), torch.tensor([n - 1], device=device)
    mask = torch.ones(1, n + 1, dtype=torch.bool, device=device)
    mask[:, n:] = False
    vector = torch.ones(STREAM_COLUMNS, device=device)
    kernels = {PLAIN: lambda k, v: (k.sum(), v.sum())}
    if q.element_size() == 2:
        kernels["the same bytes summed as 4-byte words"] = lambda k, v: (as_words(k).sum(), as_words(v).sum())
    kernels[PRODUCT] = lambda k, v: (torch.mv(as_rows(as_words(k)), vector), torch.mv(as_rows(as_words(v)), vector))
    kernels["SDPA, enable_gqa, the step's mask"] = lambda k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True)
    kernels["SDPA, query heads grouped as rows"] = lambda k, v: F.scaled_dot_product_attention(
        grouped, k[:, :, :n], v[:, :, :n])
    why = flash_decode.why_not(device, dtype, head_dim, group)
    if why is None:
        kernels["flash_decode.cpp"] = lambda k, v: flash_decode.attend(q, k, v, pos, n)
    else:
        print(f"flash_decode.cpp left out: {why}")
    rates = {name: [] for name in kernels}
    work = 2 * kv_heads * n * head_dim * q.element_size() * layers
    read = dict.fromkeys(kernels, work)  # the product reads the whole rows only
    read[PRODUCT] = sum(as_rows(as_words(c)).numel() * 4 for pair in caches for c in pair)
    with torch.no_grad():
        for fn in kernels.values():  # warm-up, excluded
            fn(*caches[0])
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                ms = timed(lambda fn=fn: [fn(k, v) for k, v in caches], device, repeats=1, warmup=0).forward_ms
                rates[name].append(read[name] / (ms / 1e3) / 1e9)
    plain = statistics.median(rates[PLAIN])
    threads = ", one thread" if device.type == "cpu" else f", {torch.cuda.get_device_name(device)}"
    kind = str(dtype).removeprefix("torch.")
    print(f"{layers} layers × {n:,} positions × {kv_heads} kv_heads of {head_dim}, {kind} ({work / 1e6:,.1f} MB of K/V)"
          f", {group} query heads a kv_head{threads}, {args.rounds} rounds:")
    for name, got in rates.items():
        print(f"  {name:38} {statistics.median(got):8.1f} GB/s ({min(got):.1f}–{max(got):.1f}), "
              f"×{statistics.median(got) / plain:.2f} the plain sum")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
