"""The one kernel the lean pass adds to `F.linear`: a one-row product on a CPU, as a streamed dot product.

A decode step multiplies one row by every weight matrix: it reads each weight once and does two FLOPs a weight,
so its time is the weights' bytes over the read rate. On a CPU, `F.linear` for one row (MKL's or oneDNN's
matrix-vector kernel) reads the weights well below that rate; the same product written as a multiply and a sum
over each output's row is one loop that inductor compiles to stream the matrix once, near the read rate
(docs/measurements.md has both, side by side). It is plain torch: eager, it gives `F.linear`'s numbers, only
slower. Every other product (several rows, or a GPU) is `F.linear`.

One core reads memory faster with several streams in flight than with one: on the Intel Xeon 2-core VM a plain
sum read 11 GB/s, the product over the matrix in STREAMS far-apart blocks of rows 16 (docs/measurements.md). So
the rows are taken in STREAMS blocks, one product each; inductor fuses the blocks' products into one loop that
reads STREAMS places of the matrix at each step. Each output's sum is the same as one block's would be.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "one row: a streamed dot product (engine/forward/streamed.py); several rows: F.linear"
PLAIN = "F.linear"


def name(device: torch.device, one_row: bool) -> str:
    """Which kernel a lean pass on this device runs its products with, in words (the curve records it)."""
    return NAME if one_row and device.type == "cpu" else PLAIN


def product(x: torch.Tensor, w: torch.Tensor, one_row: bool, streams: int | None = None) -> torch.Tensor:
    """x [..., in] · wᵀ for w [out, in]: for a single row on a CPU (when `one_row`), the sum over `in` of each
    output's row of w times x, read row by row as w lies in memory ([out, in], a checkpoint's layout), in
    `streams` blocks (rows_times); else `F.linear`."""
    if one_row and x.device.type == "cpu" and x.shape[:-1].numel() == 1:
        return rows_times(x, w, streams)
    return F.linear(x, w)


STREAMS = 8  # blocks of rows read at once (a matrix whose rows do not split evenly is read as one block)


def rows_times(x: torch.Tensor, w: torch.Tensor, streams: int | None = None) -> torch.Tensor:
    """The streamed product itself, for one row x [..., in]: each output's row of w times x, summed; [..., out].
    The rows in `streams` blocks (default STREAMS), each block's product apart, so a compiled pass reads the blocks
    side by side."""
    out, row, streams = w.shape[0], x.reshape(1, -1), streams or STREAMS
    blocks = w.split(out // streams) if out % streams == 0 else (w,)
    return torch.cat([(b * row).sum(-1) for b in blocks]).view(*x.shape[:-1], out)
