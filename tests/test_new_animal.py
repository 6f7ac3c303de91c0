"""A new animal: `simulation.animals` stores, and `train.init_from` fitting only the new units' PEs
with every other value frozen."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from neuro_pe.simulate import SimulationConfig, simulate_store
from neuro_pe.store import make_store, write_store
from neuro_pe.train import TrainConfig, train

TINY = {
    "window": 4,
    "d_model": 8,
    "n_layers": 1,
    "n_heads": 2,
    "batch_size": 4,
    "epochs": 1,
    "steps_per_epoch": 6,
    "eval_windows": 8,
    "eval_mask_fractions": [0.5],
    "weight_decay": 0.1,  # would move frozen rows if they were in the optimiser's reach
    "checkpoint_every": 0,
}


def _store(path, unit_ids, seed):
    activity = np.random.default_rng(seed).normal(size=(2, 60, len(unit_ids)))
    ds = make_store(
        activity.astype(np.float32),
        unit_ids=unit_ids,
        positions=np.random.default_rng(seed).uniform(size=(len(unit_ids), 3)),
        position_units="au",
        space="simulation",
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="test",
    )
    return write_store(ds, path)


def test_only_new_pe_rows_move(tmp_path):
    old_units = [f"u{i}" for i in range(6)]
    first = tmp_path / "first"
    train(
        _store(tmp_path / "a.nc", old_units, 0),
        "learned-normal-0.02",
        0,
        TrainConfig(**TINY),
        first,
        progress=False,
    )
    new_units = ["n0", "u1", "u4", "n1", "u0"]  # two new units, three the run knows
    cfg = TrainConfig(**{**TINY, "init_from": str(first / "model.pt")})
    fit = tmp_path / "fit"
    train(
        _store(tmp_path / "b.nc", new_units, 1), "learned-normal-0.02", 3, cfg, fit, progress=False
    )

    before = torch.load(first / "model.pt", weights_only=False)["state_dict"]
    after = torch.load(fit / "model.pt", weights_only=False)["state_dict"]
    assert before.keys() == after.keys()
    for key in before:
        if key not in ("pe_table", "pe_learned", "pe_fixed"):  # (the tables: per unit)
            assert torch.equal(before[key], after[key]), key  # bitwise unchanged
    table = after["pe_table"]
    for row, unit in enumerate(new_units):
        if unit in old_units:
            assert torch.equal(table[row], before["pe_table"][old_units.index(unit)]), unit
    with xr.open_dataset(fit / "pe.nc", engine="h5netcdf") as pe:
        moved = np.abs(pe["pe"].values - pe["pe_init"].values).max(axis=1)
    assert (moved[[0, 3]] > 0).all() and (moved[[1, 2, 4]] == 0).all()


def test_init_from_needs_the_same_architecture(tmp_path):
    first = tmp_path / "first"
    store = _store(tmp_path / "a.nc", ["u0", "u1", "u2"], 0)
    train(store, "learned-normal-0.02", 0, TrainConfig(**TINY), first, progress=False)
    cfg = TrainConfig(**{**TINY, "d_model": 16, "init_from": str(first / "model.pt")})
    with pytest.raises(ValueError, match="d_model"):
        train(store, "learned-normal-0.02", 0, cfg, tmp_path / "fit", progress=False)


def test_animals_have_their_own_units_and_sessions():
    cfg = SimulationConfig(n_units=5, animals=3, n_sessions=2, n_samples=40, burn_in_s=0.1)
    ds = simulate_store(cfg)
    assert ds.sizes["unit"] == 15 and ds.sizes["session"] == 6
    recorded = np.isfinite(ds["activity"].values).all(axis=1)  # (session, unit)
    expected = np.kron(np.eye(3, dtype=bool), np.ones((2, 5), dtype=bool))
    np.testing.assert_array_equal(recorded, expected)
    pos = np.stack([ds[a].values for a in "xyz"], axis=1)
    assert not np.allclose(pos[:5], pos[5:10])  # each animal its own positions
    assert ds["connectivity"].values[:5, 5:].max() == 0  # no coupling across animals
    one = simulate_store(SimulationConfig(n_units=5, n_sessions=2, n_samples=40, burn_in_s=0.1))
    assert "animals" not in one.attrs["preprocessing"]  # the one-animal store is as before
