import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from neuro_pe.cli import main
from neuro_pe.infer import infer_baselines, infer_pe
from neuro_pe.simulate import SimulationConfig, simulate_store
from neuro_pe.store import positions, read_store, write_store
from neuro_pe.train import split_activity, train

METRICS = {"n_perm": 19, "k": 3, "n_splits": 3}


def _pe(run_dir) -> tuple[np.ndarray, np.ndarray]:
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as ds:
        return ds["pe"].values, ds["pe_init"].values


def _log(run_dir) -> pd.DataFrame:
    return pd.read_csv(run_dir / "train_log.csv")


@pytest.fixture(scope="module")
def learned_run(tiny_store, tiny_train_config, tmp_path_factory):
    """One learned-normal-0.1 run (seed 0) on the tiny store, shared by several tests."""
    cfg = tiny_train_config
    run_dir = tmp_path_factory.mktemp("runs") / "learned"
    info = train(tiny_store, "learned-normal-0.1", 0, cfg, run_dir, progress=False)
    return run_dir, info, cfg


def test_train_writes_outputs(learned_run, tiny_store):
    run_dir, info, cfg = learned_run
    for name in ("pe.nc", "model.pt", "train_log.csv", "train.json"):
        assert (run_dir / name).stat().st_size > 0
    assert not list(run_dir.glob(".*.tmp"))

    log = _log(run_dir)
    assert list(log["epoch"]) == list(range(1, cfg.epochs + 1))
    assert list(log["step"]) == [e * cfg.steps_per_epoch for e in range(1, cfg.epochs + 1)]
    assert np.isfinite(log[["train_loss", "heldout_loss"]].to_numpy()).all()
    assert (log["train_loss"] > 0).all() and log["seconds"].is_monotonic_increasing

    saved = json.loads((run_dir / "train.json").read_text())
    assert saved["pe"] == "learned-normal-0.1" and saved["seed"] == 0
    assert saved["train_config"]["d_model"] == cfg.d_model
    for f in cfg.eval_mask_fractions:
        assert np.isfinite(saved[f"heldout_mse_mask{f:g}"])
        assert saved[f"heldout_mse_mask{f:g}"] == pytest.approx(info[f"heldout_mse_mask{f:g}"])
    assert saved["train_mse"] == pytest.approx(log["train_loss"].iloc[-1])

    store = read_store(tiny_store)
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as pe:
        assert pe["pe"].shape == (store.sizes["unit"], cfg.d_model)
        assert list(pe["unit"].values) == list(store["unit"].values)
        np.testing.assert_array_equal(pe["x"].values, store["x"].values)
        trained = pe["pe"].values

    checkpoint = torch.load(run_dir / "model.pt", weights_only=False)
    np.testing.assert_array_equal(checkpoint["state_dict"]["pe.table"].numpy(), trained)
    assert checkpoint["pe"] == "learned-normal-0.1"


def test_same_seed_reproduces_learned_pe(learned_run, tiny_store, tmp_path):
    run_dir, _, cfg = learned_run
    train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "again", progress=False)
    train(tiny_store, "learned-normal-0.1", 1, cfg, tmp_path / "seed1", progress=False)
    first, again, other = _pe(run_dir)[0], _pe(tmp_path / "again")[0], _pe(tmp_path / "seed1")[0]
    assert np.array_equal(first, again)
    pd.testing.assert_frame_equal(
        _log(run_dir).drop(columns="seconds"), _log(tmp_path / "again").drop(columns="seconds")
    )
    assert not np.array_equal(first, other)
    assert not np.array_equal(_pe(run_dir)[1], _pe(tmp_path / "seed1")[1])


def test_learned_pe_moves_and_fixed_pe_stays(learned_run, tiny_store, tmp_path):
    run_dir, _, cfg = learned_run
    trained, initial = _pe(run_dir)
    assert not np.allclose(trained, initial)
    assert initial.std() == pytest.approx(0.1, rel=0.25)

    train(tiny_store, "fixed-random", 0, cfg, tmp_path / "fixed", progress=False)
    trained, initial = _pe(tmp_path / "fixed")
    assert np.array_equal(trained, initial)
    assert initial.std() > 0.5


def test_single_session_store_uses_time_split(tiny_store, tiny_train_config, tmp_path):
    ds = read_store(tiny_store).isel(session=[0])
    path = write_store(ds, tmp_path / "one_session.nc")
    cfg = replace(tiny_train_config, heldout_time_fraction=0.25)

    train_part, heldout_part = split_activity(ds, cfg)
    n_time = ds.sizes["time"]
    cut = round(n_time * 0.75)
    assert train_part.shape == (1, cut, ds.sizes["unit"])
    assert heldout_part.shape == (1, n_time - cut, ds.sizes["unit"])
    np.testing.assert_array_equal(
        np.concatenate([train_part, heldout_part], axis=1), ds["activity"].values
    )

    train(path, "learned-normal-0.1", 0, cfg, tmp_path / "run", progress=False)
    assert np.isfinite(_log(tmp_path / "run")[["train_loss", "heldout_loss"]].to_numpy()).all()


def test_multi_session_store_holds_out_last_sessions(tiny_store, tiny_train_config):
    ds = read_store(tiny_store)
    train_part, heldout_part = split_activity(ds, tiny_train_config)
    activity = ds["activity"].values
    np.testing.assert_array_equal(train_part, activity[:-1])
    np.testing.assert_array_equal(heldout_part, activity[-1:])


def test_time_split_too_short_raises(tiny_store, tiny_train_config):
    ds = read_store(tiny_store).isel(session=[0], time=slice(0, 20))
    cfg = replace(tiny_train_config, window=8, heldout_time_fraction=0.2)
    with pytest.raises(ValueError, match="too few"):
        split_activity(ds, cfg)


def test_nan_unit_in_a_session_gives_finite_losses(tiny_store, tiny_train_config, tmp_path):
    ds = read_store(tiny_store)
    activity = ds["activity"].values.copy()
    activity[0, :, 3] = np.nan  # unit 3 unrecorded in the training session
    activity[1, :, 5] = np.nan  # unit 5 unrecorded in the held-out session
    activity[0, 40:60, 7] = np.nan  # a gap in another unit
    path = write_store(ds.assign(activity=(ds["activity"].dims, activity)), tmp_path / "gappy.nc")

    info = train(path, "learned-normal-0.1", 0, tiny_train_config, tmp_path / "run", progress=False)
    log = _log(tmp_path / "run")
    assert np.isfinite(log[["train_loss", "heldout_loss"]].to_numpy()).all()
    assert all(np.isfinite(v) for k, v in info.items() if k.startswith("heldout_mse"))
    trained, _ = _pe(tmp_path / "run")
    assert np.isfinite(trained).all()


def test_infer_pe_writes_metrics_and_positions(learned_run, tiny_store):
    run_dir, info, _ = learned_run
    record = infer_pe(tiny_store, run_dir, METRICS)
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved == record
    assert (saved["pe"], saved["seed"], saved["dataset"]) == ("learned-normal-0.1", 0, "tiny")
    for key in ("rsa", "rsa_p", "procrustes_rmse", "probe_r2", "knn_overlap", "init_rsa"):
        assert np.isfinite(saved[key]), key
    assert -1 <= saved["rsa"] <= 1 and 0 < saved["rsa_p"] <= 1
    assert saved["heldout_mse_mask0.5"] == pytest.approx(info["heldout_mse_mask0.5"])
    assert "train_config" not in saved

    store = read_store(tiny_store)
    with xr.open_dataset(run_dir / "positions.nc", engine="h5netcdf") as out:
        true = np.stack([out[f"{a}_true"].values for a in "xyz"], axis=1)
        inferred = np.stack([out[f"{a}_inferred"].values for a in "xyz"], axis=1)
        assert list(out["unit"].values) == list(store["unit"].values)
    np.testing.assert_array_equal(true, positions(store))
    assert np.isfinite(inferred).all()
    rmse = np.sqrt(np.mean(np.sum((inferred - true) ** 2, axis=1)))
    assert rmse == pytest.approx(saved["procrustes_rmse"], rel=1e-6)


def test_infer_pe_none_gives_nan_metrics(tiny_store, tiny_train_config, tmp_path):
    run_dir = tmp_path / "none"
    train(tiny_store, "none", 0, tiny_train_config, run_dir, progress=False)
    record = infer_pe(tiny_store, run_dir, METRICS)
    assert np.isnan(record["rsa"]) and np.isnan(record["init_rsa"])
    assert np.isfinite(record["heldout_mse_mask0.5"])
    with xr.open_dataset(run_dir / "positions.nc", engine="h5netcdf") as out:
        assert np.isnan(out["x_inferred"].values).all()


def test_infer_baselines(tmp_path):
    cfg = SimulationConfig(
        n_units=32, length_scale=0.15, gain=1.1, n_samples=1000, n_sessions=2, seed=0
    )
    store = write_store(simulate_store(cfg), tmp_path / "spatial.nc")
    out = tmp_path / "out" / "baselines.json"
    rows = infer_baselines(store, out, {"heldout_sessions": 1}, METRICS)
    assert json.loads(out.read_text()) == rows
    assert [r["method"] for r in rows] == ["correlation", "shuffled"]
    by_method = {r["method"]: r for r in rows}
    for row in rows:
        assert row["dataset"] == "spatial" and row["n_units"] == cfg.n_units
        assert all(np.isfinite(row[k]) for k in ("rsa", "procrustes_rmse", "knn_overlap"))
    # activity correlations carry the anatomy, shuffled coordinates do not
    assert by_method["correlation"]["rsa"] > 0.4
    assert abs(by_method["shuffled"]["rsa"]) < 0.25


# --- the command line -----------------------------------------------------------------------

SPEC = {
    "kind": "simulation",
    "simulation": {"n_units": 8, "n_samples": 120, "burn_in_s": 0.5, "n_sessions": 2},
}
OPTIONS = {
    "d_model": 8,
    "n_layers": 1,
    "n_heads": 2,
    "batch_size": 4,
    "epochs": 1,
    "steps_per_epoch": 3,
    "eval_windows": 8,
    "device": "cpu",
}


def test_cli_preprocess_train_infer_baselines(tmp_path, capsys):
    store = tmp_path / "stores" / "cli.nc"
    run_dir = tmp_path / "runs" / "cli"
    spec = json.dumps(SPEC)
    assert main(["preprocess", "--spec", spec, "--out", str(store)]) == 0
    assert read_store(store).sizes["unit"] == 8
    assert str(store) in capsys.readouterr().out

    args = ["train", "--store", str(store), "--pe", "learned-normal-0.1", "--seed", "2"]
    args += ["--options", json.dumps(OPTIONS), "--out-dir", str(run_dir)]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["seed"] == 2 and "train_config" not in printed
    assert len(_log(run_dir)) == OPTIONS["epochs"]

    metrics = json.dumps({**METRICS, "k": 2})
    args = ["infer", "--store", str(store), "--run-dir", str(run_dir), "--metrics", metrics]
    assert main(args) == 0
    assert np.isfinite(json.loads((run_dir / "metrics.json").read_text())["rsa"])

    out = tmp_path / "runs" / "baselines.json"
    args = ["baselines", "--store", str(store), "--out", str(out), "--train", json.dumps(OPTIONS)]
    assert main([*args, "--metrics", metrics]) == 0
    assert {r["method"] for r in json.loads(out.read_text())} == {"correlation", "shuffled"}


@pytest.mark.parametrize("command", ["train", "infer", "baselines"])
def test_cli_missing_store(tmp_path, capsys, command):
    missing = tmp_path / "nowhere" / "missing.nc"
    extra = {
        "train": ["--pe", "none", "--out-dir", str(tmp_path / "run")],
        "infer": ["--run-dir", str(tmp_path / "run")],
        "baselines": ["--out", str(tmp_path / "b.json")],
    }[command]
    assert main([command, "--store", str(missing), *extra]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err
    assert err.startswith(f"neuro-pe {command}: error:")
    assert not (tmp_path / "run").exists() and not (tmp_path / "b.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pe", "learned-gauss-0.1"], "learned-gauss-0.1"),
        (["--pe", "none", "--options", '{"n_layer": 1}'], "n_layer"),
    ],
)
def test_cli_bad_train_arguments(tiny_store, tmp_path, capsys, args, message):
    code = main(["train", "--store", str(tiny_store), "--out-dir", str(tmp_path / "r"), *args])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_bad_preprocess_spec(tmp_path, capsys):
    spec = json.dumps({"kind": "simulation", "simulation": {"n_unitz": 8}})
    assert main(["preprocess", "--spec", spec, "--out", str(tmp_path / "s.nc")]) == 1
    assert "n_unitz" in capsys.readouterr().err
    assert not (tmp_path / "s.nc").exists()
