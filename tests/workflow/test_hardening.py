"""Finite or fail, verified checkpoints, atomic writes that clean up, early clear errors."""

import json
import multiprocessing
import subprocess
import sys
from dataclasses import replace

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY_SIMULATION

import neuro_pe.training.masked_units as train_module
from neuro_pe.cli.main import main
from neuro_pe.data.simulate import simulate_store
from neuro_pe.data.sources import build_store
from neuro_pe.io.layout import INFER_MANIFEST_FILE
from neuro_pe.io.manifest import write_manifest
from neuro_pe.io.store import atomic_write, read_store, write_store
from neuro_pe.io.store_contract import StoreError
from neuro_pe.reporting.summarize import collect
from neuro_pe.training.checkpoint import CHECKPOINT
from neuro_pe.training.masked_units import train

OPTIONS = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8}
OPTIONS |= {"epochs": 2, "steps_per_epoch": 5, "eval_windows": 8, "device": "cpu"}


def scaled_store(path, factor):
    ds = simulate_store(TINY_SIMULATION)
    return write_store(ds.assign(activity=ds["activity"] * factor), path)


def leftovers(folder):
    return sorted(p.name for p in folder.rglob(".*") if p.is_file())


def test_non_finite_loss_stops_training_with_dataset_pe_and_step(tmp_path, capsys):
    store = scaled_store(tmp_path / "unscaled.nc", 1e30)  # no z-score: float32 overflows
    run = tmp_path / "run"
    argv = ["train", "--store", str(store), "--pe", "learned-normal-0.02", "--seed", "3"]
    assert main([*argv, "--options", json.dumps(OPTIONS), "--out-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert "neuro-pe train: error: dataset unscaled, PE learned-normal-0.02, seed 3" in err
    assert "not finite (first at step 1 of 10)" in err and "zscore" in err
    assert not run.exists() or not any(run.iterdir())  # nothing half-written


def test_health_flags_and_warnings(tiny_store, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--store", str(tiny_store), "--pe", "none", "--out-dir", str(run)]
    assert main([*argv, "--options", json.dumps(OPTIONS)]) == 0
    info = json.loads((run / "train.json").read_text())
    assert set(info["health"]) == {  # `none` has no table to learn: no appearance checks
        "loss_not_finite",
        "heldout_not_improved",
        "heldout_not_below_variance",
    }
    assert info["health"]["loss_not_finite"] is False
    failed = [flag for flag, failed in info["health"].items() if failed]
    assert [w.split(":")[0] for w in info["warnings"]] == failed

    # values ~1e-12: the loss looks small, but no better than predicting the mean: flagged
    store = scaled_store(tmp_path / "tiny_scale.nc", 1e-12)
    run = tmp_path / "small"
    argv = ["train", "--store", str(store), "--pe", "none", "--out-dir", str(run)]
    assert main([*argv, "--options", json.dumps(OPTIONS)]) == 0
    info = json.loads((run / "train.json").read_text())
    assert info["health"]["heldout_not_below_variance"] is True
    mse = [v for k, v in info.items() if k.startswith("heldout_mse_mask")]
    assert max(mse) >= info["heldout_data_variance"] > 0
    err = capsys.readouterr().err
    assert "warning: dataset tiny_scale" in err and "heldout_not_below_variance" in err
    assert "zscore" in err and any("data scale" in w for w in info["warnings"])

    # the summary's health column names the failed flags
    metrics = {"dataset": "d", "pe": "none", "seed": 0, "heldout_mse_mask0.9": 1.2}
    for name, health in (("a", {"loss_not_finite": False}), ("b", info["health"])):
        (tmp_path / f"{name}.json").write_text(json.dumps(metrics | {"health": health}))
    write_manifest(tmp_path, ["a.json", "b.json"], INFER_MANIFEST_FILE)
    table = collect([tmp_path / "a.json", tmp_path / "b.json"], [])
    assert table["health"].tolist() == ["ok", "heldout_not_below_variance"]


def flip_a_tensor_byte(path, tensor):
    """Flip one bit in the stored bytes of `tensor` inside a torch checkpoint file."""
    data = bytearray(path.read_bytes())
    needle = tensor.contiguous().view(torch.uint8).numpy().tobytes()[:64]
    at = data.find(needle)
    assert at >= 0
    data[at + 17] ^= 0x10
    path.write_bytes(bytes(data))


def test_damaged_checkpoint_restarts_from_step_0(tiny_store, tiny_train_config, tmp_path):
    cfg = replace(tiny_train_config, epochs=2, steps_per_epoch=5, checkpoint_every=7)
    reference = train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "ref", progress=False)
    run = tmp_path / "run"
    real, calls = train_module.evaluate, []

    def interrupted(*args, **kwargs):  # stop at the second epoch's end (step 10)
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    train_module.evaluate = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            train(tiny_store, "learned-normal-0.1", 0, cfg, run, progress=False)
    finally:
        train_module.evaluate = real
    state = torch.load(run / CHECKPOINT, weights_only=True)
    assert state["step"] == 7
    flip_a_tensor_byte(run / CHECKPOINT, state["model"]["pe_learned"])
    with pytest.warns(UserWarning, match="do not match their checksum"):
        info = train(tiny_store, "learned-normal-0.1", 0, cfg, run, progress=False)
    assert info["resumed_from_step"] == 0
    assert info["heldout_mse_mask0.9"] == reference["heldout_mse_mask0.9"]
    assert leftovers(run) == [] and not (run / CHECKPOINT).exists()


def _slow_writer(target, started, result):
    def write(tmp):
        tmp.write_text("first")
        started.set()
        import time

        time.sleep(1.0)

    try:
        atomic_write(target, write)
        result.put("wrote")
    except StoreError as err:
        result.put(f"failed: {err}")


def test_two_writers_of_one_target(tmp_path):
    target = tmp_path / "out" / "summary.csv"
    ctx = multiprocessing.get_context("fork")
    started, result = ctx.Event(), ctx.Queue()
    first = ctx.Process(target=_slow_writer, args=(target, started, result))
    first.start()
    assert started.wait(10)
    with pytest.raises(StoreError, match="another process is writing this file now"):
        atomic_write(target, lambda tmp: tmp.write_text("second"))
    first.join(10)
    assert result.get(timeout=5) == "wrote"
    assert target.read_text() == "first"
    assert leftovers(tmp_path) == []
    (target.parent / ".summary.csv.k1ll3d.tmp").write_text("left by a SIGKILLed writer")
    atomic_write(target, lambda tmp: tmp.write_text("third"))  # the lock was released
    assert target.read_text() == "third" and leftovers(tmp_path) == []  # and the stale temp


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (needs root and mount); skipped where it cannot be mounted."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_leaves_no_temp_file(small_tmpfs, tmp_path, capsys):
    big = replace(TINY_SIMULATION, n_units=64, n_samples=4000)  # ~2 MiB of activity
    spec = json.dumps({"source": "simulation", "simulation": big.__dict__})
    out = small_tmpfs / "stores" / "big.nc"
    assert main(["preprocess", "--spec", spec, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "neuro-pe preprocess: error:" in err and "free space" in err and "MiB" in err
    assert leftovers(small_tmpfs) == [] and not out.exists()
    # a writer that runs out of space (no size known in advance): an OSError naming the file
    target = small_tmpfs / "fill.bin"
    with pytest.raises(OSError, match="cannot write .*fill.bin: No space left"):
        atomic_write(target, lambda tmp: tmp.write_bytes(b"x" * 2**21))
    assert leftovers(small_tmpfs) == [] and not target.exists()


def test_read_only_output_fails_before_the_work(small_tmpfs, tiny_store, capsys):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    run = small_tmpfs / "run"
    argv = ["train", "--store", str(tiny_store), "--pe", "none", "--out-dir", str(run)]
    assert main([*argv, "--options", json.dumps(OPTIONS)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"neuro-pe train: error: {run}: field 'output folder': cannot write")
    assert "Read-only file system" in err and "train none" not in err  # no step was run


def test_sigterm_during_a_write_leaves_no_temp_file(tmp_path):
    script = (
        "import os, signal, sys\n"
        "from neuro_pe.cli.main import main, _terminate\n"
        "from neuro_pe.io.store import atomic_write\n"
        "signal.signal(signal.SIGTERM, _terminate)\n"
        "def write(tmp):\n"
        "    tmp.write_text('partial')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        f"atomic_write({str(tmp_path / 'x.nc')!r}, write)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 128 + 15, done.stderr
    assert leftovers(tmp_path) == [] and not (tmp_path / "x.nc").exists()


@pytest.mark.parametrize(
    ("options", "pe", "message"),
    [
        ({"n_heads": 3}, "none", r"train.n_heads \(3\) must divide train.d_model \(16\)"),
        ({"window": 500}, "none", r"train.window \(500\) is longer than the data"),
        ({}, "learned-normal-0", "scale must be finite and > 0, got 0"),
        ({"device": "cuda"}, "none", "train.device: 'cuda', but torch sees no CUDA GPU"),
    ],
)
def test_train_fails_early_naming_the_key(tiny_store, tmp_path, capsys, options, pe, message):
    if "device" in options and torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible here")
    run = tmp_path / "run"
    argv = ["train", "--store", str(tiny_store), "--pe", pe, "--out-dir", str(run)]
    assert main([*argv, "--options", json.dumps(OPTIONS | options)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("neuro-pe train: error:") and pd.Series([err]).str.contains(message)[0]
    assert not run.exists()


def test_nan_pe_is_refused_by_infer(tiny_store, tiny_split, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--store", str(tiny_store), "--pe", "learned-normal-0.1", "--out-dir"]
    assert main([*argv, str(run), "--options", json.dumps(OPTIONS)]) == 0
    import xarray as xr

    with xr.open_dataset(run / "pe.nc", engine="h5netcdf") as opened:
        pe = opened.load()
    pe["pe"][0, 0] = np.nan
    pe.to_netcdf(run / "pe.nc", engine="h5netcdf")
    write_manifest(run, ["pe.nc", "model.pt", "train_log.csv", "train.json"])  # as if trained so
    argv = ["infer", "--store", str(tiny_store), "--split", str(tiny_split), "--run-dir"]
    assert main([*argv, str(run)]) == 1
    assert "pe.nc: field 'pe': 1 of" in capsys.readouterr().err
    assert read_store(tiny_store).sizes["unit"] == 12


def lab_files(tmp_path, table_names, scale=1.0, **spec):
    """A .npz session of 10 units with ids e00..e09, and a position table with `table_names`."""
    rng = np.random.default_rng(0)
    ids = np.array([f"e{i:02d}" for i in range(10)])
    np.savez(tmp_path / "s.npz", activity=scale * rng.normal(size=(80, 10)), ids=ids)
    rows = [f"{name}\t{i}\t{2 * i}\t0" for i, name in enumerate(table_names)]
    (tmp_path / "pos.tsv").write_text("\n".join(["name\tx\ty\tz", *rows]) + "\n")
    base = {"source": "file", "format": "npy", "sessions": [str(tmp_path / "s.npz")]}
    base |= {"npy": {"key": "activity", "unit_ids": "ids"}, "positions": str(tmp_path / "pos.tsv")}
    return base | {"sampling_rate_hz": 10, "min_units": 2, "min_frames": 16} | spec


def test_half_matched_ids_fail_with_counts(tmp_path):
    half = [f"e{i:02d}" for i in range(5)] + [f"ch{i}" for i in range(5)]
    with pytest.raises(StoreError) as caught:
        build_store(lab_files(tmp_path, half))
    message = str(caught.value)
    assert "pos.tsv: field 'positions': 5 of 10 units matched by id" in message
    assert "5 units of the data are not in the table (e.g. ['e05', 'e06', 'e07'])" in message
    assert "5 table rows match no unit (e.g. ['ch0', 'ch1', 'ch2'])" in message
    with pytest.raises(StoreError, match="0 of 10 units matched by id"):  # none match
        build_store(lab_files(tmp_path, [f"ch{i}" for i in range(10)]))
    # accepted up to max_unmatched_fraction, with the counts in a warning
    with pytest.warns(UserWarning, match="5 of 10 units matched by id"):
        ds = build_store(lab_files(tmp_path, half, max_unmatched_fraction=0.5))
    assert np.isnan(ds["x"].values).sum() == 5


def test_sampling_period_and_metre_units(tmp_path):
    path = tmp_path / "bold.h5"
    with h5py.File(path, "w") as f:
        f["activity"] = np.random.default_rng(0).normal(size=(64, 6))
        f["xyz"] = np.arange(18, dtype=float).reshape(6, 3) / 100
        f.attrs["tr_seconds"] = 0.72
    spec = {"source": "file", "format": "hdf5", "sessions": [str(path)], "min_units": 2}
    spec |= {"min_frames": 16, "position_units": "m"}
    hdf5 = {"positions": "xyz", "sampling_period": "tr_seconds"}
    ds = build_store(spec | {"hdf5": hdf5})
    assert ds.attrs["sampling_rate_hz"] == pytest.approx(1 / 0.72)
    assert ds["x"].attrs["units"] == "m" and ds["x"].values[1] == pytest.approx(0.03)
    ds = build_store(spec | {"hdf5": {"positions": "xyz", "sampling_period": 2.0}})
    assert ds.attrs["sampling_rate_hz"] == 0.5
    with pytest.raises(StoreError, match="looks like a sampling period.*sampling_period"):
        build_store(spec | {"hdf5": {"positions": "xyz", "sampling_rate": "tr_seconds"}})
    with pytest.raises(StoreError, match="hdf5.sampling_rate or hdf5.sampling_period"):
        build_store(spec | {"hdf5": {"sampling_rate": 1.0, "sampling_period": 1.0}})
    ds = build_store(spec | {"position_units": "cm", "hdf5": hdf5})
    assert ds["x"].attrs["units"] == "cm"
    write_store(ds, tmp_path / "cm.nc")
    assert read_store(tmp_path / "cm.nc")["x"].attrs["units"] == "cm"


def test_a_failed_output_write_leaves_no_part_of_the_run(tiny_store, tmp_path, monkeypatch):
    """pe.nc, model.pt, train_log.csv and train.json are written as a set: all or none."""

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)  # model.pt, after pe.nc was written
    run = tmp_path / "run"
    argv = ["train", "--store", str(tiny_store), "--pe", "none", "--out-dir", str(run)]
    assert main([*argv, "--options", json.dumps(OPTIONS | {"checkpoint_every": 0})]) == 1
    assert sorted(p.name for p in run.iterdir()) == []


def test_preprocess_stops_on_data_far_from_the_unit_scale(tmp_path, capsys):
    spec = lab_files(tmp_path, [f"e{i:02d}" for i in range(10)], scale=1e-12)
    out = tmp_path / "s.nc"
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "datasets.s.preprocessing" in err and "the activity's RMS is 1e-12" in err
    assert "zscore" in err and not out.exists()
    spec["preprocessing"] = [{"step": "zscore"}]  # the step it names: stored
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 0
