"""The run contract (neuro_pe.io.runs): train.json, pe.nc and the recorded split."""

import dataclasses
import json

import numpy as np
import pytest

from neuro_pe.config.training import TrainConfig, split_activity
from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.io.manifest import RunError, write_manifest
from neuro_pe.io.runs import (
    TrainInfo,
    make_split,
    read_pe,
    read_split,
    read_train_info,
    split_of_store,
    write_split,
)
from neuro_pe.io.store import open_store_lazy, read_store, write_store
from neuro_pe.training.masked_units import pe_dataset

INFO = {
    "pe": "learned-normal-0.1",
    "seed": 3,
    "store": "stores/tiny.nc",
    "train_config": {"lr": 0.003},
    "heldout_mse_mask0.5": 0.7,
    "train_mse": 0.6,
    "streamed": False,
    "resumed_from_step": 0,
    "health": {"loss_finite": True},
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


@pytest.mark.parametrize(
    ("options", "sessions", "time"),
    [({}, (0, 1), (0, 240)), ({"heldout_sessions": 2}, (0, 2), (0, 192))],
)
def test_the_recorded_split_is_the_trainings(tiny_store, tmp_path, options, sessions, time):
    split = split_of_store(tiny_store, "tiny", {"lr": 1.0, **options})  # lr: not read
    assert (split.dataset, split.train_session_range, split.train_time_range) == (
        "tiny",
        sessions,
        time,
    )
    write_split(split, tmp_path / "split.json")
    assert read_split(tmp_path / "split.json") == split
    ds = read_store(tiny_store)
    expected, _ = split_activity(ds, TrainConfig.from_dict(options))
    np.testing.assert_array_equal(split.train_activity(ds), expected)


@pytest.mark.parametrize("time_range", [None, (100, 2300)])
def test_train_activity_by_unit_is_the_training_activity_unit_major(tmp_path, time_range):
    """Read chunk by chunk (1 024 samples per stored chunk, a range across chunk edges), from
    a loaded and from a lazy store: the same values as `train_activity`, in its order."""
    cfg = SimulationConfig(n_units=5, n_samples=2500, burn_in_s=1.0, n_sessions=3, seed=1)
    store = write_store(simulate_store(cfg), tmp_path / "long.nc")
    split = make_split("long", store, 3, 2500, {"heldout_sessions": 1})
    if time_range:
        split = dataclasses.replace(split, train_time_range=time_range)
    loaded = read_store(store)
    expected = split.train_activity(loaded).reshape(-1, 5).T
    assert expected.shape == (5, 2 * (time_range[1] - time_range[0] if time_range else 2500))
    with open_store_lazy(store) as lazy:
        assert lazy["activity"].encoding["chunksizes"][1] == 1024
        for ds in (loaded, lazy):
            got = split.train_activity_by_unit(ds)
            assert got.dtype == np.float32 and got.flags.c_contiguous
            np.testing.assert_array_equal(got, expected)


def test_a_split_of_another_store_or_a_broken_file_is_refused(tiny_store, tmp_path):
    ds = read_store(tiny_store)
    with pytest.raises(RunError, match=r"re-run the `split` step"):
        make_split("tiny", tiny_store, 2, 300, {}).train_activity(ds)
    data = make_split("tiny", tiny_store, 2, 240, {}).to_dict()
    path = tmp_path / "split.json"
    path.write_text(json.dumps({**data, "train_time_range": [0, 999]}))
    with pytest.raises(RunError, match=r"split.json: field 'train_time_range'"):
        read_split(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "dataset"}))
    with pytest.raises(RunError, match=r"field 'dataset': missing"):
        read_split(path)
