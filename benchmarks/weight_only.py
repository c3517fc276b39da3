"""`python -m benchmarks.weight_only [--rows 1] [--rounds 9] [--shape OUT IN]`: one row times a stack of matrices, each storage and
each form of its product the lean pass could compile, side by side on this machine.

What `engine bytes` times as a whole step, taken apart: the weights' read alone, so a storage that is not faster in
proportion to its bytes can be traced to the kernel that reads it. Each form is compiled whole over `--matrices`
matrices of Llama-3-8B's MLP shape ([14,336 × 4,096]; on a CPU, fewer and smaller) with the lean pass's settings
(engine/forward/lean.py: CUDA graphs on a GPU, inductor alone on a CPU), every form once a round, the rounds
alternated; each form's median read rate (its stored bytes over its time) and its time over the reference's in the
same round. The forms (topics/bytes/storage.py):

    reference     the bf16 model's matrices (a GPU) or fp32's (a CPU), as the lean pass multiplies them
    int8          the pass's own: on a GPU the Triton kernel (topics/bytes/gpu_kernels.py), on a CPU the streamed
                  product, widened as it is read
    int8 converted (a GPU) the same Triton kernel, each weight widened by the conversion instruction, not its bits
    int8 streamed (a GPU) the streamed product as inductor compiles it, the pass's own before the Triton kernel
    int8 gpt-fast `F.linear(x, q.to(x.dtype)) * scales`, the form inductor rewrites to `_weight_int8pack_mm`
    int4          the pass's own: on a GPU the Triton kernel, on a CPU torch's int4 kernel
    int4 converted (a GPU) the Triton kernel, each weight widened by the conversion instruction
    int4 tinygemm (a GPU) torch's int4 kernel (`_weight_int4pack_mm`), the pass's own before the Triton kernel

On a GPU it prints the Triton kernels' block sizes (topics/bytes/gpu_kernels.py: BLOCKS, measured).

docs/measurements.md has the runs.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine import torch_internals
from engine.forward.lean import compile_settings
from engine.timing import timed
from topics.bytes import gpu_kernels
from topics.bytes import storage as st


class Stack(torch.nn.Module):
    """x times every matrix in turn (each result kept, so none is skipped)."""

    def __init__(self, mats, form: str):
        super().__init__()
        self.mats, self.form = torch.nn.ModuleList(mats), form

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.form == "int8 gpt-fast":
            return [F.linear(x, m.q.to(x.dtype)) * m.scale for m in self.mats]
        if self.form == "converted":  # the Triton kernels, each weight widened by the conversion instruction
            op = gpu_kernels.int4_rows if isinstance(self.mats[0], st.Int4Weight) else gpu_kernels.int8_rows
            return [op(x.reshape(-1), m.q, m.scale, False) for m in self.mats]
        return [m(x) for m in self.mats]


class Plain(torch.nn.Module):
    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.register_buffer("w", w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from engine.forward import streamed

        return streamed.product(x, self.w, one_row=True)


@dataclass(frozen=True)
class Form:
    name: str
    stack: Stack
    options: dict  # inductor's, for this form's compile
    nbytes: int  # what one call reads from the matrices, counted from the tensors


def forms(device: torch.device, matrices: int, out: int, inn: int, gen) -> list[Form]:
    """Every form this device can run, the reference first."""
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    ws = [torch.randn(out, inn, generator=gen).to(device, dtype) for _ in range(matrices)]
    base = compile_settings(device).options
    made = [(("bf16 model" if cuda else "fp32"), Stack([Plain(w) for w in ws], "plain"), base)]
    if not cuda:
        made.append(("bf16", Stack([st.narrow(w, "bf16") for w in ws], "own"), base))
    int8 = [st.narrow(w, "int8") for w in ws]  # one conversion, timed in each form that reads it
    made.append(("int8", Stack(int8, "own"), base))
    if cuda:
        made.append(("int8 converted", Stack(int8, "converted"), base))
        made.append(("int8 streamed", Stack([st.narrow(w, "int8", triton=False) for w in ws], "own"), base))
    made.append(("int8 gpt-fast", Stack(int8, "int8 gpt-fast"), base))
    int4s = (("int4", None, ("own", "converted") if cuda else ("own",)), ("int4 tinygemm", False, ("own",)))
    for name, triton, forms_ in int4s if cuda else int4s[:1]:
        try:
            int4 = [st.narrow(w, "int4", triton=triton) for w in ws]
        except (RuntimeError, NotImplementedError) as e:
            print(f"{name}: not measured here ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
            continue
        made += [(name if form == "own" else f"{name} converted", Stack(int4, form), base) for form in forms_]
    return [Form(name, stack, opts, sum(st.nbytes(m.w if isinstance(m, Plain) else m) for m in stack.mats))
            for name, stack, opts in made]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.weight_only")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    # a GPU: 64 matrices (7.5 GB in bf16, a few ms a call): with 8 (0.5 ms a call, H200, 2026-11-29) the host's launch
    # of the CUDA graph was a large part of every call, and pulled every ratio toward 1
    ap.add_argument("--matrices", type=int, help="matrices in the stack (default 64 on a GPU, 4 on a CPU)")
    ap.add_argument("--shape", type=int, nargs=2, metavar=("OUT", "IN"),
                    help="each matrix's shape (default 14336 4096 on a GPU, 4096 4096 on a CPU)")
    ap.add_argument("--rows", type=int, default=1, help="rows of x (1: a decode step's product)")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if not cuda:
        torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    out, inn = args.shape or ((14336, 4096) if cuda else (4096, 4096))
    made = forms(device, args.matrices or (64 if cuda else 4), out, inn, gen)
    x = torch.randn(1, args.rows, inn, generator=gen).to(device, torch.bfloat16 if cuda else torch.float32)
    runs = {}
    torch_internals.allow_recompiles()  # one Stack class, a graph per form
    with torch.no_grad():
        for f in made:
            fn = torch.compile(f.stack, fullgraph=True, options=f.options)

            def one(fn=fn):
                if cuda:
                    torch.compiler.cudagraph_mark_step_begin()
                fn(x)

            t = timed(one, device, repeats=1, warmup=3)
            print(f"{f.name}: compiled and warmed in {t.warmup_ms / 1e3:.1f} s", flush=True)
            runs[f.name] = one
        samples = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, one in runs.items():
                samples[name].append(timed(one, device, repeats=1, warmup=0).forward_ms)
    if cuda:
        print(gpu_kernels.said())
    ref = made[0]
    print(f"\n{len(ref.stack.mats)} matrices [{out} × {inn}], {args.rows} row(s), {args.rounds} rounds, {device}")
    print(f"{'form':14s} {'bytes':>10s} {'median ms':>10s} {'min–max':>13s} {'GB/s':>7s} {'× ' + ref.name:>12s}")
    for f in made:
        got = samples[f.name]
        med = statistics.median(got)
        ratio = statistics.median(a / b for a, b in zip(got, samples[ref.name]))
        print(f"{f.name:14s} {f.nbytes / 1e6:8.2f}MB {med:10.3f} {min(got):6.3f}–{max(got):6.3f} "
              f"{f.nbytes / med / 1e6:7.1f} {ratio:12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
