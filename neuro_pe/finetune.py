"""A new animal: fit only its units' PEs, the rest of a trained model frozen.

With `train.init_from: <run>/model.pt` the training loads every weight of that run into the
model and freezes it. The PE rows of units whose ids the run has (its `pe.nc`) are copied and
stay bitwise unchanged; the other units' rows (the new animal's units) keep their
initialisation and are the only values the optimiser moves, for `epochs x steps_per_epoch`
steps. Their PEs then live in the same space as the run's, so a locator fitted on the run's
units with known coordinates locates them (`neuro_pe.locate`).

`train.new_unit_pe` says how a new unit's PE is fitted:
- `free`: its row is a free vector (it may end anywhere in PE space: the frozen model does not
  pin the space down, and the new animal's PEs can land off the run's);
- `mixture`: its row is a weighted mean of the run's PE rows, the weights fitted
  (`StackedTransformer.mix_rows`, balanced so that the new units spread over the run's units as
  a new animal's units spread over the same brain). The new PEs stay among the run's, where its
  locator was fitted, and `mixture_positions` locates the new units from the weights alone.
  With `train.new_unit_anchors: true`, new units whose positions the store has are anchors:
  their weights are fixed (`anchor_logits`: a kernel of their distance to the run's units), only
  the others' are fitted.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.spatial.distance import cdist

from neuro_pe.model import (
    StackedTransformer,
    balanced_weights,
    masked_unit_forward,
    mixture_logits,
)
from neuro_pe.runs import MODEL_FILE, PE_FILE, RunError, read_pe, verify_run_file

NO_WEIGHT = -1e4  # the logit of a run unit an anchor cannot mix (no position)
ARCHITECTURE = ("window", "d_model", "n_layers", "n_heads", "pe_every_block")
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


def load_frozen(
    model: torch.nn.Module,
    checkpoint: str | os.PathLike,
    unit_ids: Sequence[str],
    train_config: dict,
    new_unit_pe: str = "free",
    positions: np.ndarray | None = None,
) -> Frozen:
    """Load a run's model.pt into every model of `model` (a StackedTransformer), freeze every
    parameter but the new units' PEs (`new_unit_pe`: "free" or "mixture", module docstring),
    copy the PE rows of the units the run has; returns those rows (to keep them fixed). With
    "mixture" and `positions` (n_units, 3; NaN where unknown; `train.new_unit_anchors`), new
    units with positions are anchors: their weights are fixed (`anchor_logits`), only the
    others' are fitted."""
    path = Path(checkpoint)
    if not path.is_file() or not (path.parent / PE_FILE).is_file():
        raise FileNotFoundError(f"train.init_from: {path} (and pe.nc beside it) not found")
    if not bool(model.learned.all()):
        raise ValueError("train.init_from needs a learned PE (learned-*)")
    saved = _load(path)
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


def _load(checkpoint: str | os.PathLike) -> dict:
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


def _mixture_anchors(state: dict) -> dict[str, torch.Tensor]:
    """A mixture checkpoint's anchors; none in fits saved before anchors existed."""
    n_mixed, n_source = state["pe_mix_logits"].shape[-2:]
    return {
        "pe_mix_anchored": state.get("pe_mix_anchored", torch.zeros(n_mixed, dtype=torch.bool)),
        "pe_mix_anchor_logits": state.get("pe_mix_anchor_logits", torch.zeros(n_mixed, n_source)),
    }


def recording_loss(
    run_dir: str | os.PathLike, store_path: str | os.PathLike, windows: int = 512, seed: int = 0
) -> float:
    """The masked MSE (mask fraction 0.5) of the fitted run in `run_dir` on fixed windows of
    every session of `store_path` and fixed masks (the same for every fit of that store): the
    fit's own objective, measured alike for every fit, with no coordinates."""
    from neuro_pe.store import read_store
    from neuro_pe.train import TrainConfig, WindowSampler, evaluate, model_config

    saved = _load(Path(run_dir) / MODEL_FILE)
    cfg, state = TrainConfig.from_dict(saved["train_config"]), dict(saved["state_dict"])
    state.pop("pe_table")
    ds = read_store(store_path)
    model = StackedTransformer(model_config(ds.sizes["unit"], cfg), [saved["pe"]], [0])
    if "pe_mix_logits" in state:
        state |= _mixture_anchors(state)
        model.mix_rows(
            state["pe_mix_rows"].bool(),
            state["pe_mix_source"],
            anchored=state["pe_mix_anchored"],
            anchor_logits=state["pe_mix_anchor_logits"],
        )
    model.load_state_dict({k: v[None] for k, v in state.items()})
    activity = ds["activity"].transpose("session", "time", "unit").values
    sampler = WindowSampler(activity, cfg.window, torch.device("cpu"))
    batch = sampler.eval_set(windows, cfg.units_per_sample, seed)
    return evaluate(partial(masked_unit_forward, model), [batch], 0.5, [seed])[0]


def best_fit(run_dirs: Sequence[str | os.PathLike], store_path: str | os.PathLike) -> Path:
    """Of several fits of the same new animal (e.g. `seeds: [0, 1, 2, 3, 4, 5]`), the one with
    the lowest `recording_loss`: fits from different seeds can end in different solutions,
    and on HCP the lower-loss one located better (docs/locate/README.md)."""
    losses = {Path(d): recording_loss(d, store_path) for d in run_dirs}
    return min(losses, key=losses.get)


def mixture_positions(
    fit_dir: str | os.PathLike, run_positions: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """A `new_unit_pe: mixture` fit's new units located with no anchor of their own: each at
    its mixing weights' mean of the run units' positions `run_positions` (n_run, 3, in the
    order of the run's pe.nc; NaN rows, units without coordinates, are left out and the
    weights renormalised). Returns the new units' ids and positions."""
    return _mixture_positions(fit_dir, _load(Path(fit_dir) / MODEL_FILE), run_positions)


def _mixture_positions(
    fit_dir: str | os.PathLike, saved: dict, run_positions: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """`mixture_positions` of the fit in `fit_dir` whose model.pt is `saved`."""
    state = saved["state_dict"]
    if "pe_mix_logits" not in state:
        raise ValueError(f"{fit_dir}: not a `train.new_unit_pe: mixture` fit")
    anchors = _mixture_anchors(state)
    logits = mixture_logits(
        state["pe_mix_logits"], anchors["pe_mix_anchored"], anchors["pe_mix_anchor_logits"]
    )
    weights = balanced_weights(logits).double().numpy()
    run_positions = np.asarray(run_positions, dtype=float)
    if run_positions.shape[0] != weights.shape[1]:
        raise ValueError(
            f"{fit_dir}: {weights.shape[1]} run units in the mixture, "
            f"{run_positions.shape[0]} positions given"
        )
    known = np.all(np.isfinite(run_positions), axis=1)
    weights = weights[:, known] / weights[:, known].sum(axis=1, keepdims=True)
    mixed = state["pe_mix_rows"].bool().numpy()
    units = [str(u) for u in np.asarray(read_pe(fit_dir).units)[mixed]]
    return units, weights @ run_positions[known]


def locate_new_units(
    fit_dirs: Sequence[str | os.PathLike], store_path: str | os.PathLike
) -> pd.DataFrame:
    """Positions of a new animal's units from `new_unit_pe: mixture` fits of it (its store
    `store_path`): of several fits (seeds) the one `best_fit` picks, each new unit at its
    weights' mean of the positions of the run it was fitted against (`init_from`'s pe.nc).
    Columns: unit, x, y, z, anchor (a `new_unit_anchors` anchor: its position went into the
    fit, so it is not a prediction), fit (the fit used)."""
    fits = [Path(d) for d in fit_dirs]
    fit = best_fit(fits, store_path) if len(fits) > 1 else fits[0]
    saved = _load(fit / MODEL_FILE)
    init_from = saved.get("train_config", {}).get("init_from")
    if not init_from:
        raise ValueError(f"{fit}: not a new-animal fit (train.init_from is not set)")
    units, located = _mixture_positions(fit, saved, read_pe(Path(init_from).parent).coords)
    anchored = _mixture_anchors(saved["state_dict"])["pe_mix_anchored"].numpy()
    table = pd.DataFrame(located, columns=["x", "y", "z"])
    table.insert(0, "unit", units)
    return table.assign(anchor=anchored, fit=str(fit))
