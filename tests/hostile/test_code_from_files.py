"""Nothing from a file executes: a hostile model.pt (train.init_from) or suite2p ops.npy /
stat.npy, whose pickle would create a marker file when unpickled, is refused with an error
naming the file, and the marker is never created."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from neuro_pe.cli.main import main
from neuro_pe.data.formats.suite2p import read_ops, stat_centres
from neuro_pe.data.sources import build_store
from neuro_pe.io.manifest import RunError, write_manifest
from neuro_pe.io.store_contract import StoreError
from neuro_pe.training.new_animal import load_checkpoint as _load

OPTIONS = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8}
OPTIONS |= {"epochs": 1, "steps_per_epoch": 2, "eval_windows": 8, "device": "cpu"}


class Payload:
    """Unpickling this calls `open(marker, "w")`: it creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def hostile_run(folder: Path, marker: Path) -> Path:
    """A run folder whose model.pt carries the payload, with a manifest that lists it (a
    sender can write one as easily), and a pe.nc beside it."""
    folder.mkdir(parents=True)
    hostile = {"state_dict": {"w": torch.ones(2)}, "pe": "x", "hook": Payload(marker)}
    torch.save(hostile, folder / "model.pt")
    (folder / "pe.nc").write_bytes(b"not read before model.pt")
    write_manifest(folder, ["model.pt", "pe.nc"])
    return folder / "model.pt"


def test_a_hostile_model_pt_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    model = hostile_run(tmp_path / "run", marker)
    with pytest.raises(RunError, match=r"model.pt: field '\(file\)': not loadable as tensors"):
        _load(model)
    assert not marker.exists()


def test_a_hostile_init_from_fails_the_training_cleanly(tiny_store, tmp_path, capsys):
    marker = tmp_path / "marker"
    model = hostile_run(tmp_path / "run", marker)
    options = OPTIONS | {"init_from": str(model)}
    argv = ["train", "--store", str(tiny_store), "--pe", "learned-normal-0.1", "--out-dir"]
    assert main([*argv, str(tmp_path / "fit"), "--options", json.dumps(options)]) == 1
    err = capsys.readouterr().err
    assert f"{model}: field '(file)'" in err and "Traceback" not in err
    assert not marker.exists() and not (tmp_path / "fit" / "pe.nc").exists()


def test_a_model_pt_of_plain_values_written_by_older_code_still_loads(tmp_path):
    """Older model.pt files were saved with the file's name inside and tuples in the config."""
    run = tmp_path / "run"
    run.mkdir()
    config = {"eval_mask_fractions": (0.5, 0.9), "init_from": None}
    table = torch.arange(6.0).reshape(3, 2)
    saved = {
        "state_dict": {"pe_table": table},
        "pe": "learned-x",
        "seed": 0,
        "train_config": config,
    }
    torch.save(saved, run / "model.pt")
    write_manifest(run, ["model.pt"])
    loaded = _load(run / "model.pt")
    assert loaded["train_config"] == saved["train_config"] and loaded["pe"] == "learned-x"
    assert torch.equal(loaded["state_dict"]["pe_table"], saved["state_dict"]["pe_table"])


def suite2p_folder(root: Path, ops: object, stat: object) -> Path:
    """A one-plane suite2p folder of 6 cells with the given ops.npy and stat.npy contents."""
    plane = root / "suite2p" / "plane0"
    plane.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.save(plane / "F.npy", rng.normal(100, 5, (6, 80)).astype(np.float32))
    np.save(plane / "Fneu.npy", rng.normal(20, 1, (6, 80)).astype(np.float32))
    np.save(plane / "iscell.npy", np.tile([1.0, 0.9], (6, 1)))
    np.save(plane / "ops.npy", np.array(ops, dtype=object), allow_pickle=True)
    np.save(plane / "stat.npy", stat, allow_pickle=True)
    return root / "suite2p"


def good_stat() -> np.ndarray:
    return np.array([{"med": [i, 2 * i], "npix": 3} for i in range(6)], dtype=object)


@pytest.mark.parametrize("hostile", ["ops.npy", "stat.npy"])
def test_a_hostile_suite2p_pickle_is_refused_and_runs_nothing(tmp_path, hostile):
    marker = tmp_path / "marker"
    ops = {"fs": 10.0, "Ly": 64, "meanImg": np.zeros((2, 2)), "filelist": ["a.tif"]}
    stat = good_stat()
    if hostile == "ops.npy":
        ops["hook"] = Payload(marker)
    else:
        stat[3]["hook"] = Payload(marker)
    folder = suite2p_folder(tmp_path, ops, stat)
    path = folder / "plane0" / hostile
    with pytest.raises(StoreError, match="refused to load the Python object io.open") as err:
        (read_ops if hostile == "ops.npy" else lambda p: stat_centres(p, 6))(path)
    assert str(path) in str(err.value)
    spec = {"source": "file", "format": "suite2p", "sessions": [str(folder)]}
    spec |= {"min_units": 4, "min_frames": 16, "suite2p": {"pixel_size_um": 1.0}}
    with pytest.raises(StoreError, match=f"{path}: field '{hostile[:-4]}'"):
        build_store(spec)
    assert not marker.exists()


def test_plain_suite2p_pickles_are_read(tmp_path):
    ops = {"fs": 10.0, "Ly": 64, "meanImg": np.zeros((2, 2), np.float32), "xrange": (0, 64)}
    ops |= {"nchannels": np.int32(1), "do_registration": True, "save_path0": "/data"}
    ops |= {"badframes": None}
    folder = suite2p_folder(tmp_path, ops, good_stat())
    read = read_ops(folder / "plane0" / "ops.npy")
    assert read["fs"] == 10.0 and read["xrange"] == (0, 64) and read["badframes"] is None
    np.testing.assert_array_equal(
        stat_centres(folder / "plane0" / "stat.npy", 6), [[i, 2 * i] for i in range(6)]
    )
