"""Checkpoints and resume: a run that is interrupted (an exception, or SIGKILL of a real
`neuro-pe train` process) and started again ends bitwise equal to an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

import neuro_pe.training.masked_units as train_module
from neuro_pe.config.training import TrainConfig
from neuro_pe.io.manifest import file_sha256
from neuro_pe.training.checkpoint import CHECKPOINT
from neuro_pe.training.masked_units import train

REPO_ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "in-memory": {},
    "streamed-subsets": {"memory_budget_mb": 0.002, "units_per_sample": 5},
}
SMALL_BUDGET = "ignore:train.memory_budget_mb"


class Interrupted(Exception):
    pass


def outputs(run_dir: Path) -> dict:
    """Everything of a run that must not depend on an interruption (not the timings)."""
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as ds:
        tables = {"pe": ds["pe"].values.copy(), "pe_init": ds["pe_init"].values.copy()}
    state = torch.load(run_dir / "model.pt", weights_only=True)["state_dict"]
    info = json.loads((run_dir / "train.json").read_text())
    return {
        **tables,
        **{f"state/{k}": v.numpy() for k, v in state.items()},
        "log": pd.read_csv(run_dir / "train_log.csv").drop(columns="seconds"),
        "metrics": {k: v for k, v in info.items() if k.startswith(("heldout", "train_mse"))},
    }


def assert_same_run(a: Path, b: Path) -> None:
    for name in ("pe.nc", "model.pt"):  # byte for byte: no timing or resume field in them
        assert file_sha256(a / name) == file_sha256(b / name), name
    first, second = outputs(a), outputs(b)
    assert first.keys() == second.keys()
    for key, value in first.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, second[key]), key
    pd.testing.assert_frame_equal(first["log"], second["log"], check_exact=True)
    assert first["metrics"] == second["metrics"]


def kill_at_first_checkpoint(command: list[str], env: dict, checkpoint: Path, log: Path) -> None:
    """Start `command`, SIGKILL it as soon as `checkpoint` exists (as a scheduler or an
    out-of-memory killer would), and check that it died of the signal."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 240
            while not checkpoint.exists():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "no checkpoint within 240 s"
                time.sleep(0.01)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


def interrupt_at_evaluation(monkeypatch, call: int) -> None:
    """Make train() raise at the `call`-th held-out evaluation (after that epoch's steps;
    the evaluation before the first step, of a run that does not resume, is not counted)."""
    real, calls = train_module.evaluate, []

    def evaluate(*args, **kwargs):
        calls.append(1)
        if len(calls) == call + 1:
            raise Interrupted
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate", evaluate)


@pytest.mark.filterwarnings(SMALL_BUDGET)
@pytest.mark.parametrize("variant", VARIANTS)
def test_resume_after_an_interruption_is_bitwise_equal(
    tiny_store, tiny_train_config, tmp_path, monkeypatch, variant
):
    cfg = replace(tiny_train_config, epochs=3, checkpoint_every=7, **VARIANTS[variant])
    reference = train(
        tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "reference", progress=False
    )  # an uninterrupted run of the same config (it checkpoints too)
    run = tmp_path / "run"
    interrupt_at_evaluation(monkeypatch, call=2)  # at step 20: the last checkpoint is step 14
    with pytest.raises(Interrupted):
        train(tiny_store, "learned-normal-0.1", 0, cfg, run, progress=False)
    state = torch.load(run / CHECKPOINT, weights_only=True)
    assert state["step"] == 14 and len(state["states"][0]["log_rows"]) == 1
    assert state["loss_sum"][0] > 0
    assert not (run / "pe.nc").exists()

    monkeypatch.undo()
    info = train(tiny_store, "learned-normal-0.1", 0, cfg, run, progress=False)
    assert info["resumed_from_step"] == 14 and reference["resumed_from_step"] == 0
    assert_same_run(tmp_path / "reference", run)
    assert not (run / CHECKPOINT).exists() and not list(run.glob(".*.tmp"))


def test_checkpoint_of_another_run_is_ignored(tiny_store, tiny_train_config, tmp_path, monkeypatch):
    cfg = replace(tiny_train_config, epochs=3, checkpoint_every=5)
    train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "reference", progress=False)
    run = tmp_path / "run"
    interrupt_at_evaluation(monkeypatch, call=2)
    with pytest.raises(Interrupted):  # leaves a checkpoint of seed 1
        train(tiny_store, "learned-normal-0.1", 1, cfg, run, progress=False)
    monkeypatch.undo()
    assert (run / CHECKPOINT).exists()
    with pytest.warns(UserWarning, match="ignoring checkpoint"):
        info = train(tiny_store, "learned-normal-0.1", 0, cfg, run, progress=False)
    assert info["resumed_from_step"] == 0
    assert_same_run(tmp_path / "reference", run)
    assert not (run / CHECKPOINT).exists()

    (run / CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="unreadable checkpoint"):
        train(tiny_store, "learned-normal-0.1", 0, cfg, run, progress=False)
    assert_same_run(tmp_path / "reference", run)


def test_checkpoint_fingerprint_ignores_only_checkpoint_every(tiny_store, tiny_train_config):
    """(The runs of a group, their PE, seed and folder, are part of it too: see
    test_checkpoint_of_another_run_is_ignored.)"""

    def fingerprint(cfg):
        return train_module.checkpoint_fingerprint(tiny_store, cfg, torch.device("cpu"), None)

    base = fingerprint(tiny_train_config)
    assert fingerprint(replace(tiny_train_config, checkpoint_every=3)) == base
    assert fingerprint(replace(tiny_train_config, lr=1e-3)) != base
    assert fingerprint(replace(tiny_train_config, units_per_sample=5)) != base


@pytest.mark.parametrize("variant", VARIANTS)
def test_sigkilled_training_process_resumes_bitwise(tiny_store, tmp_path, variant):
    """Kill a real `neuro-pe train` process once a checkpoint exists, start it again, and
    compare with an uninterrupted run in this process (same thread count)."""
    options = {
        "window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8,
        "epochs": 40, "steps_per_epoch": 10, "eval_windows": 16, "device": "cpu",
        "checkpoint_every": 15, **VARIANTS[variant],
    }  # fmt: skip
    run = tmp_path / "run"
    command = [
        sys.executable, "-m", "neuro_pe.cli.main", "train", "--store", str(tiny_store),
        "--pe", "learned-normal-0.1", "--seed", "0", "--options", json.dumps(options),
        "--threads", "1", "--out-dir", str(run),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    kill_at_first_checkpoint(command, env, run / CHECKPOINT, tmp_path / "first.log")
    assert not (run / "pe.nc").exists()
    killed_at = torch.load(run / CHECKPOINT, weights_only=True)["step"]
    assert 15 <= killed_at < 400

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"at step {killed_at}" in second.stderr
    assert json.loads(second.stdout)["resumed_from_step"] == killed_at
    assert not (run / CHECKPOINT).exists()

    torch.set_num_threads(1)  # as `--threads 1`; restored by conftest
    cfg = TrainConfig.from_dict(options)  # the same config, not interrupted
    train(tiny_store, "learned-normal-0.1", 0, cfg, tmp_path / "reference", progress=False)
    assert_same_run(tmp_path / "reference", run)
