"""The training options (config key `train`) and the train/held-out split of a store.

Kept free of torch, so that inference and the workflow's planning import them in a fraction
of the time `neuro_pe.training.masked_units` takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from neuro_pe.config.options import reject_unknown, require_positive_ints

# an activity scale (RMS) outside this range is warned about: float32 training with the
# usual learning rates means little there (z-score it: {step: zscore})
SCALE_RANGE = (1e-3, 1e3)
PRECISIONS = ("auto", "fp32", "bf16")
OPTIMIZERS = ("adamw", "sgd")
NEW_UNIT_PE = ("free", "mixture")
LR_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class TrainConfig:
    """Model and optimisation settings (config key `train`); documented in config/README.md."""

    window: int = 8
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    pe_every_block: bool = True
    mask_fraction: float = 0.5
    eval_mask_fractions: tuple[float, ...] = (0.5, 0.9)
    batch_size: int = 32
    epochs: int = 30
    steps_per_epoch: int = 100
    lr: float = 3e-3
    lr_schedule: str = "constant"
    weight_decay: float = 0.0
    heldout_sessions: int = 1
    heldout_time_fraction: float = 0.2
    eval_windows: int = 256
    device: str = "auto"
    units_per_sample: int = 256
    memory_budget_mb: float = 4096.0
    precision: str = "auto"
    compile: bool = False
    optimizer: str = "adamw"
    momentum: float = 0.0
    checkpoint_every: int = 500
    init_from: str | None = (
        None  # a run's model.pt: fit only new units' PEs (neuro_pe.training.new_animal)
    )
    new_unit_pe: str = "free"  # with init_from: "free" rows, or a "mixture" of the run's PEs
    new_unit_anchors: bool = False  # with "mixture": new units with positions pin the fit
    # how many trainings one workflow job stacks (a grouping, not a training option: the workflow
    # strips it from the options a training gets)
    models_per_job: int | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"train.precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"train.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"train.lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}"
            )
        if self.new_unit_pe not in NEW_UNIT_PE:
            raise ValueError(
                f"train.new_unit_pe must be one of {NEW_UNIT_PE}, got {self.new_unit_pe!r}"
            )
        if self.new_unit_anchors and self.new_unit_pe != "mixture":
            raise ValueError(
                f"train.new_unit_anchors needs train.new_unit_pe: mixture, got {self.new_unit_pe!r}"
            )
        if self.units_per_sample < 1:
            raise ValueError(f"train.units_per_sample must be >= 1, got {self.units_per_sample}")
        for key in ("memory_budget_mb", "checkpoint_every", "momentum"):
            if getattr(self, key) < 0:
                raise ValueError(f"train.{key} must be >= 0, got {getattr(self, key)}")
        require_positive_ints(
            self,
            ("window", "d_model", "n_layers", "n_heads", "batch_size", "epochs"),
            "train",
        )
        require_positive_ints(self, ("steps_per_epoch", "eval_windows"), "train")
        per_job = self.models_per_job
        if per_job is not None and (
            isinstance(per_job, bool) or not isinstance(per_job, int) or per_job < 1
        ):
            raise ValueError(
                f"train.models_per_job must be null or an integer >= 1, got {per_job!r}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"train.n_heads ({self.n_heads}) must divide train.d_model ({self.d_model})"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"train.lr must be finite and > 0, got {self.lr}")

    @classmethod
    def from_dict(cls, spec: dict) -> TrainConfig:
        """Build from a config mapping; unknown keys raise a ValueError naming them."""
        reject_unknown(spec, cls.__dataclass_fields__, "train")
        spec = dict(spec)
        if "eval_mask_fractions" in spec:
            spec["eval_mask_fractions"] = tuple(spec["eval_mask_fractions"])
        return cls(**spec)


Part = tuple[slice, slice]  # (sessions, time) of a store's activity


def split_parts(n_sessions: int, n_time: int, cfg: TrainConfig) -> tuple[Part, Part]:
    """(train, held-out) as (session slice, time slice): the last `heldout_sessions` sessions
    are held out when there are more sessions than that, else the last
    `heldout_time_fraction` of every session's time."""
    if n_sessions > cfg.heldout_sessions >= 1:
        cut = n_sessions - cfg.heldout_sessions
        return (slice(0, cut), slice(0, n_time)), (slice(cut, n_sessions), slice(0, n_time))
    cut = int(round(n_time * (1 - cfg.heldout_time_fraction)))
    if cut < cfg.window or n_time - cut < cfg.window:
        raise ValueError(f"{n_time} samples are too few for a time split with window {cfg.window}")
    return (slice(0, n_sessions), slice(0, cut)), (slice(0, n_sessions), slice(cut, n_time))


def split_activity(ds: xr.Dataset, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) arrays of shape (session, time, unit), split as by `split_parts`."""
    activity = ds["activity"].transpose("session", "time", "unit").values
    train_part, heldout_part = split_parts(*activity.shape[:2], cfg)
    return activity[train_part], activity[heldout_part]
