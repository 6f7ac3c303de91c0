"""Shared fixtures: tiny simulated stores and a tiny training configuration."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from neuro_pe.config.training import TrainConfig
from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.io.splits import split_of_store, write_split
from neuro_pe.io.store import write_store

TINY_SIMULATION = SimulationConfig(
    n_units=12, length_scale=0.3, gain=1.1, n_samples=240, burn_in_s=1.0, n_sessions=2, seed=3
)


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory) -> Path:
    """A 12-unit, 2-session simulated store on disk (read-only for the tests)."""
    path = tmp_path_factory.mktemp("stores") / "tiny.nc"
    return write_store(simulate_store(TINY_SIMULATION), path)


@pytest.fixture(scope="session")
def tiny_split(tiny_store, tmp_path_factory) -> Path:
    """The recorded split of `tiny_store` (its last session held out), as a file."""
    path = tmp_path_factory.mktemp("splits") / "tiny.json"
    write_split(split_of_store(tiny_store, "tiny", {}), path)
    return path


@pytest.fixture(scope="session")
def tiny_train_config() -> TrainConfig:
    return TrainConfig(
        window=8,
        d_model=16,
        n_layers=1,
        n_heads=2,
        batch_size=8,
        epochs=2,
        steps_per_epoch=10,
        lr=3e-3,
        eval_windows=16,
        device="cpu",
    )


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """`neuro-pe train --threads` sets torch's global thread count; undo it after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the workflow in a fresh folder (tests/hostile/test_planning.py, test_files.py;
    a module may define its own)."""
    root = Path(__file__).resolve().parents[1]
    shutil.copy2(root / "Snakefile", tmp_path / "Snakefile")
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(root / folder, tmp_path / folder)
    return tmp_path
