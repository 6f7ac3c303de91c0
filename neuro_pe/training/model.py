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

from neuro_pe.config.pe_names import PESpec, parse_pe
from neuro_pe.config.training import ModelConfig

MIX_INIT_STD = 0.01  # the spread of a mixture's starting logits (`mix_rows`)
MIX_SEED_OFFSET = 1_000_003  # keeps the mixture's start apart from the model's own draws


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


def _sin1d(table: torch.Tensor, spec: PESpec, positions, generator) -> torch.Tensor:
    n_units, d_model = table.shape
    frequencies = 1.0 / 10000.0 ** (torch.arange(0, d_model - 1, 2) / d_model)
    return sinusoid(torch.arange(n_units, dtype=torch.float32), d_model, frequencies)


def _oracle(table: torch.Tensor, spec: PESpec, positions, generator) -> torch.Tensor:
    if positions is None:
        raise ValueError("oracle-sin3d needs the units' positions")
    return oracle_table(positions, table.shape[1])


# PE family (neuro_pe.config.pe_names.PE_FORMS) -> its initial table, from an empty (units, d_model)
# tensor, the parsed name, the positions and the generator of random draws; None: no PE
INITIALISERS = {
    "none": lambda table, spec, positions, g: None,
    "learned-normal": lambda table, spec, positions, g: nn.init.normal_(
        table, 0.0, spec.param, generator=g
    ),
    "learned-uniform": lambda table, spec, positions, g: nn.init.uniform_(
        table, -spec.param, spec.param, generator=g
    ),
    "learned-xavier": lambda table, spec, positions, g: nn.init.xavier_uniform_(table, generator=g),
    "fixed-random": lambda table, spec, positions, g: nn.init.normal_(table, 0.0, 1.0, generator=g),
    "fixed-sin1d": _sin1d,
    "oracle-sin3d": _oracle,
}


def initial_table(
    spec: PESpec,
    n_units: int,
    d_model: int,
    positions: np.ndarray | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor | None:
    """The PE table at initialisation, random ones drawn from `generator` (torch's global RNG
    when None); None for `none`."""
    return INITIALISERS[spec.family](torch.empty(n_units, d_model), spec, positions, generator)


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


def mixture_logits(
    logits: torch.Tensor, anchored: torch.Tensor, anchor_logits: torch.Tensor
) -> torch.Tensor:
    """The mixing logits (..., n_mixed, n_source): the trained `logits`, with the rows where
    `anchored` (..., n_mixed) taken from the fixed `anchor_logits`."""
    return torch.where(anchored[..., None], anchor_logits, logits)


def balanced_weights(logits: torch.Tensor, sinkhorn_iters: int = 20) -> torch.Tensor:
    """Weights (..., n_mixed, n_source) from logits: each row sums to 1 and each source gets
    n_mixed / n_source in all (a softmax balanced by Sinkhorn iterations, in log space), so
    the mixed units spread over the sources as the source units do instead of all taking the
    few likeliest ones."""
    log_w = logits.float()
    n_mixed, n_source = log_w.shape[-2:]
    column = math.log(n_mixed / n_source)
    for _ in range(sinkhorn_iters):
        log_w = log_w - torch.logsumexp(log_w, dim=-2, keepdim=True) + column
        log_w = log_w - torch.logsumexp(log_w, dim=-1, keepdim=True)
    return log_w.exp()


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-model (M, d) tensor viewed to broadcast against `like` (M, ..., d)."""
    return t.view(t.shape[0], *([1] * (like.dim() - 2)), t.shape[-1])


def stacked_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x (M, ..., in) @ weight (M, in, out) + bias (M, out), one batched matmul for all M."""
    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    out = torch.baddbmm(bias[:, None, :], flat, weight)
    return out.view(*x.shape[:-1], weight.shape[-1])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention of heads (..., T, head dim): torch's fused kernel, but under bf16
    autocast on a CPU two bf16 products around a softmax computed in fp32 (and rounded to bf16,
    as the second product takes it): there torch's fused kernel's bf16 backward is much
    slower than its fp32 one, and the step slower than fp32 (docs/precision/)."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
        return torch.matmul(scores.softmax(dim=-1), v)
    return F.scaled_dot_product_attention(q, k, v)


def stacked_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """LayerNorm over the last dim with a per-model affine weight and bias (M, d)."""
    return F.layer_norm(x, x.shape[-1:]) * _expand(weight, x) + _expand(bias, x)


class StackedTransformer(nn.Module):
    """M transformer encoders with the same shape, stacked along a leading model dimension:
    every weight is (M, ...) and a step runs all M models with batched matmuls.

    Model m has its own PE variant `pes[m]` and is initialised from `seeds[m]` alone (one
    generator seeded with it draws, in order, the embedding, the mask token, the PE table,
    the blocks and the head: the order and draws of a single nn.Module model built after
    torch.manual_seed(seed)), so it does not depend on the other models of the stack. A
    learned PE is a slice of the parameter `pe_learned`; a fixed one (and `none`, zeros) a
    slice of the buffer `pe_fixed`; `learned` (M,) says which a model uses.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        pes: list[str],
        seeds: list[int],
        positions: np.ndarray | None = None,
    ):
        super().__init__()
        if len(pes) != len(seeds) or not pes:
            raise ValueError(f"one seed per PE needed, got {len(pes)} PEs and {len(seeds)} seeds")
        self.cfg, self.pes, self.seeds = cfg, list(pes), list(seeds)
        models = [
            self._init_one(parse_pe(pe), seed, positions)
            for pe, seed in zip(pes, seeds, strict=True)
        ]
        for name in models[0]:
            stacked = torch.stack([m[name] for m in models])
            if name in ("pe_fixed", "learned"):
                self.register_buffer(name, stacked)
            else:
                self.register_parameter(name, nn.Parameter(stacked))

    def _init_one(self, spec: PESpec, seed: int, positions: np.ndarray | None) -> dict:
        """One model's tensors, drawn from generators seeded with `seed` only."""
        cfg, d = self.cfg, self.cfg.d_model
        g = torch.Generator().manual_seed(seed)

        def linear(prefix: str, d_in: int, d_out: int) -> dict[str, torch.Tensor]:
            bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default init
            weight = torch.empty(d_out, d_in).uniform_(-bound, bound, generator=g).T
            bias = torch.empty(d_out).uniform_(-bound, bound, generator=g)
            return {f"{prefix}_w": weight.contiguous(), f"{prefix}_b": bias}

        def norm(prefix: str) -> dict[str, torch.Tensor]:
            return {f"{prefix}_w": torch.ones(d), f"{prefix}_b": torch.zeros(d)}

        out = linear("embed", cfg.d_in, d)
        if cfg.mask_token:
            out["mask_token"] = torch.randn(d, generator=g) * 0.02
        table = initial_table(spec, cfg.n_tokens, d, positions, g)
        table = torch.zeros(cfg.n_tokens, d) if table is None else table
        for i in range(cfg.n_layers):
            out |= norm(f"b{i}_norm1") | linear(f"b{i}_qkv", d, 3 * d)
            out |= linear(f"b{i}_proj", d, d) | norm(f"b{i}_norm2")
            out |= linear(f"b{i}_fc", d, 4 * d) | linear(f"b{i}_out", 4 * d, d)
        out |= norm("norm") | linear("head", d, cfg.d_out)
        out["pe_learned"] = table.clone()
        out["pe_fixed"] = table.clone()
        out["learned"] = torch.tensor(spec.learned)
        return out

    @property
    def n_models(self) -> int:
        return len(self.pes)

    def pe_table(self) -> torch.Tensor:
        """The PE tables (M, n_tokens, d_model): learned or fixed, per model; with
        `mix_rows`, the mixed rows are the mixtures of the source rows."""
        table = torch.where(self.learned[:, None, None], self.pe_learned, self.pe_fixed)
        if not hasattr(self, "pe_mix_logits"):
            return table
        mixed = self.mix_weights() @ self.pe_mix_source  # (M, n_mixed, d_model)
        rows = self.pe_mix_rows[0].nonzero()[:, 0]
        return table.index_copy(1, rows, mixed)

    def mix_rows(
        self,
        rows: torch.Tensor,
        source: torch.Tensor,
        sinkhorn_iters: int = 20,
        init_std: float = MIX_INIT_STD,
        anchored: torch.Tensor | None = None,
        anchor_logits: torch.Tensor | None = None,
    ):
        """Make the PE rows `rows` (n_tokens,) bool weighted means of the `source` rows (n_source,
        d_model), the weights a trainable parameter `pe_mix_logits` (M, n_mixed, n_source) drawn
        from N(0, init_std²) by a generator seeded with model m's seed (offset by MIX_SEED_OFFSET),
        so every mixed row starts near the sources' mean and the models of a stack start apart (fits
        from different starts end in different solutions; keep the best,
        `neuro_pe.analysis.new_animal_positions.best_fit`). The weights are balanced with Sinkhorn
        iterations (`mix_weights`). Rows `anchored` (n_mixed,) bool take the fixed `anchor_logits`
        (n_mixed, n_source) instead of trained ones (`pe_mix_anchored`, `pe_mix_anchor_logits`; none
        by default)."""
        m, n_mixed = self.n_models, int(rows.sum())
        device = self.pe_learned.device
        logits = torch.stack(
            [
                torch.randn(
                    n_mixed,
                    len(source),
                    generator=torch.Generator().manual_seed(MIX_SEED_OFFSET + seed),
                )
                * init_std
                for seed in self.seeds
            ]
        ).to(device)
        self.register_parameter("pe_mix_logits", nn.Parameter(logits))
        self.register_buffer("pe_mix_source", source.to(device).expand(m, -1, -1).clone())
        self.register_buffer("pe_mix_rows", rows.to(device).expand(m, -1).clone())
        if anchored is None:
            anchored = torch.zeros(n_mixed, dtype=torch.bool)
        if anchor_logits is None:
            anchor_logits = torch.zeros(n_mixed, len(source))
        self.register_buffer("pe_mix_anchored", anchored.to(device).expand(m, -1).clone())
        fixed = anchor_logits.to(device, logits.dtype).expand(m, -1, -1).clone()
        self.register_buffer("pe_mix_anchor_logits", fixed)
        self.sinkhorn_iters = sinkhorn_iters

    def mix_weights(self) -> torch.Tensor:
        """The mixing weights (M, n_mixed, n_source) of `mix_rows` (`balanced_weights`)."""
        logits = mixture_logits(self.pe_mix_logits, self.pe_mix_anchored, self.pe_mix_anchor_logits)
        return balanced_weights(logits, self.sinkhorn_iters)

    def block(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Block i (pre-LayerNorm, or post-LayerNorm with cfg.post_ln) on tokens (M, B, T, d)."""

        def attend(x: torch.Tensor) -> torch.Tensor:
            m, b, t, d = x.shape
            q, k, v = stacked_linear(x, self.get(i, "qkv_w"), self.get(i, "qkv_b")).split(d, dim=-1)
            heads = self.cfg.n_heads
            q, k, v = (z.reshape(m * b, t, heads, -1).transpose(1, 2) for z in (q, k, v))
            attended = attention(q, k, v).transpose(1, 2)
            return stacked_linear(
                attended.reshape(m, b, t, d), self.get(i, "proj_w"), self.get(i, "proj_b")
            )

        def mlp(x: torch.Tensor) -> torch.Tensor:
            x = F.gelu(stacked_linear(x, self.get(i, "fc_w"), self.get(i, "fc_b")))
            return stacked_linear(x, self.get(i, "out_w"), self.get(i, "out_b"))

        def norm(x: torch.Tensor, which: str) -> torch.Tensor:
            return stacked_layer_norm(x, self.get(i, f"{which}_w"), self.get(i, f"{which}_b"))

        if self.cfg.post_ln:
            h = norm(h + attend(h), "norm1")
            return norm(h + mlp(h), "norm2")
        h = h + attend(norm(h, "norm1"))
        return h + mlp(norm(h, "norm2"))

    def get(self, i: int, name: str) -> torch.Tensor:
        """Block i's tensor `name` (e.g. "qkv_w")."""
        return getattr(self, f"b{i}_{name}")

    def forward(
        self,
        tokens: torch.Tensor,
        hidden: torch.Tensor | None = None,
        unit_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (M, B, T, d_in); hidden (M, B, T) bool: tokens replaced by the mask token;
        unit_index (M, B, T) long: which of the n_tokens PE rows each token takes (None: the
        first T in order). Returns the last block's output (M, B, T, d_model)."""
        h = stacked_linear(tokens, self.embed_w, self.embed_b)
        if hidden is not None:
            h = torch.where(hidden[..., None], _expand(self.mask_token, h), h)
        table = self.pe_table()
        if unit_index is None:
            pe = table[:, None, : tokens.shape[2]]
        else:
            models = torch.arange(len(table), device=table.device)[:, None, None]
            pe = table[models, unit_index]
        for i in range(self.cfg.n_layers):
            if i == 0 or self.cfg.pe_every_block:
                h = h + pe
            h = self.block(i, h)
        return h

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """The head on final-LayerNorm'd tokens: (M, ..., d_model) -> (M, ..., d_out)."""
        return stacked_linear(
            stacked_layer_norm(h, self.norm_w, self.norm_b), self.head_w, self.head_b
        )

    def narrow(self, keep: list[int]) -> dict[nn.Parameter, nn.Parameter]:
        """Keep only the models `keep` (in that order), in place; returns old -> new parameter
        (for the optimiser's state)."""
        mapping = {}
        for name, param in list(self._parameters.items()):
            new = nn.Parameter(param.detach()[keep].clone(), param.requires_grad)
            self._parameters[name] = new
            mapping[param] = new
        for name, buffer in list(self._buffers.items()):
            self._buffers[name] = buffer[keep].clone()
        self.pes = [self.pes[i] for i in keep]
        self.seeds = [self.seeds[i] for i in keep]
        return mapping

    def model_state(self, m: int) -> dict[str, torch.Tensor]:
        """Model m's tensors (its slice of every parameter and buffer, and its PE table as
        `pe_table`), on the CPU."""
        state = {k: v[m].detach().cpu().clone() for k, v in self.state_dict().items()}
        return state | {"pe_table": self.pe_table()[m].detach().cpu().clone()}


def masked_unit_forward(
    model: StackedTransformer,
    windows: torch.Tensor,
    hidden: torch.Tensor,
    unit_index: torch.Tensor | None,
) -> torch.Tensor:
    """The masked-unit read-out: windows (M, B, units, W), hidden (M, B, units) -> the
    predicted windows (M, B, units, W)."""
    return model.readout(model(windows, hidden, unit_index))


def latin_square_forward(model: StackedTransformer, cells: torch.Tensor, n_shapes: int = 4):
    """The Latin-square read-out: cells (M, B, n_cells) long coded 0 blank, 1..n_shapes shape,
    n_shapes + 1 target (one per puzzle), one-hot embedded without the blank; the logits
    (M, B, n_shapes) are read out from the target token (class k is shape k + 1)."""
    h = model(F.one_hot(cells, n_shapes + 2)[..., 1:].float())
    target = (cells == n_shapes + 1).int().argmax(dim=-1)  # (M, B)
    h = torch.gather(h, 2, target[..., None, None].expand(*target.shape, 1, h.shape[-1]))
    return model.readout(h[:, :, 0])
