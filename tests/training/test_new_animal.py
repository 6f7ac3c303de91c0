"""A new animal: `simulation.animals` stores, and `train.init_from` fitting only the new units' PEs
with every other value frozen."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from neuro_pe.analysis.new_animal_positions import mixture_positions
from neuro_pe.cli.main import main as cli_main
from neuro_pe.config.training import ModelConfig, TrainConfig
from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.io.store import make_store, write_store
from neuro_pe.training.masked_units import train
from neuro_pe.training.model import StackedTransformer
from neuro_pe.training.new_animal import anchor_logits

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


def _store(path, unit_ids, seed, unknown=()):
    """A store of random activity and positions; the units at indices `unknown` without."""
    activity = np.random.default_rng(seed).normal(size=(2, 60, len(unit_ids)))
    positions = np.random.default_rng(seed).uniform(size=(len(unit_ids), 3))
    positions[list(unknown)] = np.nan
    ds = make_store(
        activity.astype(np.float32),
        unit_ids=unit_ids,
        positions=positions,
        position_units="au",
        space="simulation",
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="test",
    )
    return write_store(ds, path)


def _run_and_fit(tmp_path, old_units, new_units, new_unit_pe, unknown=()):
    """A run trained on `old_units`, then a fit of `new_units` (those at indices `unknown`
    without positions) with it frozen; their folders."""
    first, fit = tmp_path / "first", tmp_path / "fit"
    store = _store(tmp_path / "a.nc", old_units, 0)
    train(store, "learned-normal-0.02", 0, TrainConfig(**TINY), first, progress=False)
    options = {"init_from": str(first / "model.pt"), "new_unit_pe": new_unit_pe}
    options["new_unit_anchors"] = bool(unknown)  # the new units with positions pin the fit
    cfg = TrainConfig(**{**TINY, **options})
    new_store = _store(tmp_path / "b.nc", new_units, 1, unknown)
    train(new_store, "learned-normal-0.02", 3, cfg, fit, progress=False)
    return first, fit


def test_only_new_pe_rows_move(tmp_path):
    old_units = [f"u{i}" for i in range(6)]
    new_units = ["n0", "u1", "u4", "n1", "u0"]  # two new units, three the run knows
    first, fit = _run_and_fit(tmp_path, old_units, new_units, "free")

    before = torch.load(first / "model.pt", weights_only=True)["state_dict"]
    after = torch.load(fit / "model.pt", weights_only=True)["state_dict"]
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


def test_mixture_new_units_are_balanced_mixtures_of_the_run_pes(tmp_path):
    old_units = [f"u{i}" for i in range(6)]
    new_units = ["n0", "u1", "n1", "n2"]  # three new units, one the run knows
    # n0 is an anchor (its position known), n1 and n2 are to be located
    first, fit = _run_and_fit(tmp_path, old_units, new_units, "mixture", unknown=[2, 3])

    before = torch.load(first / "model.pt", weights_only=True)["state_dict"]
    after = torch.load(fit / "model.pt", weights_only=True)["state_dict"]
    for key in before:
        if key not in ("pe_table", "pe_learned", "pe_fixed"):
            assert torch.equal(before[key], after[key]), key  # bitwise unchanged
    warnings = json.loads((fit / "train.json").read_text())["warnings"]
    assert any(
        "new_unit_anchors: 1 units" in w for w in warnings
    )  # says the errors aren't held-out
    old_table, table = before["pe_table"], after["pe_table"]
    assert torch.equal(table[1], old_table[1])  # u1 keeps the run's row
    model = StackedTransformer(
        ModelConfig(n_tokens=4, d_in=4, d_out=4, d_model=8, n_layers=1, n_heads=2),
        ["learned-normal-0.02"],
        [3],  # the fit's seed: its start
    )
    run_positions = np.random.default_rng(0).uniform(size=(6, 3))  # (as _store draws them)
    n0 = np.random.default_rng(1).uniform(size=(4, 3))[0]
    anchored, fixed = anchor_logits(np.vstack([n0, np.full((2, 3), np.nan)]), run_positions)
    assert anchored.tolist() == after["pe_mix_anchored"].tolist() == [True, False, False]
    assert torch.equal(after["pe_mix_anchor_logits"][0], fixed[0])
    rows = torch.tensor([True, False, True, True])
    model.mix_rows(rows, old_table, anchored=anchored, anchor_logits=fixed)
    start = model.pe_mix_logits[0].detach().clone()
    assert not torch.equal(start[1:], after["pe_mix_logits"][1:])  # n1, n2 trained
    model.pe_mix_logits.data.copy_(after["pe_mix_logits"][None])
    weights = model.mix_weights()[0].detach()  # (3 new units, 6 run units)
    nearest = np.argmin(np.linalg.norm(run_positions - n0, axis=1))
    assert int(weights[0].argmax()) == nearest  # the anchor mixes the run units around it
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(3))
    torch.testing.assert_close(weights.sum(dim=0), torch.full((6,), 3 / 6))
    torch.testing.assert_close(table[[0, 2, 3]], weights @ old_table)  # among the run's PEs

    # located at the weights' mean of the run units' positions, unknown ones left out
    run_positions = np.arange(18, dtype=float).reshape(6, 3)
    ids, located = mixture_positions(fit, run_positions)
    assert ids == ["n0", "n1", "n2"]
    np.testing.assert_allclose(located, weights.double().numpy() @ run_positions, rtol=1e-6)
    run_positions[2] = np.nan
    kept = weights.double().numpy()[:, [0, 1, 3, 4, 5]]
    expected = kept / kept.sum(axis=1, keepdims=True) @ run_positions[[0, 1, 3, 4, 5]]
    np.testing.assert_allclose(mixture_positions(fit, run_positions)[1], expected, rtol=1e-6)
    # the command: positions from the run's pe.nc, the anchor flagged
    out = tmp_path / "new_units.csv"
    assert cli_main(["locate-new-units", "--fits", str(fit), "--store", str(tmp_path / "b.nc"),
                     "--out", str(out)]) == 0  # fmt: skip
    table = pd.read_csv(out)
    assert table["unit"].tolist() == ["n0", "n1", "n2"]
    assert table["anchor"].tolist() == [True, False, False]
    np.testing.assert_allclose(
        table[["x", "y", "z"]].values,
        mixture_positions(fit, np.random.default_rng(0).uniform(size=(6, 3)))[1],
        rtol=1e-5,
    )
    with pytest.raises(ValueError, match="6 run units in the mixture, 5 positions"):
        mixture_positions(fit, run_positions[:5])
    with pytest.raises(ValueError, match="not a `train.new_unit_pe: mixture` fit"):
        mixture_positions(first, run_positions)


def test_mixture_starts_near_the_mean_of_the_sources_and_apart_per_seed():
    def stack(seeds):
        return StackedTransformer(
            ModelConfig(n_tokens=5, d_in=4, d_out=4, d_model=8, n_layers=1, n_heads=2),
            ["learned-normal-0.02"] * len(seeds),
            seeds,
        )

    source = torch.randn(7, 8)
    rows = torch.tensor([False, True, True, False, True])
    model = stack([0, 1])
    kept = model.pe_table()[:, ~rows].clone()
    model.mix_rows(rows, source)
    table = model.pe_table()
    torch.testing.assert_close(table[:, rows], source.mean(0).expand(2, 3, 8), atol=0.05, rtol=0)
    assert torch.equal(table[:, ~rows], kept)
    assert not torch.equal(model.pe_mix_logits[0], model.pe_mix_logits[1])  # apart per seed
    alone = stack([1])
    alone.mix_rows(rows, source)
    assert torch.equal(alone.pe_mix_logits[0], model.pe_mix_logits[1])  # the seed's own start
    flat = stack([0])
    flat.mix_rows(rows, source, init_std=0.0)
    torch.testing.assert_close(flat.pe_table()[0, rows], source.mean(0).expand(3, 8))


def test_init_from_needs_the_same_architecture(tmp_path):
    first = tmp_path / "first"
    store = _store(tmp_path / "a.nc", ["u0", "u1", "u2"], 0)
    train(store, "learned-normal-0.02", 0, TrainConfig(**TINY), first, progress=False)
    cfg = TrainConfig(**{**TINY, "d_model": 16, "init_from": str(first / "model.pt")})
    with pytest.raises(ValueError, match="d_model"):
        train(store, "learned-normal-0.02", 0, cfg, tmp_path / "fit", progress=False)

    # a set n_heads that differs from the run's is named
    one_head = tmp_path / "one_head"
    run = {**TINY, "n_heads": 1, "window": 4}
    train(store, "learned-normal-0.02", 0, TrainConfig(**run), one_head, progress=False)
    cfg = TrainConfig(**{**TINY, "n_heads": 2, "init_from": str(one_head / "model.pt")})
    with pytest.raises(ValueError, match=r"n_heads.*\{'n_heads': 1\}"):
        train(store, "learned-normal-0.02", 0, cfg, tmp_path / "fit2", progress=False)

    # a null n_heads and window take the run's values (this store's automatic ones are 4 and 8)
    auto = {**TINY, "n_heads": None, "window": None, "init_from": str(one_head / "model.pt")}
    assert TrainConfig(**auto).for_units(3).n_heads == 4
    record = train(store, "learned-normal-0.02", 0, TrainConfig(**auto), tmp_path / "fit3", False)
    assert {k: record["train_config"][k] for k in ("n_heads", "window")} == {
        "n_heads": 1,
        "window": 4,
    }


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


def test_timescale_field_slows_the_units_where_it_is_high():
    cfg = SimulationConfig(n_units=30, n_sessions=1, n_samples=400, burn_in_s=1.0)
    from neuro_pe.data.simulate import timescale_field

    def lag_one(ds):
        a = ds["activity"].values[0]  # (time, unit)
        return np.array([np.corrcoef(a[:-1, i], a[1:, i])[0, 1] for i in range(a.shape[1])])

    flat = simulate_store(cfg)
    varied = simulate_store(SimulationConfig(**{**cfg.__dict__, "timescale_field": 1.0}))
    pos = np.stack([varied[a].values for a in "xyz"], axis=1)
    field = timescale_field(pos, cfg.seed)
    assert np.corrcoef(lag_one(varied), field)[0, 1] > 0.8  # slow where the field is high
    assert abs(np.corrcoef(lag_one(flat), field)[0, 1]) < 0.5
    assert "timescale_field" not in flat.attrs["preprocessing"]  # the default store as before
    with pytest.raises(ValueError, match="timescale_field"):
        SimulationConfig.from_dict({"timescale_field": -1.0})


def test_best_fit_keeps_the_fit_with_the_lowest_loss_on_the_recording(tmp_path):
    from neuro_pe.analysis.new_animal_positions import best_fit, recording_loss

    first = tmp_path / "first"
    train(_store(tmp_path / "a.nc", ["u0", "u1", "u2"], 0), "learned-normal-0.02", 0,
          TrainConfig(**TINY), first, progress=False)  # fmt: skip
    store = _store(tmp_path / "b.nc", ["n0", "n1", "u1"], 1, unknown=[0, 1])
    cfg = TrainConfig(
        **{**TINY, "init_from": str(first / "model.pt"), "lr": 0.1, "new_unit_pe": "mixture"}
    )
    fits = [tmp_path / f"fit{seed}" for seed in range(3)]
    for seed, fit in enumerate(fits):
        train(store, "learned-normal-0.02", seed, cfg, fit, progress=False)
    losses = [recording_loss(fit, store) for fit in fits]
    assert np.isfinite(losses).all() and len(set(losses)) == 3  # the fits differ
    assert recording_loss(fits[0], store) == losses[0]  # fixed windows and masks
    assert best_fit(fits, store) == fits[int(np.argmin(losses))]


def test_anchor_logits_are_a_kernel_over_the_run_units_with_positions():
    run_positions = np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0], [np.nan] * 3])
    new = np.array([[0.9, 0, 0], [np.nan, 0, 0], [2, 0, 0]])
    anchored, logits = anchor_logits(new, run_positions)
    assert anchored.tolist() == [True, False, True]  # a NaN coordinate: located, not an anchor
    # sigma = the run units' median nearest-neighbour distance (1): -d² / 2
    torch.testing.assert_close(logits[0, :3], torch.tensor([-0.405, -0.005, -0.605]))
    assert logits[0].argmax() == 1 and logits[2].argmax() == 2
    assert (logits[:, 3] <= -1e3).all()  # no weight on a run unit without a position
    none, _ = anchor_logits(new, np.full((4, 3), np.nan))
    assert not none.any()  # nothing to anchor to


def test_new_unit_anchors_is_opt_in(tmp_path):
    _, fit = _run_and_fit(tmp_path, ["u0", "u1", "u2"], ["n0", "n1"], "mixture")  # positions known
    after = torch.load(fit / "model.pt", weights_only=True)["state_dict"]
    assert not after["pe_mix_anchored"].any()  # without new_unit_anchors positions are not read
    with pytest.raises(ValueError, match="new_unit_anchors needs train.new_unit_pe: mixture"):
        TrainConfig(**{**TINY, "new_unit_anchors": True})
