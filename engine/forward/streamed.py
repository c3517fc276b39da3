"""The one kernel the lean pass adds to `F.linear`: a one-row product on a CPU, as a streamed dot product.

A decode step multiplies one row by every weight matrix: it reads each weight once and does two FLOPs a weight,
so its time is the weights' bytes over the read rate. On a CPU, `F.linear` for one row (MKL's or oneDNN's
matrix-vector kernel) reads the weights well below that rate; the same product written as a multiply and a sum
over each output's row is one loop that inductor compiles to stream the matrix once, near the read rate
(docs/measurements.md has both, side by side). It is plain torch: eager, it gives `F.linear`'s numbers, only
slower. Every other product (several rows, or a GPU) is `F.linear`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "one row: a streamed dot product (engine/forward/streamed.py); several rows: F.linear"
PLAIN = "F.linear"


def name(device: torch.device, one_row: bool) -> str:
    """Which kernel a lean pass on this device runs its products with, in words (the curve records it)."""
    return NAME if one_row and device.type == "cpu" else PLAIN


def product(x: torch.Tensor, w: torch.Tensor, one_row: bool) -> torch.Tensor:
    """x [..., in] · wᵀ for w [out, in]: for a single row on a CPU (when `one_row`), the sum over `in` of each
    output's row of w times x, read row by row as w lies in memory ([out, in], a checkpoint's layout); else
    `F.linear`."""
    if one_row and x.device.type == "cpu" and x.shape[:-1].numel() == 1:
        return rows_times(x, w)
    return F.linear(x, w)


def rows_times(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The streamed product itself, for one row x [..., in]: each output's row of w times x, summed; [..., out]."""
    return (w * x.reshape(1, -1)).sum(-1).view(*x.shape[:-1], w.shape[0])
