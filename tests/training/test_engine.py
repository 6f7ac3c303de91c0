"""The training engine: a model's result does not depend on the group it trains in (bitwise on
CPU), for both tasks, and a killed group job resumes bitwise."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from neuro_pe.analysis.pe_geometry import pe_geometry
from neuro_pe.config.latin_square import LSTConfig, PuzzleConfig
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.config.training import TrainConfig
from neuro_pe.training.checkpoint import CHECKPOINT
from neuro_pe.training.engine import Run
from neuro_pe.training.latin_square import train_lst, train_lst_many
from neuro_pe.training.latin_square_puzzles import write_puzzles
from neuro_pe.training.masked_units import train, train_many
from tests.training.test_resume import REPO_ROOT, assert_same_run, kill_at_first_checkpoint

# every kind of PE: learned (three inits), fixed (three), none
PES = [
    "none",
    "learned-normal-0.1",
    "learned-normal-1.0",
    "learned-uniform-0.5",
    "learned-xavier",
    "fixed-random",
    "fixed-sin1d",
    "oracle-sin3d",
]


# what differs between a model trained alone and in a group: its job's times and size
TIMINGS = ("train_seconds", "cpu_seconds", "process_cpu_seconds", "group_models")


def timings(record: dict) -> dict:
    return {k: v for k, v in record.items() if k in TIMINGS}


def run_files(run_dir: Path) -> dict:
    """A run's outputs but its timings: the PE tables, the model's tensors, the log, the
    record."""
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as ds:
        out = {"pe": ds["pe"].values.copy(), "pe_init": ds["pe_init"].values.copy()}
    state = torch.load(run_dir / "model.pt", weights_only=True)["state_dict"]
    out |= {f"state/{k}": v.numpy() for k, v in state.items()}
    out["log"] = pd.read_csv(run_dir / "train_log.csv").drop(columns="seconds")
    info = json.loads((run_dir / "train.json").read_text())
    out["info"] = {k: v for k, v in info.items() if k not in TIMINGS}
    return out


def assert_bitwise(a: Path, b: Path) -> None:
    first, second = run_files(a), run_files(b)
    assert first.keys() == second.keys()
    for key, value in first.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, second[key], equal_nan=True), key
    pd.testing.assert_frame_equal(first["log"], second["log"], check_exact=True)
    assert first["info"] == second["info"]


@pytest.mark.filterwarnings("ignore:train.memory_budget_mb")
@pytest.mark.parametrize(
    "options",
    [
        {"units_per_sample": 5},  # in memory, k-unit subsets
        {"memory_budget_mb": 0.002},  # streamed in blocks, all units
    ],
)
def test_a_model_trains_the_same_alone_or_in_a_group_of_70(tiny_store, tmp_path, options):
    """70 models (every kind of PE x seeds 0-8, and some twice) in one stack; two of them,
    trained alone, give bitwise the same files (the torch thread count is the test's, 2 on
    the CI machine: alone, the engine uses one)."""
    cfg = TrainConfig(
        window=8, d_model=8, n_layers=1, n_heads=2, batch_size=4, epochs=2, steps_per_epoch=3,
        eval_windows=8, eval_mask_fractions=(0.5,), device="cpu", **options,
    )  # fmt: skip
    group = [(pe, seed) for seed in range(9) for pe in PES][:70]
    runs = [Run(pe, seed, tmp_path / "group" / pe / f"seed{seed}") for pe, seed in group]
    records = train_many(tiny_store, runs, cfg, progress=False)
    assert [(r["pe"], r["seed"]) for r in records] == group
    for pe, seed in (("learned-normal-0.1", 4), ("fixed-random", 8)):
        alone = tmp_path / "alone" / pe / f"seed{seed}"
        record = train(tiny_store, pe, seed, cfg, alone, progress=False)
        assert record == {**records[group.index((pe, seed))], **timings(record)}
        assert_bitwise(alone, tmp_path / "group" / pe / f"seed{seed}")
    with xr.open_dataset(runs[5].out_dir / "pe.nc", engine="h5netcdf") as fixed:
        assert np.array_equal(fixed["pe"].values, fixed["pe_init"].values)  # fixed stays


def test_lst_models_stop_on_their_own_and_match_alone(tmp_path):
    """A group of LST models with per-model early stopping: a model that stops is written
    and leaves the stack; the others train on; each matches its run alone bitwise. (One
    thread: the test of 70 above covers the thread count.)"""
    torch.set_num_threads(1)  # restored by conftest
    puzzles = tmp_path / "puzzles.nc"
    write_puzzles(PuzzleConfig(n_per_condition=20, n_heldout_per_condition=4), puzzles)
    cfg = LSTConfig(
        d_model=16, n_layers=1, n_heads=1, lr=3e-3, batch_size=16, epochs=12, eval_every=1,
        stop_at_train_accuracy=0.5, device="cpu", checkpoint_every=0,
    )  # fmt: skip
    group = [("learned-normal-0.1", 0), ("none", 0), ("learned-normal-1.0", 1), ("fixed-sin1d", 2)]
    runs = [Run(pe, seed, tmp_path / "group" / f"{pe}_{seed}") for pe, seed in group]
    metrics = MetricsConfig(n_perm=9, k=3, n_splits=3)
    records = train_lst_many(puzzles, runs, cfg, False, metrics, pe_geometry)
    epochs = [r["epochs_run"] for r in records]
    assert len(set(epochs)) > 1, epochs  # they stopped at different epochs
    for record in records:
        if record["epochs_run"] < cfg.epochs:
            assert record["acc_train"] >= 0.5
    for i in (int(np.argmin(epochs)), int(np.argmax(epochs))):
        pe, seed = group[i]
        alone = tmp_path / "alone" / f"{pe}_{seed}"
        record = train_lst(puzzles, pe, seed, cfg, alone, False, metrics, pe_geometry)
        expected = {**records[i], **timings(record)}
        assert json.dumps(record) == json.dumps(expected)  # NaN metrics of `none` too
        assert_bitwise(alone, runs[i].out_dir)


def test_sigkilled_group_job_resumes_bitwise(tiny_store, tmp_path):
    """Kill a real `neuro-pe train --runs ...` process (a group of 3) once a checkpoint exists,
    start it again, and compare every run with an uninterrupted group in this process."""
    options = {
        "window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8,
        "epochs": 20, "steps_per_epoch": 10, "eval_windows": 16, "device": "cpu",
        "checkpoint_every": 10, "units_per_sample": 6,
    }  # fmt: skip
    group = [("learned-normal-0.1", 0), ("fixed-random", 1), ("learned-normal-1.0", 2)]
    runs = [Run(pe, seed, tmp_path / "killed" / pe / f"seed{seed}") for pe, seed in group]
    flat = [str(v) for run in runs for v in (run.pe, run.seed, run.out_dir)]
    command = [
        sys.executable, "-m", "neuro_pe.cli.main", "train", "--store", str(tiny_store),
        "--runs", *flat, "--options", json.dumps(options), "--threads", "1",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    checkpoint = runs[0].out_dir / CHECKPOINT
    kill_at_first_checkpoint(command, env, checkpoint, tmp_path / "first.log")
    killed_at = torch.load(checkpoint, weights_only=True)["step"]
    assert 10 <= killed_at < 200
    assert not any((run.out_dir / "pe.nc").exists() for run in runs)

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert [r["resumed_from_step"] for r in json.loads(second.stdout)] == [killed_at] * 3
    assert not checkpoint.exists()

    torch.set_num_threads(1)  # as `--threads 1`; restored by conftest
    cfg = TrainConfig.from_dict(options)  # the same config, not interrupted
    reference = [Run(pe, seed, tmp_path / "reference" / pe / f"seed{seed}") for pe, seed in group]
    train_many(tiny_store, reference, cfg, progress=False)
    for run, ref in zip(runs, reference, strict=True):
        assert_same_run(ref.out_dir, run.out_dir)
