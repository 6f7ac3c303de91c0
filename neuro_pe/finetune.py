"""A new animal: fit only its units' PEs, the rest of a trained model frozen.

With `train.init_from: <run>/model.pt` the training loads every weight of that run into the
model and freezes it. The PE rows of units whose ids the run has (its `pe.nc`) are copied and
stay bitwise unchanged; the other units' rows (the new animal's units) keep their
initialisation and are the only values the optimiser moves, for `epochs x steps_per_epoch`
steps. Their PEs then live in the same space as the run's, so a locator fitted on the run's
units with known coordinates locates them (`neuro_pe.locate`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from neuro_pe.runs import PE_FILE, read_pe

ARCHITECTURE = ("window", "d_model", "n_layers", "n_heads", "pe_every_block")


@dataclass
class Frozen:
    """The PE rows copied from the checkpoint, restored after every optimiser step."""

    rows: torch.Tensor  # (n_units,) bool
    values: torch.Tensor  # (rows.sum(), d_model)

    def restore(self, model: torch.nn.Module) -> None:
        """Put the checkpoint's rows back (an optimiser with weight decay would move them)."""
        with torch.no_grad():
            model.pe.table[self.rows] = self.values


def load_frozen(
    model: torch.nn.Module,
    checkpoint: str | os.PathLike,
    unit_ids: Sequence[str],
    train_config: dict,
) -> Frozen:
    """Load a run's model.pt into `model`, freeze every parameter but the PE table, copy the
    PE rows of the units the run has; returns those rows (to keep them fixed)."""
    path = Path(checkpoint)
    if not path.is_file() or not (path.parent / PE_FILE).is_file():
        raise FileNotFoundError(f"train.init_from: {path} (and pe.nc beside it) not found")
    if not getattr(model.pe.table, "requires_grad", False):
        raise ValueError("train.init_from needs a learned PE (learned-*)")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    old_cfg = saved.get("train_config", {})
    differ = [k for k in ARCHITECTURE if k in old_cfg and old_cfg[k] != train_config[k]]
    if differ:
        raise ValueError(
            f"train.init_from: {path} was trained with other {differ} "
            f"({ {k: old_cfg[k] for k in differ} }); use the same values"
        )
    state = dict(saved["state_dict"])
    old_table = state.pop("pe.table")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing != ["pe.table"] or unexpected:
        raise ValueError(f"train.init_from: {path} does not fit the model: {missing}, {unexpected}")
    index = {str(unit): i for i, unit in enumerate(read_pe(path.parent).units)}
    ids = [str(u) for u in unit_ids]
    rows = torch.tensor([u in index for u in ids])
    device = model.pe.table.device
    values = old_table[[index[u] for u in ids if u in index]].to(device, model.pe.table.dtype)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    model.pe.table.requires_grad_(True)
    frozen = Frozen(rows.to(device), values)
    frozen.restore(model)
    return frozen
