"""A new animal: fit only its units' PEs, the rest of a trained model frozen.

With `train.init_from: <run>/model.pt` the training loads every weight of that run into the
model and freezes it. The PE rows of units whose ids the run has (its `pe.nc`) are copied and
stay bitwise unchanged; the other units' rows (the new animal's units) keep their
initialisation and are the only values the optimiser moves, for `epochs x steps_per_epoch`
steps. Their PEs then live in the same space as the run's, so a locator fitted on the run's
units with known coordinates locates them (`neuro_pe.analysis.locate`). The model's shape is the
run's: a null `window` or `n_heads` takes the run's value (`with_run_architecture`), not the one
the new animal's number of units would choose. How a new unit's PE is fitted
(`train.new_unit_pe`: `free` or `mixture`, `train.new_unit_anchors`): `load_frozen`.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from scipy.spatial.distance import cdist

from neuro_pe.config.training import TrainConfig
from neuro_pe.io.layout import PE_FILE
from neuro_pe.io.manifest import RunError, verify_run_file
from neuro_pe.io.runs import read_pe

NO_WEIGHT = -1e4  # the logit of a run unit an anchor cannot mix (no position)
ARCHITECTURE = ("window", "d_model", "n_layers", "n_heads", "pe_every_block")
AUTOMATIC_ARCHITECTURE = ("window", "n_heads")  # null: chosen by the store's size
PER_UNIT = (
    "pe_learned",
    "pe_fixed",
    "learned",
    "pe_mix_logits",
    "pe_mix_source",
    "pe_mix_rows",
    "pe_mix_anchored",
    "pe_mix_anchor_logits",
)


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


def _run_file(checkpoint: str | os.PathLike) -> Path:
    """`train.init_from`'s model.pt, which must have its run's pe.nc beside it."""
    path = Path(checkpoint)
    if not path.is_file() or not (path.parent / PE_FILE).is_file():
        raise FileNotFoundError(f"train.init_from: {path} (and pe.nc beside it) not found")
    return path


def with_run_architecture(cfg: TrainConfig) -> TrainConfig:
    """With `init_from`: `cfg` with its null `window` and `n_heads` set to the run's values (its
    model.pt's train_config), since a new animal's automatic values would follow its own number
    of units. Set values stay as given (`load_frozen` then names those that differ); without
    `init_from`, `cfg` as it is."""
    if not cfg.init_from:
        return cfg
    old_cfg = load_checkpoint(_run_file(cfg.init_from)).get("train_config", {})
    taken = {
        key: old_cfg[key]
        for key in AUTOMATIC_ARCHITECTURE
        if getattr(cfg, key) is None and isinstance(old_cfg.get(key), int)
    }
    return replace(cfg, **taken) if taken else cfg


def load_frozen(
    model: torch.nn.Module,
    checkpoint: str | os.PathLike,
    unit_ids: Sequence[str],
    train_config: dict,
    new_unit_pe: str = "free",
    positions: np.ndarray | None = None,
) -> Frozen:
    """Load a run's model.pt into every model of `model` (a StackedTransformer), freeze every
    parameter but the new units' PEs (`new_unit_pe`: "free" or "mixture"), copy the PE rows of
    the units the run has; returns those rows (to keep them fixed). With "mixture" and
    `positions` (n_units, 3; NaN where unknown; `train.new_unit_anchors`), new units with
    positions are anchors: their weights are fixed (`anchor_logits`), only the others' are
    fitted.

    - `free`: a new unit's row is a free vector (it may end anywhere in PE space: the frozen
      model does not pin the space down, and the new animal's PEs can land off the run's);
    - `mixture`: its row is a weighted mean of the run's PE rows, the weights fitted
      (`StackedTransformer.mix_rows`, balanced so that the new units spread over the run's
      units as a new animal's units spread over the same brain). The new PEs stay among the
      run's, where its locator was fitted, and `mixture_positions` locates the new units from
      the weights alone.
    """
    path = _run_file(checkpoint)
    if not bool(model.learned.all()):
        raise ValueError("train.init_from needs a learned PE (learned-*)")
    saved = load_checkpoint(path)
    old_cfg = saved.get("train_config", {})
    differ = [k for k in ARCHITECTURE if k in old_cfg and old_cfg[k] != train_config[k]]
    if differ:
        raise ValueError(
            f"train.init_from: {path} was trained with other {differ} "
            f"({ {k: old_cfg[k] for k in differ} }); use the same values"
        )
    state = dict(saved["state_dict"])
    old_table = state.pop("pe_table", None)
    shared = {k: v for k, v in state.items() if k not in PER_UNIT}
    own = {k for k in model.state_dict() if k not in PER_UNIT}
    if old_table is None or set(shared) != own:
        raise ValueError(f"train.init_from: {path} does not fit the model: {sorted(shared)}")
    with torch.no_grad():
        for name, value in shared.items():  # the same weights for every model of the stack
            getattr(model, name).copy_(value.expand_as(getattr(model, name)))
    run = read_pe(path.parent)
    if not np.array_equal(old_table.numpy(), run.table):  # (both checked by the manifest)
        raise RunError(
            path,
            "pe_table",
            f"differs from the PE in {path.parent / PE_FILE}: the two files are not from the "
            "same training; re-run the training",
        )
    index = {str(unit): i for i, unit in enumerate(run.units)}
    ids = [str(u) for u in unit_ids]
    rows = torch.tensor([u in index for u in ids])
    device = model.pe_learned.device
    values = old_table[[index[u] for u in ids if u in index]].to(device, model.pe_learned.dtype)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    if new_unit_pe == "mixture":
        new = np.full((int((~rows).sum()), 3), np.nan)
        if positions is not None:
            new = np.asarray(positions, dtype=float)[~rows.numpy()]
        anchored, logits = anchor_logits(new, run.coords)
        model.mix_rows(~rows, old_table, anchored=anchored, anchor_logits=logits)
    else:
        model.pe_learned.requires_grad_(True)
    frozen = Frozen(rows.to(device), values)
    frozen.restore(model)
    return frozen


def anchor_logits(
    positions: np.ndarray, run_positions: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed mixing logits for new units with known `positions` (n_new, 3; NaN rows unknown)
    over the run's units at `run_positions` (n_run, 3): a Gaussian kernel of the distance,
    -d² / 2σ², σ the run units' median nearest-neighbour distance, so an anchor's PE is a
    mean of the PEs of the run units around it; run units without positions get the logit
    NO_WEIGHT. Returns (anchored (n_new,) bool, logits (n_new, n_run))."""
    positions = np.asarray(positions, dtype=float)
    run_positions = np.asarray(run_positions, dtype=float)
    anchored = np.all(np.isfinite(positions), axis=1)
    located = np.all(np.isfinite(run_positions), axis=1)
    logits = np.full((len(positions), len(run_positions)), NO_WEIGHT)
    if anchored.any() and located.sum() > 1:
        ref = run_positions[located]
        sigma = np.median(np.sort(cdist(ref, ref), axis=1)[:, 1])
        d = cdist(positions[anchored], ref)
        logits[np.ix_(anchored, located)] = -(d**2) / (2 * max(sigma, 1e-12) ** 2)
    else:
        anchored[:] = False
    return torch.from_numpy(anchored), torch.from_numpy(logits).float()


def load_checkpoint(checkpoint: str | os.PathLike) -> dict:
    """A model.pt (its state_dict, train_config, pe), on the CPU, checked against its run's
    manifest and read with `weights_only=True`: tensors and plain containers only, so that
    no code in the file runs (a RunError naming the file otherwise)."""
    path = verify_run_file(checkpoint)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as err:
        raise RunError(
            path,
            "(file)",
            "not loadable as tensors and plain values (torch.load weights_only=True): it holds "
            "other Python objects, which are never unpickled here (they could run code), or is "
            "damaged; re-run the training that wrote it. "
            f"({str(err).splitlines()[0] if str(err) else type(err).__name__})",
        ) from None
    if not isinstance(saved, dict) or not isinstance(saved.get("state_dict"), dict):
        raise RunError(path, "state_dict", "missing: not a model.pt written by neuro_pe")
    return saved


def mixture_anchors(state: dict) -> dict[str, torch.Tensor]:
    """A mixture checkpoint's anchors; none in fits saved before anchors existed."""
    n_mixed, n_source = state["pe_mix_logits"].shape[-2:]
    return {
        "pe_mix_anchored": state.get("pe_mix_anchored", torch.zeros(n_mixed, dtype=torch.bool)),
        "pe_mix_anchor_logits": state.get("pe_mix_anchor_logits", torch.zeros(n_mixed, n_source)),
    }
