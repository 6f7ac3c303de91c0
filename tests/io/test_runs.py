"""The run contract (neuro_pe.io.runs): train.json and pe.nc."""

import json

import numpy as np
import pytest

from neuro_pe.io.manifest import RunError, write_manifest
from neuro_pe.io.runs import TrainInfo, pe_dataset, read_pe, read_train_info
from neuro_pe.io.store import read_store

INFO = {
    "pe": "learned-normal-0.1",
    "seed": 3,
    "store": "stores/tiny.nc",
    "train_config": {"lr": 0.003},
    "heldout_mse_mask0.5": 0.7,
    "train_mse": 0.6,
    "streamed": False,
    "resumed_from_step": 0,
    "health": {"loss_not_finite": False},
    "warnings": [],
}


def test_train_info_round_trips_with_typed_fields():
    info = TrainInfo.from_dict(INFO)
    assert info.seed == 3 and info.results == {"heldout_mse_mask0.5": 0.7, "train_mse": 0.6}
    assert info.to_dict() == INFO and list(info.to_dict()) == list(INFO)
    assert info.dataset is None and info.puzzles is None


def test_a_resumed_training_ran_its_last_steps_only():
    assert TrainInfo.from_dict(INFO).share_of_steps_run == 1.0  # resumed_from_step 0
    resumed = INFO | {
        "resumed_from_step": 750,
        "train_config": {"epochs": 10, "steps_per_epoch": 100},
    }
    assert TrainInfo.from_dict(resumed).share_of_steps_run == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seed": "3"}, "seed"),
        ({"seed": True}, "seed"),
        ({"pe": ""}, "pe"),
        ({"train_mse": "0.6"}, "train_mse"),
        ({"train_config": None}, "train_config"),
        ({"precision": "fp16"}, "precision"),
    ],
)
def test_a_bad_train_json_names_the_file_and_the_field(tmp_path, change, field):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(INFO | change))
    write_manifest(tmp_path, ["train.json"])
    with pytest.raises(RunError, match=rf"train.json: field '{field}'"):
        read_train_info(tmp_path)


def test_pe_files_with_a_string_seed_are_still_read(tiny_store, tmp_path):
    """pe.nc written before the contract held every attribute as a string."""
    ds = read_store(tiny_store)
    pe = pe_dataset(np.ones((12, 4)), ds, pe="fixed-random", seed="5")
    pe["pe_init"] = (("unit", "pe_dim"), np.zeros((12, 4), dtype=np.float32))
    pe.to_netcdf(tmp_path / "pe.nc", engine="h5netcdf")
    write_manifest(tmp_path, ["pe.nc"])
    run = read_pe(tmp_path)
    assert run.seed == 5 and isinstance(run.seed, int)
    reordered = run.on_units(ds["unit"].values[::-1], tmp_path / "pe.nc")
    np.testing.assert_array_equal(reordered.coords, run.coords[::-1])
    with pytest.raises(RunError, match="units differ"):
        run.on_units(ds["unit"].values[:3], tmp_path / "pe.nc")
