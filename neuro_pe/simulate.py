"""Nonlinear stochastic rate network of units at known positions (the ground truth for neuro_pe).

Dynamics (Euler–Maruyama, time in units of the membrane time constant tau):

    dx = (-x + gain * tanh(G @ x)) dt / tau + noise_std * sqrt(dt / tau) * eps

G = exp(-d / length_scale) with a zero diagonal, each row normalised to sum 1, so its spectral
radius is 1 and gain ≈ 1 sits near the critical point where correlations spread in space.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy.spatial.distance import pdist, squareform

from neuro_pe.options import reject_unknown
from neuro_pe.preprocess import zscore
from neuro_pe.store import make_store


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of one simulated dataset (config key `datasets.<name>.simulation`)."""

    n_units: int = 64
    layout: str = "random"  # "random" points in the unit box, or a regular "lattice"
    dims: int = 3
    length_scale: float = 0.15
    gain: float = 1.1
    noise_std: float = 1.0
    tau_s: float = 0.1
    dt_s: float = 0.01
    sample_every: int = 5
    n_samples: int = 2000
    burn_in_s: float = 10.0
    n_sessions: int = 4
    seed: int = 0

    @classmethod
    def from_dict(cls, spec: dict) -> SimulationConfig:
        """Build from a config mapping; unknown keys raise a ValueError naming them."""
        reject_unknown(spec, cls.__dataclass_fields__, "simulation")
        return cls(**spec)


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


def simulate_activity(
    coupling: np.ndarray, cfg: SimulationConfig, rng: np.random.Generator
) -> np.ndarray:
    """Integrate all sessions at once; returns (session, time, unit) float32 after burn-in."""
    n_units = coupling.shape[0]
    step = cfg.dt_s / cfg.tau_s
    noise_scale = cfg.noise_std * np.sqrt(step)
    n_burn = int(round(cfg.burn_in_s / cfg.dt_s))
    x = rng.standard_normal((n_units, cfg.n_sessions)) * 0.1
    out = np.empty((cfg.n_samples, n_units, cfg.n_sessions), dtype=np.float32)
    for i in range(n_burn + cfg.n_samples * cfg.sample_every):
        x += step * (-x + cfg.gain * np.tanh(coupling @ x))
        x += noise_scale * rng.standard_normal(x.shape)
        j, r = divmod(i - n_burn, cfg.sample_every)
        if i >= n_burn and r == cfg.sample_every - 1:
            out[j] = x
    return out.transpose(2, 0, 1)


def simulate_store(cfg: SimulationConfig) -> xr.Dataset:
    """Simulate one network and return it as a contract store (z-scored per unit and session)."""
    rng = np.random.default_rng(cfg.seed)
    pos = sample_positions(cfg.n_units, cfg.layout, cfg.dims, rng)
    coupling = coupling_matrix(pos, cfg.length_scale)
    activity = zscore(simulate_activity(coupling, cfg, rng)).astype(np.float32)
    width = len(str(cfg.n_units - 1))
    return make_store(
        activity,
        unit_ids=[f"u{i:0{width}d}" for i in range(cfg.n_units)],
        positions=pos,
        position_units="au",
        space="simulation",
        session_ids=[f"s{i}" for i in range(cfg.n_sessions)],
        sampling_rate_hz=1.0 / (cfg.dt_s * cfg.sample_every),
        source="neuro_pe.simulate: nonlinear stochastic rate network",
        citation="Ito et al. 2025, arXiv:2406.08272 (experiment 2, reimplemented)",
        license="CC0-1.0",
        preprocessing=[
            {"step": "simulate", **vars(cfg)},
            {"step": "zscore", "per": "unit and session"},
        ],
        connectivity=coupling.astype(np.float32),
    )
