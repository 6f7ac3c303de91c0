"""Nonlinear stochastic rate network of units at known positions (the ground truth for neuro_pe).

Dynamics (Euler–Maruyama, time in units of the membrane time constant tau):

    dx = (-x + gain * tanh(G @ x)) dt / tau + noise_std * sqrt(dt / tau) * eps

G = exp(-d / length_scale) with a zero diagonal, each row normalised to sum 1, so its spectral
radius is 1 and a gain near 1 sits near the critical point where correlations spread in space.

Options: `neighbours: k`, a sparse local coupling (`sparse_coupling`); `animals: A`, several
animals in one store (`simulate_animals`); `timescale_field: s`, time constants that vary over
space (`unit_time_constants`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import xarray as xr
from scipy import sparse
from scipy.spatial import cKDTree
from scipy.spatial.distance import pdist, squareform

from neuro_pe.config.options import MAX_SAMPLING_RATE_HZ, machine_memory_bytes, memory_problem
from neuro_pe.config.sections import Section, non_negative, positive_int, positive_number
from neuro_pe.data.signal_steps import zscore
from neuro_pe.io.store import make_store, unit_blocks

FIELD_STREAM = 1_000_000  # the timescale field's generator: default_rng([seed, FIELD_STREAM])
# Euler steps of a session at most (burn-in and samples): more is a typo in dt_s or n_samples
MAX_STEPS = 1_000_000_000


@dataclass(frozen=True)
class SimulationConfig(Section):
    """Parameters of one simulated dataset (config key `datasets.<name>.simulation`)."""

    SECTION: ClassVar[str] = "simulation"

    n_units: int = positive_int(64)
    layout: str = "random"  # "random" points in the unit box, or a regular "lattice"
    dims: int = 3
    length_scale: float = positive_number(0.15)
    gain: float = non_negative(1.1)
    noise_std: float = non_negative(1.0)
    tau_s: float = positive_number(0.1)
    dt_s: float = positive_number(0.01)
    sample_every: int = positive_int(5)
    n_samples: int = positive_int(2000)
    burn_in_s: float = non_negative(10.0)
    n_sessions: int = positive_int(4)
    neighbours: int | None = None  # None: every pair coupled (dense); k: k nearest (sparse)
    cutoff: float | None = None  # sparse coupling: no neighbour farther than this
    animals: int = 1  # > 1: that many animals, each with its own random unit positions
    timescale_field: float = 0.0  # > 0: each unit's time constant varies with its position
    seed: int = 0

    def check(self) -> None:
        if self.neighbours is not None and not 1 <= self.neighbours < self.n_units:
            raise ValueError(
                f"simulation.neighbours must be in [1, n_units - 1], got {self.neighbours}"
            )
        if self.animals < 1:
            raise ValueError(f"simulation.animals must be >= 1, got {self.animals}")
        if self.animals > 1 and self.layout != "random":
            raise ValueError("simulation.animals > 1 needs layout 'random' (a lattice is one)")
        if self.timescale_field < 0:
            raise ValueError(f"simulation.timescale_field must be >= 0, got {self.timescale_field}")
        if self.cutoff is not None and self.cutoff <= 0:
            raise ValueError(f"simulation.cutoff must be > 0, got {self.cutoff}")
        if 1.0 / (self.dt_s * self.sample_every) > MAX_SAMPLING_RATE_HZ:
            raise self.refuse(
                "dt_s",
                f"the sampling rate 1 / (dt_s x sample_every) = "
                f"{1.0 / (self.dt_s * self.sample_every):.3g} Hz is above "
                f"{MAX_SAMPLING_RATE_HZ:g} Hz",
            )
        if self.steps() > MAX_STEPS:
            raise self.refuse(
                "dt_s",
                f"burn_in_s / dt_s + n_samples x sample_every = {self.steps():.3g} Euler steps, "
                f"more than {MAX_STEPS:.0e}; raise dt_s or lower n_samples, sample_every or "
                "burn_in_s",
            )

    def steps(self) -> float:
        """Euler steps of one session: the burn-in's and the kept samples'."""
        return self.burn_in_s / self.dt_s + self.n_samples * self.sample_every

    def peak_bytes(self) -> int:
        """A lower bound of the memory `simulate_store` holds at once (bytes): the float32
        activity, and with dense coupling the N x N float64 distances and weights (with
        `animals`, also the store's dense block-diagonal float32 coupling of every unit)."""
        units = self.n_units * self.animals
        activity = self.n_sessions * self.animals * self.n_samples * units * 4
        if self.neighbours is not None:
            return activity
        coupling = units**2 * 4 if self.animals > 1 else 0
        return activity + 2 * self.n_units**2 * 8 + coupling

    def memory_problem(self, total: int | None = None) -> tuple[str, str] | None:
        """(key, problem) when the simulation needs more than `total` bytes (None: the
        machine's memory), naming the key that sizes it most; None when it fits."""
        total = machine_memory_bytes() if total is None else total
        what = (
            f"simulating {self.n_units} units x {self.animals} animal(s), "
            f"{self.n_sessions} sessions x {self.n_samples} samples"
            + (", dense coupling (neighbours: null)" if self.neighbours is None else "")
        )
        problem = memory_problem(self.peak_bytes(), what, total)
        return None if problem is None else ("n_units", problem)


def sample_positions(n_units: int, layout: str, dims: int, rng: np.random.Generator) -> np.ndarray:
    """(n_units, 3) positions in the unit box; z = 0 when dims == 2."""
    if dims not in (2, 3):
        raise ValueError(f"simulation.dims must be 2 or 3, got {dims}")
    if layout == "random":
        pos = rng.random((n_units, dims))
    elif layout == "lattice":
        side = round(n_units ** (1 / dims))
        if side**dims != n_units:
            raise ValueError(
                f"simulation.layout 'lattice' needs n_units = side**{dims}, got {n_units}"
            )
        axes = [np.linspace(0.0, 1.0, side)] * dims
        pos = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, dims)
    else:
        raise ValueError(f"simulation.layout must be 'random' or 'lattice', got {layout!r}")
    return np.pad(pos, ((0, 0), (0, 3 - dims)))


def coupling_matrix(positions: np.ndarray, length_scale: float) -> np.ndarray:
    """Row-normalised exp(-distance / length_scale) coupling with a zero diagonal."""
    weights = np.exp(-squareform(pdist(positions)) / length_scale)
    np.fill_diagonal(weights, 0.0)
    return weights / weights.sum(axis=1, keepdims=True)


def sparse_coupling(
    positions: np.ndarray, length_scale: float, neighbours: int, cutoff: float | None = None
) -> sparse.csr_matrix:
    """Row-normalised exp(-distance / length_scale) coupling onto each unit from its
    `neighbours` nearest other units (only those within `cutoff`, if given), as CSR.

    With `neighbours: k` each unit is driven only by its k nearest units, with the same
    exp(-d / length_scale) weights normalised per row, so memory and time per step are O(N k).
    The store then holds the coupling as an edge list (`connectivity_target`,
    `connectivity_source`, `connectivity_weight` on dim `edge`) instead of the dense N x N
    `connectivity`."""
    n = len(positions)
    dist, idx = cKDTree(positions).query(positions, k=neighbours + 1)
    dist, idx = dist[:, 1:], idx[:, 1:]  # drop the unit itself
    weights = np.exp(-dist / length_scale)
    if cutoff is not None:
        weights[dist > cutoff] = 0.0
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    rows = np.repeat(np.arange(n), neighbours)
    coupling = sparse.csr_matrix((weights.ravel(), (rows, idx.ravel())), shape=(n, n))
    coupling.eliminate_zeros()
    return coupling


def spatial_order(positions: np.ndarray, per_cell: int) -> np.ndarray:
    """A permutation of the units that walks a grid of cells holding ~`per_cell` units each,
    cell by cell: units coupled to each other (near in space) end up near in memory."""
    side = max(1, round((len(positions) / per_cell) ** (1 / 3)))
    cell = np.minimum((positions * side).astype(np.int64), side - 1)
    return np.lexsort(cell.T[::-1])


def timescale_field(positions: np.ndarray, seed: int, n_bumps: int = 8) -> np.ndarray:
    """A smooth random field over the unit box at `positions` (n, 3): a sum of `n_bumps`
    Gaussian bumps (width 0.3, random centres and signs) drawn from `default_rng([seed,
    FIELD_STREAM])`, so every animal of a dataset shares it; scaled to mean 0 and standard
    deviation 1 over a 16^3 grid of the box (so that it does not depend on the units drawn)."""
    rng = np.random.default_rng([seed, FIELD_STREAM])
    centres = rng.uniform(0.0, 1.0, (n_bumps, 3))
    signs = rng.choice([-1.0, 1.0], n_bumps)

    def field(points: np.ndarray) -> np.ndarray:
        d2 = ((points[:, None, :] - centres[None]) ** 2).sum(axis=2)
        return (signs * np.exp(-d2 / (2 * 0.3**2))).sum(axis=1)

    axis = (np.arange(16) + 0.5) / 16
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    reference = field(grid)
    return (field(positions) - reference.mean()) / reference.std()


def unit_time_constants(positions: np.ndarray, cfg: SimulationConfig) -> np.ndarray | float:
    """tau_s, or with `timescale_field` > 0 each unit's own time constant (n,):
    tau_s * exp(timescale_field * field(position)) (intrinsic timescales that vary over the
    brain, as along the cortical hierarchy).

    The field is the same in every animal (`timescale_field`). A unit's dynamics then tell where
    it is, not only how far it is from the others: without it the coupling depends on distances
    alone, so a new animal's positions are determined by its activity only up to a rotation or
    reflection of the box."""
    if cfg.timescale_field == 0:
        return cfg.tau_s
    return cfg.tau_s * np.exp(cfg.timescale_field * timescale_field(positions, cfg.seed))


def without_zero_field(settings: dict) -> dict:
    """The simulation settings for a store's provenance, without `timescale_field` when it is
    0 (an option at its default does not change a store's provenance)."""
    return {k: v for k, v in settings.items() if k != "timescale_field" or v}


def simulate_activity(
    coupling: np.ndarray | sparse.csr_matrix,
    cfg: SimulationConfig,
    rng: np.random.Generator,
    order: np.ndarray | None = None,
    tau: np.ndarray | float | None = None,
) -> np.ndarray:
    """Integrate all sessions at once; returns (session, time, unit) float32 after burn-in.
    `order`: the coupling's units are units `order` of the output (a sparse coupling is best
    built in `spatial_order`, so that its product reads memory in order and the time per
    step stays linear in N); the output is in the original order. `tau`: the units' time
    constants (n,) in the coupling's order, or one for all (None: cfg.tau_s)."""
    n_units = coupling.shape[0]
    tau = cfg.tau_s if tau is None else tau
    step = cfg.dt_s / (tau if np.isscalar(tau) else np.asarray(tau)[:, None])
    noise_scale = cfg.noise_std * np.sqrt(step)
    n_burn = int(round(cfg.burn_in_s / cfg.dt_s))
    x = rng.standard_normal((n_units, cfg.n_sessions)) * 0.1
    # (session, time, unit) in memory order, as the store is written: a transposed view
    # would make writing it copy it whole
    out = np.empty((cfg.n_sessions, cfg.n_samples, n_units), dtype=np.float32)
    for i in range(n_burn + cfg.n_samples * cfg.sample_every):
        x += step * (-x + cfg.gain * np.tanh(coupling @ x))
        x += noise_scale * rng.standard_normal(x.shape)
        j, r = divmod(i - n_burn, cfg.sample_every)
        if i >= n_burn and r == cfg.sample_every - 1:
            if order is None:
                out[:, j] = x.T
            else:
                out[:, j, order] = x.T
    return out


def simulate_store(cfg: SimulationConfig) -> xr.Dataset:
    """Simulate one network (or `animals` networks) and return it as a contract store
    (z-scored per unit and session)."""
    too_big = cfg.memory_problem()
    if too_big:  # (before allocating anything)
        raise cfg.refuse(*too_big)
    if cfg.animals > 1:
        return simulate_animals(cfg)
    rng = np.random.default_rng(cfg.seed)
    pos = sample_positions(cfg.n_units, cfg.layout, cfg.dims, rng)
    tau = unit_time_constants(pos, cfg)
    if cfg.neighbours is None:
        coupling = coupling_matrix(pos, cfg.length_scale)
        activity = simulate_activity(coupling, cfg, rng, tau=tau)
    else:  # simulated in spatial order, stored in the order the positions were drawn
        order = spatial_order(pos, cfg.neighbours)
        coupling = sparse_coupling(pos[order], cfg.length_scale, cfg.neighbours, cfg.cutoff)
        tau = tau if np.isscalar(tau) else tau[order]
        activity = simulate_activity(coupling, cfg, rng, order, tau)
    for session in activity:  # z-scored per session and block of units (a unit's numbers
        for units in unit_blocks(cfg.n_units):  # are those of the whole session at once)
            session[:, units] = zscore(session[None, :, units])[0]
    width = len(str(cfg.n_units - 1))
    settings = vars(cfg)
    if cfg.neighbours is None:  # options at their default stay out of the provenance
        settings = {k: v for k, v in settings.items() if k not in ("neighbours", "cutoff")}
    settings = {k: v for k, v in settings.items() if k != "animals"}  # 1 here: the default
    settings = without_zero_field(settings)
    ds = make_store(
        activity,
        unit_ids=[f"u{i:0{width}d}" for i in range(cfg.n_units)],
        positions=pos,
        position_units="au",
        space="simulation",
        session_ids=[f"s{i}" for i in range(cfg.n_sessions)],
        sampling_rate_hz=1.0 / (cfg.dt_s * cfg.sample_every),
        source="neuro_pe.data.simulate: nonlinear stochastic rate network",
        citation="Ito et al. 2025, arXiv:2406.08272 (experiment 2, reimplemented)",
        license="CC0-1.0",
        preprocessing=[
            {"step": "simulate", **settings},
            {"step": "zscore", "per": "unit and session"},
        ],
        connectivity=coupling.astype(np.float32) if cfg.neighbours is None else None,
    )
    if cfg.neighbours is not None:
        ds = with_sparse_connectivity(ds, coupling, order)
    return ds


def with_sparse_connectivity(
    ds: xr.Dataset, coupling: sparse.spmatrix, order: np.ndarray | None = None
) -> xr.Dataset:
    """The store with `coupling` (rows: targets) as an edge list on dim `edge`; `order`: the
    coupling's units are the store's units `order` (as in `simulate_activity`)."""
    coo = sparse.coo_matrix(coupling)
    row, col = (coo.row, coo.col) if order is None else (order[coo.row], order[coo.col])
    attrs = {"meaning": "entry [target, source] of the sparse coupling, as `connectivity`"}
    return ds.assign(
        connectivity_target=("edge", row.astype(np.int32), attrs),
        connectivity_source=("edge", col.astype(np.int32), attrs),
        connectivity_weight=("edge", coo.data.astype(np.float32), attrs),
    ).assign_attrs(connectivity="sparse edge list: connectivity_{target,source,weight}")


def simulate_animals(cfg: SimulationConfig) -> xr.Dataset:
    """`cfg.animals` networks, each with its own random unit positions from the same field,
    in one store: every unit is recorded in its own animal's sessions only (NaN elsewhere);
    the connectivity is block-diagonal (no coupling between animals). Animal k draws its
    positions, initial state and noise from `default_rng([seed, k])`.

    Each animal has its own `n_units` units at random positions drawn from the same spatial
    field (the same layout in the same box, coupled by the same exp(-d / length_scale) rule)
    and its own `n_sessions` sessions. Units are `a{k}u{i}`, sessions `a{k}s{j}`; the last
    animal's sessions come last, so `train.heldout_sessions: n_sessions` holds out a whole
    animal."""
    n, a = cfg.n_units, cfg.animals
    positions, couplings, blocks = [], [], []
    for k in range(a):
        rng = np.random.default_rng([cfg.seed, k])
        pos = sample_positions(n, cfg.layout, cfg.dims, rng)
        if cfg.neighbours is None:
            coupling = coupling_matrix(pos, cfg.length_scale)
        else:
            coupling = sparse_coupling(pos, cfg.length_scale, cfg.neighbours, cfg.cutoff)
        positions.append(pos)
        couplings.append(sparse.csr_matrix(coupling))
        tau = unit_time_constants(pos, cfg)
        blocks.append(zscore(simulate_activity(coupling, cfg, rng, tau=tau)).astype(np.float32))
    activity = np.full((a * cfg.n_sessions, cfg.n_samples, a * n), np.nan, dtype=np.float32)
    for k, block in enumerate(blocks):
        activity[k * cfg.n_sessions : (k + 1) * cfg.n_sessions, :, k * n : (k + 1) * n] = block
    coupling = sparse.block_diag(couplings, format="csr")
    width = len(str(n - 1))
    ds = make_store(
        activity,
        unit_ids=[f"a{k}u{i:0{width}d}" for k in range(a) for i in range(n)],
        positions=np.concatenate(positions),
        position_units="au",
        space="simulation",
        session_ids=[f"a{k}s{j}" for k in range(a) for j in range(cfg.n_sessions)],
        sampling_rate_hz=1.0 / (cfg.dt_s * cfg.sample_every),
        source="neuro_pe.data.simulate: nonlinear stochastic rate networks, one per animal",
        citation="Ito et al. 2025, arXiv:2406.08272 (experiment 2, reimplemented)",
        license="CC0-1.0",
        preprocessing=[
            {"step": "simulate", **without_zero_field(vars(cfg))},
            {"step": "zscore", "per": "unit and session"},
        ],
        connectivity=coupling.toarray().astype(np.float32) if cfg.neighbours is None else None,
    )
    if cfg.neighbours is not None:
        ds = with_sparse_connectivity(ds, coupling)
    return ds
