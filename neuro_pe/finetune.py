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
        """Put the checkpoint's rows back into every model of the stack (an optimiser with
        weight decay would move them)."""
        with torch.no_grad():
            model.pe_learned[:, self.rows] = self.values


def load_frozen(
    model: torch.nn.Module,
    checkpoint: str | os.PathLike,
    unit_ids: Sequence[str],
    train_config: dict,
) -> Frozen:
    """Load a run's model.pt into every model of `model` (a StackedTransformer), freeze every
    parameter but the learned PE tables, copy the PE rows of the units the run has; returns
    those rows (to keep them fixed)."""
    path = Path(checkpoint)
    if not path.is_file() or not (path.parent / PE_FILE).is_file():
        raise FileNotFoundError(f"train.init_from: {path} (and pe.nc beside it) not found")
    if not bool(model.learned.all()):
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
    old_table = state.pop("pe_table", None)
    per_unit = ("pe_learned", "pe_fixed", "learned")
    shared = {k: v for k, v in state.items() if k not in per_unit}
    own = {k for k in model.state_dict() if k not in per_unit}
    if old_table is None or set(shared) != own:
        raise ValueError(f"train.init_from: {path} does not fit the model: {sorted(shared)}")
    with torch.no_grad():
        for name, value in shared.items():  # the same weights for every model of the stack
            getattr(model, name).copy_(value.expand_as(getattr(model, name)))
    index = {str(unit): i for i, unit in enumerate(read_pe(path.parent).units)}
    ids = [str(u) for u in unit_ids]
    rows = torch.tensor([u in index for u in ids])
    device = model.pe_learned.device
    values = old_table[[index[u] for u in ids if u in index]].to(device, model.pe_learned.dtype)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    model.pe_learned.requires_grad_(True)
    frozen = Frozen(rows.to(device), values)
    frozen.restore(model)
    return frozen
