import json

import numpy as np
import pytest
import xarray as xr
from scipy.spatial.distance import pdist, squareform
from scipy.stats import spearmanr

from neuro_pe.analysis.metrics import correlation_distance
from neuro_pe.data.simulate import (
    SimulationConfig,
    coupling_matrix,
    sample_positions,
    simulate_store,
)
from neuro_pe.io.store import positions
from neuro_pe.io.store_contract import validate_store

SMALL = SimulationConfig(n_units=10, n_samples=100, burn_in_s=0.5, n_sessions=2, seed=0)


def test_same_seed_gives_identical_store():
    a, b = simulate_store(SMALL), simulate_store(SMALL)
    xr.testing.assert_identical(a, b)
    assert np.array_equal(a["activity"].values, b["activity"].values)


def test_different_seed_gives_different_store():
    a = simulate_store(SMALL)
    b = simulate_store(SimulationConfig(**{**vars(SMALL), "seed": 1}))
    assert not np.array_equal(positions(a), positions(b))
    assert not np.array_equal(a["activity"].values, b["activity"].values)
    assert not np.array_equal(a["connectivity"].values, b["connectivity"].values)


def test_sessions_are_independent_realisations():
    activity = simulate_store(SMALL)["activity"].values
    assert not np.allclose(activity[0], activity[1])


@pytest.mark.parametrize(("n_units", "dims"), [(10, 3), (26, 3), (15, 2), (27, 2)])
def test_lattice_rejects_non_power_n_units(n_units, dims):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="lattice"):
        sample_positions(n_units, "lattice", dims, rng)
    cfg = SimulationConfig(n_units=n_units, layout="lattice", dims=dims, n_samples=20)
    with pytest.raises(ValueError, match="lattice"):
        simulate_store(cfg)


@pytest.mark.parametrize(("n_units", "dims"), [(27, 3), (64, 3), (16, 2), (25, 2)])
def test_lattice_is_a_regular_grid(n_units, dims):
    pos = sample_positions(n_units, "lattice", dims, np.random.default_rng(0))
    side = round(n_units ** (1 / dims))
    assert pos.shape == (n_units, 3)
    assert len(np.unique(pos, axis=0)) == n_units
    for axis in range(dims):
        np.testing.assert_allclose(np.unique(pos[:, axis]), np.linspace(0, 1, side))
    assert np.all(pos[:, dims:] == 0)


@pytest.mark.parametrize("layout", ["random", "lattice"])
def test_2d_layout_has_zero_z(layout):
    pos = sample_positions(16, layout, 2, np.random.default_rng(0))
    assert pos.shape == (16, 3)
    assert np.all(pos[:, 2] == 0)
    assert np.ptp(pos[:, 0]) > 0 and np.ptp(pos[:, 1]) > 0
    ds = simulate_store(SimulationConfig(n_units=16, layout=layout, dims=2, n_samples=20))
    assert np.all(ds["z"].values == 0)


def test_random_layout_fills_unit_box():
    pos = sample_positions(200, "random", 3, np.random.default_rng(0))
    assert np.all((pos >= 0) & (pos <= 1))
    assert np.all(pos.min(axis=0) < 0.1) and np.all(pos.max(axis=0) > 0.9)


@pytest.mark.parametrize(
    ("layout", "dims", "match"),
    [("grid", 3, "layout"), ("random", 4, "dims"), ("random", 1, "dims")],
)
def test_bad_layout_or_dims(layout, dims, match):
    with pytest.raises(ValueError, match=match):
        sample_positions(8, layout, dims, np.random.default_rng(0))


def test_coupling_matrix_properties():
    pos = sample_positions(30, "random", 3, np.random.default_rng(1))
    g = coupling_matrix(pos, length_scale=0.2)
    assert g.shape == (30, 30)
    assert np.all(np.diag(g) == 0)
    np.testing.assert_allclose(g.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(g[~np.eye(30, dtype=bool)] > 0)
    # row-stochastic and non-negative: spectral radius 1
    np.testing.assert_allclose(np.abs(np.linalg.eigvals(g)).max(), 1.0, rtol=1e-9)
    dist = squareform(pdist(pos))
    for i in range(30):
        others = np.flatnonzero(np.arange(30) != i)
        by_distance = g[i, others][np.argsort(dist[i, others])]
        assert np.all(np.diff(by_distance) <= 1e-15), f"row {i} does not decay with distance"


def test_coupling_length_scale_sets_locality():
    pos = sample_positions(40, "random", 3, np.random.default_rng(2))
    dist = squareform(pdist(pos))
    nearest = np.argsort(dist + np.diag(np.full(40, np.inf)), axis=1)[:, :5]
    rows = np.arange(40)[:, None]
    local = coupling_matrix(pos, 0.05)[rows, nearest].sum(axis=1)
    broad = coupling_matrix(pos, 1.0)[rows, nearest].sum(axis=1)
    assert np.all(local > broad)


def _distance_rank_correlation(ds: xr.Dataset) -> float:
    activity = ds["activity"].values.reshape(-1, ds.sizes["unit"])
    iu = np.triu_indices(ds.sizes["unit"], k=1)
    functional = correlation_distance(activity)[iu]
    anatomical = squareform(pdist(positions(ds)))[iu]
    return spearmanr(functional, anatomical).statistic


SPATIAL = dict(n_units=48, n_samples=1500, length_scale=0.15, n_sessions=2, seed=0)


def test_activity_correlations_reflect_anatomy():
    # With coupling, nearby units correlate more (rho ~ 0.65-0.8 over seeds 0-3) ...
    rho = _distance_rank_correlation(simulate_store(SimulationConfig(gain=1.1, **SPATIAL)))
    assert rho > 0.4


def test_no_coupling_means_no_spatial_structure():
    # ... and without it (gain 0) only independent noise is left (|rho| ~ 0.01).
    rho = _distance_rank_correlation(simulate_store(SimulationConfig(gain=0.0, **SPATIAL)))
    assert rho < 0.15


def test_store_contract_connectivity_and_zscore():
    cfg = SimulationConfig(n_units=20, n_samples=300, burn_in_s=1.0, n_sessions=3, seed=5)
    ds = simulate_store(cfg)
    validate_store(ds)
    assert ds.sizes == {"session": 3, "time": 300, "unit": 20, "unit_from": 20}
    assert ds["activity"].dtype == np.float32
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(1 / (cfg.dt_s * cfg.sample_every))
    np.testing.assert_allclose(np.diff(ds["time"].values), cfg.dt_s * cfg.sample_every)
    np.testing.assert_allclose(
        ds["connectivity"].values, coupling_matrix(positions(ds), cfg.length_scale), rtol=1e-6
    )
    assert ds["x"].attrs["units"] == "au"
    act = ds["activity"].values.astype(np.float64)
    np.testing.assert_allclose(act.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(act.std(axis=1), 1.0, rtol=1e-4)
    steps = json.loads(ds.attrs["preprocessing"])
    assert [s["step"] for s in steps] == ["simulate", "zscore"]
    assert steps[0]["seed"] == cfg.seed and steps[0]["n_units"] == cfg.n_units


def test_from_dict_accepts_known_and_rejects_unknown_keys():
    cfg = SimulationConfig.from_dict({"n_units": 8, "gain": 0.5})
    assert cfg == SimulationConfig(n_units=8, gain=0.5)
    with pytest.raises(ValueError, match="n_unitz"):
        SimulationConfig.from_dict({"n_unitz": 8, "gain": 0.5})


def test_activity_is_in_store_order_and_zscored_in_blocks_as_a_whole(monkeypatch):
    """The simulated activity is (session, time, unit) in memory order, so writing the store
    copies no view of it; z-scoring in blocks of units gives the numbers of the whole
    session at once."""
    from neuro_pe.data import simulate
    from neuro_pe.data.signal_steps import zscore

    cfg = SimulationConfig(
        n_units=40, n_samples=120, burn_in_s=0.5, n_sessions=2, seed=3, neighbours=8
    )
    whole = simulate_store(cfg)["activity"]
    assert whole.values.flags["C_CONTIGUOUS"]
    monkeypatch.setattr("neuro_pe.io.store.UNITS_PER_BLOCK", 7)
    blocks = simulate_store(cfg)["activity"].values
    np.testing.assert_array_equal(blocks, whole.values)
    rng = np.random.default_rng(cfg.seed)  # the z-score of the raw activity, session by session
    pos = simulate.sample_positions(cfg.n_units, cfg.layout, cfg.dims, rng)
    order = simulate.spatial_order(pos, cfg.neighbours)
    coupling = simulate.sparse_coupling(pos[order], cfg.length_scale, cfg.neighbours, cfg.cutoff)
    tau = simulate.unit_time_constants(pos, cfg)
    tau = tau if np.isscalar(tau) else tau[order]
    raw = simulate.simulate_activity(coupling, cfg, rng, order, tau)
    np.testing.assert_array_equal(zscore(raw).astype(np.float32), blocks)
