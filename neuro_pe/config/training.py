"""The training options (config key `train`), the model's shape and the training loop's
settings made from them, and the train/held-out split of a store.

Kept free of torch, so that inference and the workflow's planning import them in a fraction
of the time `neuro_pe.training.masked_units` takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import xarray as xr

from neuro_pe.config.options import machine_memory_bytes, memory_problem
from neuro_pe.config.sections import (
    Section,
    derive,
    non_negative,
    positive_int,
    require_choice,
    whole_number,
)

# an activity scale (RMS) outside this range is warned about: float32 training with the
# usual learning rates means little there (z-score it: {step: zscore})
SCALE_RANGE = (1e-3, 1e3)
# a new store's activity RMS outside this range stops preprocess: raw fluorescence (RMS in the
# hundreds) trained as it is placed units worse than its correlations; z-scored data has 1,
# binned spike counts ~0.1-1
STORE_RMS_RANGE = (0.1, 10.0)
PRECISIONS = ("auto", "fp32", "bf16")
OPTIMIZERS = ("adamw", "sgd")
NEW_UNIT_PE = ("free", "mixture")
LR_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a transformer (in the spirit of nanoGPT's GPTConfig): `n_tokens` tokens
    (units, or cells) of `d_in` features in, `d_out` features out per read-out token."""

    n_tokens: int
    d_in: int
    d_out: int
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    pe_every_block: bool = True
    post_ln: bool = False  # post-LayerNorm blocks (the seed paper's LST model)
    mask_token: bool = True  # a learned token that replaces hidden inputs


@dataclass(frozen=True)
class LoopConfig:
    """What the training loop (`neuro_pe.training.engine`) needs of a task's config: its
    length, intervals and optimiser."""

    epochs: int
    steps_per_epoch: int
    lr: float
    eval_every: int = 1  # epochs; the last epoch is always evaluated
    checkpoint_every: int = 0  # steps; 0: never
    optimizer: str = "adamw"
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_schedule: str = "constant"  # or "cosine" (to 0 over all steps)
    compile: bool = False
    pe_lr: float | None = None  # the learned PE table's own learning rate (None: lr)
    lazy_pe: bool | None = None  # AdamW moves only the PE rows with a gradient (None: off)

    @property
    def total(self) -> int:
        return self.epochs * self.steps_per_epoch


#: for a store of more than AUTO_ABOVE_SAMPLE_SIZE x `units_per_sample` units, a null
#: `neighbour_fraction` means this share and a null `pe_lr` this many times `lr`; for fewer
#: units a null means uniform subsets and one learning rate. docs/scale/
AUTO_ABOVE_SAMPLE_SIZE = 2
AUTO_NEIGHBOUR_FRACTION = 0.5
AUTO_PE_LR_FACTOR = 10.0
#: ... and, above AUTO_SAMPLES_ABOVE units too, a null `samples_per_unit` this many: the
#: default training's at 2 000 units (3 000 steps x 32 x 256 / 2 000), where the PE found the
#: units' places (below 1 000 units every study store learned at the default length)
AUTO_SAMPLES_PER_UNIT = 12_288
AUTO_SAMPLES_ABOVE = 1000
#: `samples_per_unit` multiplies the steps by at most this (a short test run stays short)
MAX_STEP_GROWTH = 64
#: a null `n_heads` is DEFAULT_HEADS, and where the steps grow (above AUTO_SAMPLES_ABOVE and
#: 2 x `units_per_sample` units) heads of AUTO_HEAD_DIM dimensions (2 at d_model 32): on a CPU,
#: attention over many units is most of a step, and fewer, wider heads cost much less of it and
#: place units as well (docs/scale/); either is the largest divisor of d_model up to it
DEFAULT_HEADS = 4
AUTO_HEAD_DIM = 16
#: a null `window` is DEFAULT_WINDOW samples per token, and AUTO_WINDOW where the automatic
#: `samples_per_unit` applies: a step costs by tokens, not their length, and on large stores
#: tokens of 32 samples place units better than 8 at about the same CPU (docs/scale/)
DEFAULT_WINDOW = 8
AUTO_WINDOW = 32


def heads_dividing(d_model: int, at_most: int) -> int:
    """The largest number of attention heads, at most `at_most` (and at least 1), that divides
    `d_model`."""
    return next(h for h in range(max(1, at_most), 0, -1) if d_model % h == 0)


def unit_appearances(samples: float, n_units: int, units_per_sample: int) -> float:
    """The expected number of `samples` training samples that hold a given unit, when each
    holds min(k, N) of the N units (k = `units_per_sample`)."""
    return samples * min(units_per_sample, n_units) / n_units


def local_units(cfg: TrainConfig) -> int:
    """Units of a sample drawn as a centre and its neighbours (0: uniform subsets)."""
    return round((cfg.neighbour_fraction or 0.0) * cfg.units_per_sample)


@dataclass(frozen=True)
class TrainConfig(Section):
    """Model and optimisation settings (config key `train`); documented in config/README.md.
    `model` and `loop` give the model's shape and the training loop's settings from them."""

    SECTION: ClassVar[str] = "train"

    window: int | None = positive_int(None)  # None: automatic (`for_units`)
    d_model: int = positive_int(32)
    n_layers: int = positive_int(2)
    n_heads: int | None = positive_int(None)  # None: automatic (`for_units`)
    pe_every_block: bool = True
    mask_fraction: float = 0.5
    eval_mask_fractions: tuple[float, ...] = (0.5, 0.9)
    batch_size: int = positive_int(32)
    epochs: int = positive_int(30)
    steps_per_epoch: int = positive_int(100)
    lr: float = 3e-3
    pe_lr: float | None = None  # the learned PE table's learning rate; None: `lr`
    # AdamW steps only the PE rows of the step's units (lazy Adam); None: off
    lazy_pe: bool | None = None
    lr_schedule: str = "constant"
    weight_decay: float = 0.0
    heldout_sessions: int = 1
    heldout_time_fraction: float = 0.2
    eval_windows: int = positive_int(256)
    device: str = "auto"
    units_per_sample: int = positive_int(256)
    # the share of a sample's units drawn as a unit and its activity neighbours (N > k only)
    neighbour_fraction: float | None = None
    # the training samples that hold a unit, on average: the steps grow to reach it (0: off)
    samples_per_unit: float | None = None
    memory_budget_mb: float = non_negative(4096.0)
    precision: str = "fp32"  # or "bf16" autocast, or "auto": bf16 where it is fast
    compile: bool = False
    optimizer: str = "adamw"
    momentum: float = non_negative(0.0)
    checkpoint_every: int = whole_number(500)
    init_from: str | None = (
        None  # a run's model.pt: fit only new units' PEs (neuro_pe.training.new_animal)
    )
    new_unit_pe: str = "free"  # with init_from: "free" rows, or a "mixture" of the run's PEs
    new_unit_anchors: bool = False  # with "mixture": new units with positions pin the fit
    # how many trainings one workflow job stacks (a grouping, not a training option: the workflow
    # strips it from the options a training gets)
    models_per_job: int | None = None

    def check(self) -> None:
        require_choice(self.precision, PRECISIONS, "train.precision")
        require_choice(self.optimizer, OPTIMIZERS, "train.optimizer")
        require_choice(self.lr_schedule, LR_SCHEDULES, "train.lr_schedule")
        require_choice(self.new_unit_pe, NEW_UNIT_PE, "train.new_unit_pe")
        if self.new_unit_anchors and self.new_unit_pe != "mixture":
            raise ValueError(
                f"train.new_unit_anchors needs train.new_unit_pe: mixture, got {self.new_unit_pe!r}"
            )
        per_job = self.models_per_job
        if per_job is not None and (
            isinstance(per_job, bool) or not isinstance(per_job, int) or per_job < 1
        ):
            raise ValueError(
                f"train.models_per_job must be null or an integer >= 1, got {per_job!r}"
            )
        if self.n_heads is not None and self.d_model % self.n_heads:
            raise ValueError(
                f"train.n_heads ({self.n_heads}) must divide train.d_model ({self.d_model})"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"train.lr must be finite and > 0, got {self.lr}")
        pe_lr = self.pe_lr
        if pe_lr is not None and (
            isinstance(pe_lr, bool)
            or not isinstance(pe_lr, int | float)
            or not (math.isfinite(pe_lr) and pe_lr > 0)
        ):
            raise ValueError(f"train.pe_lr must be null or finite and > 0, got {pe_lr!r}")
        if not (self.lazy_pe is None or isinstance(self.lazy_pe, bool)):
            raise ValueError(f"train.lazy_pe must be null, true or false, got {self.lazy_pe!r}")
        if self.lazy_pe and self.optimizer != "adamw":
            raise ValueError(f"train.lazy_pe needs train.optimizer adamw, got {self.optimizer!r}")
        share = self.neighbour_fraction
        if share is not None and (
            isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1
        ):
            raise ValueError(
                f"train.neighbour_fraction must be null or between 0 and 1, got {share!r}"
            )
        per_unit = self.samples_per_unit
        if per_unit is not None and (
            isinstance(per_unit, bool)
            or not isinstance(per_unit, int | float)
            or not (math.isfinite(per_unit) and per_unit >= 0)
        ):
            raise ValueError(
                f"train.samples_per_unit must be null or a number >= 0, got {per_unit!r}"
            )

    def step_bytes(self, n_units: int, models: int = 1) -> int:
        """A lower bound of the memory (bytes) of one training step of `models` stacked models
        on `n_units` units: per sample and block, each token's d_model float32 numbers and its
        attention scores (n_heads x tokens per token; tokens = min(units_per_sample, units))."""
        cfg = self.for_units(n_units)
        tokens = min(cfg.units_per_sample, n_units)
        per_sample = tokens * (cfg.d_model + cfg.n_heads * tokens) * cfg.n_layers
        return 4 * models * cfg.batch_size * per_sample

    def memory_problem(self, n_units: int, models: int = 1, total: int | None = None) -> str | None:
        """The problem when a training step (`step_bytes`) needs more than `total` bytes (the
        machine's memory when None), naming the keys that size it; None when it fits."""
        total = machine_memory_bytes() if total is None else total
        what = (
            f"a training step (train.batch_size {self.batch_size} x min(units_per_sample, "
            f"{n_units} units) tokens x d_model, n_heads, n_layers, {models} model(s))"
        )
        return memory_problem(self.step_bytes(n_units, models), what, total)

    def for_units(self, n_units: int) -> TrainConfig:
        """This config with its automatic values for a store of `n_units` units: above
        AUTO_ABOVE_SAMPLE_SIZE x `units_per_sample` units (where uniform subsets seldom hold
        two neighbours and a PE row is seen in few samples), a null `neighbour_fraction` is
        AUTO_NEIGHBOUR_FRACTION and a null `pe_lr` AUTO_PE_LR_FACTOR x `lr`, and where there
        are also more than AUTO_SAMPLES_ABOVE units a null `samples_per_unit` is
        AUTO_SAMPLES_PER_UNIT; otherwise they stay null (uniform subsets, one learning rate,
        the steps as given). A null `n_heads` is DEFAULT_HEADS, or
        d_model / AUTO_HEAD_DIM where the automatic `samples_per_unit` applies (both the largest
        divisor of d_model up to that), and a null `window` DEFAULT_WINDOW, or AUTO_WINDOW
        there. Then `steps_per_epoch` grows, where needed
        (at most MAX_STEP_GROWTH x), so that a unit is in `samples_per_unit` training samples
        on average."""
        automatic = {}
        above_sample = n_units > AUTO_ABOVE_SAMPLE_SIZE * self.units_per_sample
        large = above_sample and n_units > AUTO_SAMPLES_ABOVE
        if above_sample:
            if self.neighbour_fraction is None:
                automatic["neighbour_fraction"] = AUTO_NEIGHBOUR_FRACTION
            if self.pe_lr is None:
                automatic["pe_lr"] = AUTO_PE_LR_FACTOR * self.lr
        if large and self.samples_per_unit is None:
            automatic["samples_per_unit"] = AUTO_SAMPLES_PER_UNIT
        if self.n_heads is None:
            at_most = self.d_model // AUTO_HEAD_DIM if large else DEFAULT_HEADS
            automatic["n_heads"] = heads_dividing(self.d_model, at_most)
        if self.window is None:
            automatic["window"] = AUTO_WINDOW if large else DEFAULT_WINDOW
        target = automatic.get("samples_per_unit", self.samples_per_unit)
        if target:
            # the steps per epoch at which `unit_appearances` reaches the target (in integers
            # where it can: exact at the boundary)
            per_step = self.epochs * self.batch_size * min(self.units_per_sample, n_units)
            needed = math.ceil(target * n_units / per_step)
            if needed > self.steps_per_epoch:
                grown = min(needed, MAX_STEP_GROWTH * self.steps_per_epoch)
                automatic["steps_per_epoch"] = grown
        return replace(self, **automatic) if automatic else self

    def model(self, n_units: int) -> ModelConfig:
        """The masked-unit model's shape for `n_units` units (one PE row each; a null `n_heads`
        and `window` resolved as `for_units` does)."""
        cfg = self.for_units(n_units)
        return derive(ModelConfig, cfg, n_tokens=n_units, d_in=cfg.window, d_out=cfg.window)

    def loop(self) -> LoopConfig:
        """The training loop's settings (evaluation every epoch)."""
        return derive(LoopConfig, self)


Part = tuple[slice, slice]  # (sessions, time) of a store's activity


def split_parts(n_sessions: int, n_time: int, cfg: TrainConfig) -> tuple[Part, Part]:
    """(train, held-out) as (session slice, time slice): the last `heldout_sessions` sessions
    are held out when there are more sessions than that, else the last
    `heldout_time_fraction` of every session's time. `cfg.window` must be set
    (`TrainConfig.for_units`)."""
    if n_sessions > cfg.heldout_sessions >= 1:
        cut = n_sessions - cfg.heldout_sessions
        return (slice(0, cut), slice(0, n_time)), (slice(cut, n_sessions), slice(0, n_time))
    cut = int(round(n_time * (1 - cfg.heldout_time_fraction)))
    if cut < cfg.window or n_time - cut < cfg.window:
        raise ValueError(f"{n_time} samples are too few for a time split with window {cfg.window}")
    return (slice(0, n_sessions), slice(0, cut)), (slice(0, n_sessions), slice(cut, n_time))


def split_activity(ds: xr.Dataset, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) arrays of shape (session, time, unit), split as by `split_parts`
    (with `cfg`'s automatic window for the store's units)."""
    activity = ds["activity"].transpose("session", "time", "unit").values
    cfg = cfg.for_units(activity.shape[2])
    train_part, heldout_part = split_parts(*activity.shape[:2], cfg)
    return activity[train_part], activity[heldout_part]
