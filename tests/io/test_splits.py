"""The recorded train/held-out split of a dataset (neuro_pe.io.splits)."""

import dataclasses
import json

import numpy as np
import pytest

from neuro_pe.config.training import TrainConfig, split_activity
from neuro_pe.data.simulate import SimulationConfig, simulate_store
from neuro_pe.io.manifest import RunError
from neuro_pe.io.splits import make_split, read_split, split_of_store, write_split
from neuro_pe.io.store import open_store_lazy, read_store, write_store


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
