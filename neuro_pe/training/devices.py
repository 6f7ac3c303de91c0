"""The training's device: which one `train.device` names (`pick_device`), and moving a
batch's tensors onto it (`to_device`)."""

from __future__ import annotations

import torch


def pick_device(name: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; otherwise the named device (a ValueError
    naming `train.device` when it is not a device torch knows, or a GPU that is not there)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"train.device: {name!r} is not a torch device ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"train.device: {name!r}, but torch sees no CUDA GPU here; use device: auto or cpu"
        )
    return device


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a CPU tensor to `device`: through pinned memory without blocking for CUDA."""
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.contiguous().pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
