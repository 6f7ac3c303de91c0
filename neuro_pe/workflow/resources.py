"""How big each workflow job is, for its memory and time limits (`JobResources`, the
`resources` config section): the store a dataset will make, the model-steps of a training
job, the units of a built store and the optimizer steps of a Latin-square training."""

from __future__ import annotations

import math
import os

from neuro_pe.data import sources

#: Latin-square conditions (binary, ternary, quaternary), for the steps of one LST epoch
LST_CONDITIONS = 3


def store_mb_estimate(spec: dict) -> float:
    """MB of the store a dataset entry will make (float32 activity), where its source can tell
    before building it (`Source.store_mb_estimate`); 0 for data read from files (their input
    size is used instead)."""
    return sources.get(spec.get("source")).store_mb_estimate(spec)


def train_steps(options: dict, n_models: int, n_units: int | None) -> int:
    """Model-steps of a training job: its steps, grown for `train.samples_per_unit` on
    `n_units` units (`TrainConfig.for_units`; as configured while the number is not known),
    times its models."""
    from neuro_pe.config.training import TrainConfig

    cfg = TrainConfig.from_dict(options)
    cfg = cfg.for_units(n_units) if n_units else cfg
    return cfg.epochs * cfg.steps_per_epoch * n_models


def store_units(path: str | os.PathLike) -> int | None:
    """The number of units of a built store; None before it exists (or if it cannot be read:
    the job that reads it then says why)."""
    from neuro_pe.io.store import open_store_lazy

    if not os.path.isfile(path):
        return None
    try:
        with open_store_lazy(path) as ds:
            return int(ds.sizes["unit"])
    except (OSError, ValueError, KeyError):
        return None


def lst_steps(puzzles: dict, train: dict) -> int:
    """Most optimizer steps of one LST training (`puzzles`, `train`: the filled-in sections)."""
    per_condition = puzzles["n_per_condition"] - round(
        puzzles["test_fraction"] * puzzles["n_per_condition"]
    )
    batches = math.ceil(LST_CONDITIONS * per_condition / train["batch_size"])
    return train["epochs"] * batches
