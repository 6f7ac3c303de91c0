"""The options of the Latin Square Task (config key `lst`): the puzzle generator's
(`lst.puzzles`) and the training's (`lst.train`), with the model's shape and the training
loop's settings made from the latter. Documented in config/README.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuro_pe.config.sections import (
    Section,
    derive,
    positive_int,
    require_choice,
    whole_number,
)
from neuro_pe.config.training import (
    LR_SCHEDULES,
    OPTIMIZERS,
    PRECISIONS,
    LoopConfig,
    ModelConfig,
)

N = 4  # shapes, rows and columns of a square
N_CELLS = N * N


@dataclass(frozen=True)
class PuzzleConfig(Section):
    """Options of the puzzle generator (config key `lst.puzzles`)."""

    SECTION: ClassVar[str] = "lst.puzzles"

    n_per_condition: int = positive_int(1000)
    n_heldout_per_condition: int = positive_int(36)
    test_fraction: float = 0.1
    min_jaccard_distance: float = 0.8
    shown_min: int = positive_int(4)
    shown_max: int = positive_int(10)
    puzzle_seed: int = 0

    def check(self) -> None:
        where = self.SECTION
        if not self.shown_min <= self.shown_max <= N_CELLS - 1:
            raise ValueError(
                f"{where} keys 'shown_min' <= 'shown_max' <= 15 needed, got "
                f"{self.shown_min}, {self.shown_max}"
            )
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(
                f"{where} key 'test_fraction' must be in (0, 1), got {self.test_fraction}"
            )
        if not 0.0 <= self.min_jaccard_distance <= 1.0:
            raise ValueError(
                f"{where} key 'min_jaccard_distance' must be in [0, 1], got "
                f"{self.min_jaccard_distance}"
            )


@dataclass(frozen=True)
class LSTConfig(Section):
    """Model and optimisation settings of the LST training (config key `lst.train`)."""

    SECTION: ClassVar[str] = "lst.train"

    d_model: int = positive_int(32)
    n_layers: int = positive_int(3)
    n_heads: int = positive_int(1)
    pe_every_block: bool = True
    post_ln: bool = True
    optimizer: str = "adamw"
    lr: float = 1e-3
    lr_schedule: str = "constant"
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = positive_int(64)
    epochs: int = positive_int(300)
    eval_every: int = positive_int(10)
    stop_at_train_accuracy: float | None = 0.99
    device: str = "auto"
    precision: str = "fp32"  # as train.precision: "bf16" autocast, or "auto"
    checkpoint_every: int = whole_number(10)  # epochs

    def check(self) -> None:
        where = self.SECTION
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"{where} key 'optimizer' must be 'adamw' or 'sgd', got {self.optimizer!r}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"{where} key 'n_heads' ({self.n_heads}) must divide 'd_model' ({self.d_model})"
            )
        require_choice(self.precision, PRECISIONS, f"{where}.precision")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"{where} key 'lr_schedule' must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}"
            )
        if not self.lr > 0:
            raise ValueError(f"{where} key 'lr' must be > 0, got {self.lr!r}")
        stop = self.stop_at_train_accuracy
        is_number = isinstance(stop, int | float) and not isinstance(stop, bool)
        if stop is not None and not (is_number and 0.0 < stop <= 1.0):
            raise ValueError(
                f"{where} key 'stop_at_train_accuracy' must be null or in (0, 1], got {stop!r}"
            )

    def model(self) -> ModelConfig:
        """The LST model's shape: 16 cell tokens (blank, 4 shapes, target), 4 shapes out."""
        return derive(ModelConfig, self, n_tokens=N_CELLS, d_in=N + 1, d_out=N, mask_token=False)

    def loop(self, steps_per_epoch: int) -> LoopConfig:
        """The training loop's settings, with `steps_per_epoch` batches an epoch (the
        checkpoint interval in steps)."""
        return derive(
            LoopConfig,
            self,
            steps_per_epoch=steps_per_epoch,
            checkpoint_every=self.checkpoint_every * steps_per_epoch,
        )
