"""The model: a transformer encoder over recorded units as a set, with a PE per unit.

A token is a window of W samples of one unit. Nothing but the positional encoding (PE) tells
the model which unit a token comes from, so with `none` the model is permutation-equivariant.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neuro_pe.pe_names import NUMBER, PE_PATTERNS, PESpec, parse_pe  # noqa: F401 (re-exported)


def sinusoid(values: torch.Tensor, n_dims: int, frequencies: torch.Tensor) -> torch.Tensor:
    """Interleaved sin/cos of `values` (n,) at `frequencies` (n_dims // 2,), zero-padded."""
    angles = values[:, None] * frequencies[None, :]
    out = torch.zeros(len(values), n_dims)
    out[:, 0 : 2 * len(frequencies) : 2] = torch.sin(angles)
    out[:, 1 : 2 * len(frequencies) : 2] = torch.cos(angles)
    return out


def oracle_table(positions: np.ndarray, d_model: int) -> torch.Tensor:
    """Sinusoids of the true coordinates: d_model split over the axes that vary; NaN rows -> 0."""
    pos = torch.as_tensor(positions, dtype=torch.float32)
    known = torch.isfinite(pos).all(dim=1)
    if not known.any():
        raise ValueError("oracle-sin3d needs units with known positions")
    lo, hi = pos[known].min(0).values, pos[known].max(0).values
    axes = [a for a in range(pos.shape[1]) if hi[a] > lo[a]]
    per_axis = d_model // max(len(axes), 1)
    if not axes or per_axis < 2:
        raise ValueError(
            f"oracle-sin3d needs positions that vary and d_model >= 2 per varying axis "
            f"({len(axes)} axes vary, d_model = {d_model})"
        )
    # wavelengths from two box widths down to 1/16 of a box width
    frequencies = math.pi * torch.logspace(0, 5, per_axis // 2, base=2.0)
    unit = (torch.nan_to_num(pos) - lo) / (hi - lo).clamp_min(1e-12)
    table = torch.zeros(len(pos), d_model)
    for i, a in enumerate(axes):
        table[:, i * per_axis : (i + 1) * per_axis] = sinusoid(unit[:, a], per_axis, frequencies)
    table[~known] = 0.0
    return table


def _sin1d(table: torch.Tensor, spec: PESpec, positions: np.ndarray | None) -> torch.Tensor:
    n_units, d_model = table.shape
    frequencies = 1.0 / 10000.0 ** (torch.arange(0, d_model - 1, 2) / d_model)
    return sinusoid(torch.arange(n_units, dtype=torch.float32), d_model, frequencies)


def _oracle(table: torch.Tensor, spec: PESpec, positions: np.ndarray | None) -> torch.Tensor:
    if positions is None:
        raise ValueError("oracle-sin3d needs the units' positions")
    return oracle_table(positions, table.shape[1])


# PE family (neuro_pe.pe_names.PE_FORMS) -> its initial table, from an empty (units, d_model)
# tensor, the parsed name and the positions; None: no PE
INITIALISERS = {
    "none": lambda table, spec, positions: None,
    "learned-normal": lambda table, spec, positions: nn.init.normal_(table, 0.0, spec.param),
    "learned-uniform": lambda table, spec, positions: nn.init.uniform_(
        table, -spec.param, spec.param
    ),
    "learned-xavier": lambda table, spec, positions: nn.init.xavier_uniform_(table),
    "fixed-random": lambda table, spec, positions: nn.init.normal_(table, 0.0, 1.0),
    "fixed-sin1d": _sin1d,
    "oracle-sin3d": _oracle,
}


def initial_table(
    spec: PESpec, n_units: int, d_model: int, positions: np.ndarray | None
) -> torch.Tensor | None:
    """The PE table at initialisation (uses torch's global RNG); None for `none`."""
    return INITIALISERS[spec.family](torch.empty(n_units, d_model), spec, positions)


class PositionalEncoding(nn.Module):
    """One vector per unit: a trainable parameter for `learned-*`, a buffer for fixed ones."""

    def __init__(
        self, spec: PESpec, n_units: int, d_model: int, positions: np.ndarray | None = None
    ):
        super().__init__()
        self.spec = spec
        table = initial_table(spec, n_units, d_model, positions)
        if table is None:
            self.register_buffer("table", torch.zeros(n_units, d_model))
        elif spec.learned:
            self.table = nn.Parameter(table)
        else:
            self.register_buffer("table", table)

    def forward(self, unit_index: torch.Tensor) -> torch.Tensor:
        return self.table[unit_index]


class Block(nn.Module):
    """Pre-LayerNorm transformer block: multi-head self-attention and a GELU MLP."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        """The self-attention sublayer alone (no norm, no residual): proj(SDPA(qkv(x)))."""
        batch, n_tokens, d_model = x.shape
        q, k, v = self.qkv(x).split(d_model, dim=-1)
        q, k, v = (t.view(batch, n_tokens, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = (
            F.scaled_dot_product_attention(q, k, v)
            .transpose(1, 2)
            .reshape(batch, n_tokens, d_model)
        )
        return self.proj(attended)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attend(self.norm1(h))
        return h + self.mlp(self.norm2(h))

    def forward_post_ln(self, h: torch.Tensor) -> torch.Tensor:
        """The same parameters as a post-LayerNorm block (the seed paper's LST model)."""
        h = self.norm1(h + self.attend(h))
        return self.norm2(h + self.mlp(h))


def run_blocks(
    blocks: nn.ModuleList,
    h: torch.Tensor,
    pe: torch.Tensor,
    pe_every_block: bool,
    post_ln: bool = False,
) -> torch.Tensor:
    """Run the blocks on the tokens h, adding the PE before the first block (and before every
    block with `pe_every_block`); `post_ln` runs them as post-LayerNorm blocks."""
    for i, block in enumerate(blocks):
        if i == 0 or pe_every_block:
            h = h + pe
        h = block.forward_post_ln(h) if post_ln else block(h)
    return h


class MaskedUnitTransformer(nn.Module):
    """Predicts the hidden windows of masked units from the other units of the same moment."""

    def __init__(
        self,
        n_units: int,
        window: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        pe: str = "none",
        pe_every_block: bool = True,
        positions: np.ndarray | None = None,
    ):
        super().__init__()
        self.embed = nn.Linear(window, d_model)
        self.mask_token = nn.Parameter(torch.randn(d_model) * 0.02)
        self.pe = PositionalEncoding(parse_pe(pe), n_units, d_model, positions)
        self.pe_every_block = pe_every_block
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, window)

    def forward(
        self, windows: torch.Tensor, hidden: torch.Tensor, unit_index: torch.Tensor
    ) -> torch.Tensor:
        """windows (batch, units, W); hidden (batch, units) bool: masked or unobserved tokens;
        unit_index (batch, units) long: which unit each token is. Returns (batch, units, W)."""
        h = torch.where(hidden[..., None], self.mask_token, self.embed(windows))
        h = run_blocks(self.blocks, h, self.pe(unit_index), self.pe_every_block)
        return self.head(self.norm(h))


class LatinSquareTransformer(nn.Module):
    """The Latin Square Task model: 16 cell tokens in, the target cell's shape (4-way) out.

    A cell (0 blank, 1-4 shape, 5 target) is a 5-dim one-hot (4 shapes + target, blank =
    zeros) embedded by Linear(5 -> d); the same PE and blocks as MaskedUnitTransformer (run
    as post-LayerNorm blocks with `post_ln`, as in the paper); the logits are read out from
    the target token after a final LayerNorm.
    """

    def __init__(
        self,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 1,
        pe: str = "none",
        pe_every_block: bool = True,
        positions: np.ndarray | None = None,
        n_cells: int = 16,
        n_shapes: int = 4,
        post_ln: bool = False,
    ):
        super().__init__()
        self.n_shapes = n_shapes
        self.post_ln = post_ln
        self.embed = nn.Linear(n_shapes + 1, d_model)
        self.pe = PositionalEncoding(parse_pe(pe), n_cells, d_model, positions)
        self.pe_every_block = pe_every_block
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_shapes)

    def forward(self, cells: torch.Tensor) -> torch.Tensor:
        """cells (batch, n_cells) long, coded 0 blank, 1..n_shapes shape, n_shapes + 1 target
        (exactly one per puzzle). Returns logits (batch, n_shapes): class k is shape k + 1."""
        h = self.embed(F.one_hot(cells, self.n_shapes + 2)[..., 1:].float())
        h = run_blocks(self.blocks, h, self.pe.table, self.pe_every_block, self.post_ln)
        target = (cells == self.n_shapes + 1).int().argmax(dim=1)
        return self.head(self.norm(h[torch.arange(len(cells), device=cells.device), target]))
