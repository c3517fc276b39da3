"""The machine the passes run on: its name in words for every report, the threads the app serves with, and the
memory a big run gives back.

The core's device helpers (pick the device and dtype, wait for it, the memory free) are engine/device.py."""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch


def describe(device: torch.device) -> str:
    """The device in words, for reports: 'NVIDIA H100 80GB HBM3 (cuda)' or 'cpu: Intel(R) Xeon(R) Processor
    (x86_64, 2 threads, 260 MiB last-level cache)' (the processor and its cache where Linux says them)."""
    import platform

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (cuda)"
    if device.type == "mps":
        return "Apple GPU (mps)"
    name, cache = _cpu_facts()
    extra = f", {cache} last-level cache" if cache else ""
    n = torch.get_num_threads()
    return f"cpu{': ' + name if name else ''} ({platform.machine()}, {n} thread{'' if n == 1 else 's'}{extra})"


def _cpu_facts() -> tuple[str, str]:
    """The processor's model name and last-level cache size as Linux reports them ('' where it does not)."""
    name = cache = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    for index in ("index3", "index2"):  # the last level Linux lists: '266240K' is 260 MiB
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/{index}/size") as f:
                text = f.read().strip()
            kib = int(text.rstrip("K")) if text.endswith("K") else int(text.rstrip("M")) * 1024
            cache = f"{kib / 1024:.0f} MiB" if kib >= 1024 else f"{kib} KiB"
            break
        except (OSError, ValueError):
            continue
    return name, cache


def release_memory() -> None:
    """Give freed memory back to the system after a big run (a cache-off race holds hundreds of MiB).

    Python's collector frees the tensors; the C allocator then keeps the pages unless asked to return them.
    """
    import ctypes
    import gc
    import sys

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass


SMALL_MODEL_PARAMS = 100e6  # below this, one decode step is too little work to share between CPU threads


def serving_threads(parameters: int, cores: int | None = None) -> int:
    """CPU threads for forward passes in the app server.

    The server's passes are queued one at a time, and the browser (on a teacher's laptop,
    the same machine) needs cores too. With every core given to torch, its threads stall
    waiting for each other whenever the browser runs: measured here (2 cores, race of 100
    tokens, browser on the same machine), a cached decode step took 27 ms with 2 threads and
    6 ms with 1. A small model gains nothing from more threads even alone (5.3 ms either
    way), so it gets one; a large one keeps all cores but one.
    """
    cores = cores or os.cpu_count() or 1
    if parameters < SMALL_MODEL_PARAMS:
        return 1
    return max(1, cores - 1)


def threads() -> int:
    """torch's intra-op threads now: what a probe or a pass on the CPU runs with."""
    return torch.get_num_threads()


def use_serving_threads(parameters: int) -> int:
    """Set torch's intra-op threads for serving (process-wide) and return the number; CPU only matters."""
    n = serving_threads(parameters)
    torch.set_num_threads(n)
    return n


@contextmanager
def serving_cores(parameters: float):
    """torch's intra-op threads as the app serves a model of this many parameters (`serving_threads`), restored
    afterwards (process-wide: hold the model's turn while they are set)."""
    before = torch.get_num_threads()
    torch.set_num_threads(serving_threads(int(parameters)))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
