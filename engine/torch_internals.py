"""Every use of torch that is not its public API, in one place, each named with what it is for.

torch is pinned (requirements.txt); `WRITTEN_FOR` is the version this file was written against, and
tests/test_internals.py fails with a clear message when another one is installed, so an upgrade starts here.

    torch.ops.mkldnn._reorder_linear_weight   oneDNN's packed layout of a weight matrix (CPU)
    torch.ops.mkldnn._linear_pointwise        oneDNN's matrix multiply on a packed weight: any number of rows
                                              (what inductor's `freezing` calls for a bf16 weight; for fp32 it
                                              packs only for one fixed row count, so a pass over n rows would
                                              compile once per n)
    torch._dynamo.utils.counters              how often inductor declined CUDA graphs (a step then launches
                                              every kernel)
    torch._dynamo.config.recompile_limit      compiled graphs kept per function (a ladder's shapes need more
                                              than torch's default 8)
    torch._dynamo.mark_dynamic                one graph for every size of a tensor's dimension (documented in
                                              torch.compile's dynamic shapes, but under the private module)
"""

from __future__ import annotations

import itertools

import torch

from engine.pins import written_for_problem

WRITTEN_FOR = "2.13"  # torch's major.minor
RECOMPILE_LIMIT = 64

_packed: dict[int, torch.Tensor] = {}  # key -> a weight in oneDNN's packed layout
_key_of: dict[tuple, int] = {}  # (address, shape) of a packed weight -> its key: each weight packed once
_users: dict[int, int] = {}  # key -> how many holders use it
_keys = itertools.count()


def version_problem() -> str | None:
    """None when the installed torch is the one this file was written against, else what to check."""
    return written_for_problem("torch", torch.__version__, WRITTEN_FOR, "engine/torch_internals.py")


def pack_weight(weight: torch.Tensor) -> int:
    """A [out, in] CPU weight copied into oneDNN's packed layout (once, however many holders ask); the key
    `packed_linear` reads it by. Each holder gives it back with `unpack`."""
    where = (weight.data_ptr(), tuple(weight.shape), tuple(weight.stride()))
    key = _key_of.get(where)
    if key is None:
        key = _key_of[where] = next(_keys)
        _packed[key] = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
    _users[key] = _users.get(key, 0) + 1
    return key


def unpack(keys) -> None:
    """A holder gives its packed copies back; each is freed when its last holder has."""
    for key in keys:
        _users[key] = _users.get(key, 1) - 1
        if _users[key] <= 0:
            _packed.pop(key, None)
            _users.pop(key, None)
            for where, k in list(_key_of.items()):
                if k == key:
                    del _key_of[where]


FEWEST_ROWS = 3  # oneDNN's packed multiply takes a slow path below this many rows (on the EPYC VM: 2 rows ×1.5 the
#                 time of 3 to 6): fewer are padded with zero rows, as a server pads a batch to a size it runs well


@torch.library.custom_op("decode_lab::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, key: int, out_features: int) -> torch.Tensor:
    """x [..., in] times the packed weight `key` (transposed), as one opaque step a compiled graph calls: x's row
    count may change from call to call without a new compile. The weight is found by key, not passed: a compiled
    graph cannot take oneDNN's opaque tensor as an input."""
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n < FEWEST_ROWS:
        rows = torch.cat([rows, rows.new_zeros(FEWEST_ROWS - n, rows.shape[1])])
    out = torch.ops.mkldnn._linear_pointwise(rows, _packed[key], None, "none", [], "")
    return out[:n].reshape(*x.shape[:-1], out_features)


@packed_linear.register_fake
def _packed_linear_shape(x: torch.Tensor, key: int, out_features: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


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
