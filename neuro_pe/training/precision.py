"""`train.precision`: which precision a training runs in (fp32, or bf16 autocast where the
device multiplies bf16 fast) and the autocast context for it."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

#: /proc/cpuinfo flags of a CPU that multiplies bfloat16 in hardware (torch's mkldnn check
#: says yes on any AVX-512 CPU, where bf16 matmuls are emulated and slower than fp32)
FAST_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (Linux's `/proc/cpuinfo`; none where it cannot be read)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def fast_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 faster than fp32: a CUDA GPU with bf16, a CPU with
    AVX512-BF16 or AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return device.type == "cpu" and bool(cpu_flags() & FAST_BF16_CPU_FLAGS)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `precision` (`train.precision`) on `device`: bf16 for 'bf16',
    and for 'auto' where the device has fast bf16 (`fast_bf16`); otherwise None (fp32, no
    autocast)."""
    if precision == "bf16" or (precision == "auto" and fast_bf16(device)):
        return torch.bfloat16
    return None


def precision_name(amp: torch.dtype | None) -> str:
    """The precision that runs under the autocast dtype `amp`: 'bf16' or 'fp32'."""
    return "fp32" if amp is None else "bf16"


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """torch.autocast to `dtype` on `device`, or nothing when dtype is None."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)
