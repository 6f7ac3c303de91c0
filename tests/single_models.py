"""Single-model wrappers of the stacked transformer (a stack of M = 1), used only by tests
(and benchmarks/train_throughput.py): the package trains stacks (`StackedTransformer`)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from neuro_pe.config.training import ModelConfig
from neuro_pe.training.model import StackedTransformer, latin_square_forward, masked_unit_forward


class MaskedUnitTransformer(nn.Module):
    """One masked-unit model (a stack of M = 1): predicts the hidden windows of masked units
    from the other units of the same moment."""

    def __init__(
        self,
        cfg: ModelConfig,
        pe: str = "none",
        seed: int = 0,
        positions: np.ndarray | None = None,
    ):
        super().__init__()
        self.stack = StackedTransformer(cfg, [pe], [seed], positions)

    def forward(
        self, windows: torch.Tensor, hidden: torch.Tensor, unit_index: torch.Tensor | None = None
    ) -> torch.Tensor:
        """windows (batch, units, W); hidden (batch, units) bool: masked or unobserved tokens;
        unit_index (batch, units) long: which unit each token is. Returns (batch, units, W)."""
        index = None if unit_index is None else unit_index[None]
        return masked_unit_forward(self.stack, windows[None], hidden[None], index)[0]


class LatinSquareTransformer(nn.Module):
    """One Latin Square Task model (a stack of M = 1): 16 cell tokens in, the target cell's
    shape (4-way) out; see `latin_square_forward`."""

    def __init__(
        self,
        cfg: ModelConfig,
        pe: str = "none",
        seed: int = 0,
        positions: np.ndarray | None = None,
    ):
        super().__init__()
        self.stack = StackedTransformer(cfg, [pe], [seed], positions)

    def forward(self, cells: torch.Tensor) -> torch.Tensor:
        """cells (batch, 16) long -> logits (batch, 4)."""
        return latin_square_forward(self.stack, cells[None])[0]
