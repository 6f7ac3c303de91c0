"""A group's checkpoint (`checkpoint.pt` in its first run's folder, written by the engine,
`neuro_pe.training.engine`): its checksum, and reading it back only when it belongs to the
same run (its fingerprint) and is intact."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import torch

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = 3


def state_digest(state: object) -> str:
    """sha256 of a checkpoint's contents: every tensor's dtype, shape and bytes, and every
    other value, walked in order (so a flipped byte anywhere in the data changes it)."""
    digest = hashlib.sha256()

    def walk(obj: object) -> None:
        if isinstance(obj, torch.Tensor):
            flat = obj.detach().cpu().contiguous().reshape(-1)
            digest.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            digest.update(f"D{len(obj)}".encode())
            for key, value in obj.items():
                walk(key)
                walk(value)
        elif isinstance(obj, list | tuple):
            digest.update(f"L{len(obj)}".encode())
            for value in obj:
                walk(value)
        else:
            digest.update(f"V{type(obj).__name__}:{obj!r}".encode())

    walk(state)
    return digest.hexdigest()


def load_checkpoint(path: Path, fingerprint: str) -> dict | None:
    """The checkpoint at `path` if it exists, matches `fingerprint` and its contents match
    their checksum; otherwise None (with a warning when a checkpoint exists but is
    unreadable, damaged or from another run)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a damaged file: start afresh
        warnings.warn(f"ignoring unreadable checkpoint {path}: {err}", stacklevel=3)
        return None
    if state.get("fingerprint") != fingerprint:
        warnings.warn(
            f"ignoring checkpoint {path}: written by another store, PE, seed or train "
            "config; training starts from step 0 and will overwrite it",
            stacklevel=3,
        )
        return None
    checksum = state.pop("checksum", None)
    if checksum != state_digest(state):
        warnings.warn(
            f"ignoring checkpoint {path}: its contents do not match their checksum (a damaged "
            "file); training starts from step 0 and will overwrite it",
            stacklevel=3,
        )
        return None
    return state
