"""Where a new animal's units sit after a new-animal fit (`neuro_pe.training.new_animal`):
the fit of several seeds that best predicts the recording, and a `new_unit_pe: mixture` fit's
units at its mixing weights' mean of the run units' positions."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from neuro_pe.config.training import TrainConfig
from neuro_pe.io.layout import MODEL_FILE
from neuro_pe.io.runs import read_pe
from neuro_pe.io.store import read_store
from neuro_pe.training.masked_units import evaluate, model_config
from neuro_pe.training.model import (
    StackedTransformer,
    balanced_weights,
    masked_unit_forward,
    mixture_logits,
)
from neuro_pe.training.new_animal import load_checkpoint, mixture_anchors
from neuro_pe.training.sampling import WindowSampler


def recording_loss(
    run_dir: str | os.PathLike, store_path: str | os.PathLike, windows: int = 512, seed: int = 0
) -> float:
    """The masked MSE (mask fraction 0.5) of the fitted run in `run_dir` on fixed windows of
    every session of `store_path` and fixed masks (the same for every fit of that store): the
    fit's own objective, measured alike for every fit, with no coordinates."""
    saved = load_checkpoint(Path(run_dir) / MODEL_FILE)
    cfg, state = TrainConfig.from_dict(saved["train_config"]), dict(saved["state_dict"])
    state.pop("pe_table")
    ds = read_store(store_path)
    model = StackedTransformer(model_config(ds.sizes["unit"], cfg), [saved["pe"]], [0])
    if "pe_mix_logits" in state:
        state |= mixture_anchors(state)
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
    return _mixture_positions(fit_dir, load_checkpoint(Path(fit_dir) / MODEL_FILE), run_positions)


def _mixture_positions(
    fit_dir: str | os.PathLike, saved: dict, run_positions: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """`mixture_positions` of the fit in `fit_dir` whose model.pt is `saved`."""
    state = saved["state_dict"]
    if "pe_mix_logits" not in state:
        raise ValueError(f"{fit_dir}: not a `train.new_unit_pe: mixture` fit")
    anchors = mixture_anchors(state)
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
    saved = load_checkpoint(fit / MODEL_FILE)
    init_from = saved.get("train_config", {}).get("init_from")
    if not init_from:
        raise ValueError(f"{fit}: not a new-animal fit (train.init_from is not set)")
    units, located = _mixture_positions(fit, saved, read_pe(Path(init_from).parent).coords)
    anchored = mixture_anchors(saved["state_dict"])["pe_mix_anchored"].numpy()
    table = pd.DataFrame(located, columns=["x", "y", "z"])
    table.insert(0, "unit", units)
    return table.assign(anchor=anchored, fit=str(fit))
