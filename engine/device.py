"""Where tensors live, how to wait for them, and how much memory is free.

Below every layer (it imports nothing from engine/): forward/ times its passes with `sync`, load/ picks the
device and dtype and checks a model fits. The machine in words, and the threads the app serves with, are
physics/machine.py."""

from __future__ import annotations

import os

import torch


def pick_device(requested: str | None = None) -> torch.device:
    """CUDA if present, else Apple MPS, else CPU; `requested` ("cpu", "cuda", "mps") overrides."""
    if requested and requested != "auto":
        if requested.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError("CUDA was requested but no CUDA GPU is available")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise ValueError("MPS was requested but Apple MPS is not available")
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def pick_dtype(device: torch.device, requested: str | torch.dtype | None = None) -> torch.dtype:
    """fp32 on the CPU; bf16 on a GPU that supports it, else fp16; `requested` overrides."""
    if isinstance(requested, torch.dtype):
        return requested
    if requested and requested != "auto":
        if requested not in DTYPES:
            raise ValueError(f"unknown dtype {requested!r}: choose one of {sorted(DTYPES)}")
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def sync(device: torch.device) -> None:
    """Wait until queued device work is done, so a clock read measures real work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def available_bytes(device: torch.device) -> int:
    """Free memory where the weights would go: VRAM on CUDA, else system RAM.

    `DECODE_LAB_MEMORY_LIMIT` (bytes) caps the figure, so a teacher can bound
    what the server may load.
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    else:
        free = _mem_available_ram()
    limit = os.environ.get("DECODE_LAB_MEMORY_LIMIT")
    return min(free, int(limit)) if limit else free


def _mem_available_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # macOS: total, the best cheap figure
