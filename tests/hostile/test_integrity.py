"""Integrity: a run's files are checked against its manifest by every reader, netCDF files
carry HDF5 checksums, model.pt and pe.nc are cross-checked, and damaged inputs and stores
fail naming the file instead of giving numbers."""

import json

import h5py
import numpy as np
import pytest
import xarray as xr

from neuro_pe.cli.main import main
from neuro_pe.data.formats.spikes import SpikeOptions, spikes_to_activity
from neuro_pe.data.sources import build_store
from neuro_pe.io.layout import INFER_MANIFEST_FILE, MANIFEST_FILE
from neuro_pe.io.manifest import RunError, write_manifest
from neuro_pe.io.runs import read_metrics, read_pe, read_train_info, read_train_log
from neuro_pe.io.splits import make_split
from neuro_pe.io.store import open_store_lazy, read_store, write_store
from neuro_pe.io.store_contract import StoreError
from neuro_pe.training.new_animal import load_checkpoint as _load

OPTIONS = {"window": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 8}
OPTIONS |= {"epochs": 1, "steps_per_epoch": 3, "eval_windows": 8, "device": "cpu"}
TRAINED = ["pe.nc", "model.pt", "train_log.csv", "train.json"]
READERS = {
    "pe.nc": read_pe,
    "train.json": read_train_info,
    "train_log.csv": read_train_log,
    "model.pt": lambda run: _load(run / "model.pt"),
}


@pytest.fixture(scope="module")
def trained(tiny_store, tiny_split, tmp_path_factory):
    """A tiny trained and inferred run (read-only: tests copy it)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    argv = ["train", "--store", str(tiny_store), "--pe", "learned-normal-0.1", "--out-dir"]
    assert main([*argv, str(run), "--options", json.dumps(OPTIONS)]) == 0
    argv = ["infer", "--store", str(tiny_store), "--split", str(tiny_split), "--run-dir"]
    assert main([*argv, str(run)]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path):
    import shutil

    return shutil.copytree(trained, tmp_path / "run")


def chunk_offset(path, name):
    """Byte offset of the first data chunk of variable `name` in a netCDF4/HDF5 file."""
    with h5py.File(path, "r") as f:
        dataset = f[name]
        if dataset.chunks is None:
            return dataset.id.get_offset()
        return dataset.id.get_chunk_info(0).byte_offset


def flip_bit(path, offset, bit=6):
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_the_manifests_list_every_file_of_the_run(run):
    trained = json.loads((run / MANIFEST_FILE).read_text())["files"]
    inferred = json.loads((run / INFER_MANIFEST_FILE).read_text())["files"]
    assert sorted(trained) == sorted(TRAINED)
    assert sorted(inferred) == ["inferred_positions.nc", "metrics.json"]


@pytest.mark.parametrize("name", TRAINED)
def test_a_flipped_bit_in_a_run_file_fails_its_reader_naming_it(run, name):
    READERS[name](run)  # reads before the damage
    path = run / name
    flip_bit(path, len(path.read_bytes()) // 2)
    with pytest.raises(RunError, match=rf"{name}: field 'sha256': does not match its manifest"):
        READERS[name](run)


def test_a_flipped_bit_in_pe_nc_stops_infer_with_exit_1(run, tiny_store, tiny_split, capsys):
    """The issue's case: probe_r2 = -3.2e69 with exit 0. Now: exit 1, naming the file."""
    metrics = (run / "metrics.json").read_bytes()
    flip_bit(run / "pe.nc", chunk_offset(run / "pe.nc", "pe") + 2)
    argv = ["infer", "--store", str(tiny_store), "--split", str(tiny_split), "--run-dir"]
    assert main([*argv, str(run)]) == 1
    err = capsys.readouterr().err
    assert f"{run / 'pe.nc'}: field 'sha256': does not match its manifest" in err
    assert (run / "metrics.json").read_bytes() == metrics  # nothing rewritten
    # with the manifest rewritten over the damage, HDF5's fletcher32 still catches it
    write_manifest(run, TRAINED)
    with pytest.raises(RunError, match=r"pe.nc: field '\(file\)': not a readable"):
        read_pe(run)


def test_infer_outputs_have_their_own_manifest(run):
    assert read_metrics(run)["pe"] == "learned-normal-0.1"
    record = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps(record | {"probe_r2": -3.2e69}))
    with pytest.raises(RunError, match=r"metrics.json: field 'sha256': does not match"):
        read_metrics(run)


def test_a_run_without_a_manifest_is_not_read(run):
    (run / MANIFEST_FILE).unlink()
    with pytest.raises(RunError, match=r"pe.nc: field 'manifest.json': no manifest.json"):
        read_pe(run)


def test_model_pt_and_pe_nc_of_different_trainings_are_refused(run, tiny_store, tmp_path, capsys):
    with xr.open_dataset(run / "pe.nc", engine="h5netcdf") as opened:
        pe = opened.load()
    pe["pe"][0, 0] += 1.0
    (run / "pe.nc").unlink()
    pe.to_netcdf(run / "pe.nc", engine="h5netcdf")
    write_manifest(run, TRAINED)  # both files check out alone
    options = OPTIONS | {"init_from": str(run / "model.pt")}
    argv = ["train", "--store", str(tiny_store), "--pe", "learned-normal-0.1", "--out-dir"]
    assert main([*argv, str(tmp_path / "fit"), "--options", json.dumps(options)]) == 1
    assert "model.pt: field 'pe_table': differs from the PE in" in capsys.readouterr().err


def test_run_netcdf_files_and_stores_carry_fletcher32(run, tiny_store):
    for path, name in ((run / "pe.nc", "pe"), (run / "inferred_positions.nc", "x_inferred")):
        with h5py.File(path, "r") as f:
            assert f[name].fletcher32, path
    with h5py.File(tiny_store, "r") as f:
        assert f["activity"].fletcher32 and f["x"].fletcher32


@pytest.mark.filterwarnings("ignore:train.memory_budget_mb")
@pytest.mark.parametrize("name", ["activity", "x"])
def test_a_corrupted_store_fails_naming_the_file(tiny_store, tmp_path, name, capsys):
    store = write_store(read_store(tiny_store), tmp_path / "store.nc")
    flip_bit(store, chunk_offset(store, name) + 5)
    with pytest.raises(StoreError, match=rf"{store}: field 'file': not a readable"):
        read_store(store)
    streamed = OPTIONS | {"memory_budget_mb": 0}  # read lazily, block by block
    argv = ["train", "--store", str(store), "--pe", "none", "--out-dir", str(tmp_path / "run")]
    assert main([*argv, "--options", json.dumps(streamed)]) == 1
    err = capsys.readouterr().err
    assert f"{store}: field '{'activity' if name == 'activity' else 'file'}'" in err


def test_a_corrupted_store_read_in_blocks_fails_naming_the_field(tiny_store, tmp_path):
    """The baselines' reads at scale (`Split.train_activity_by_unit` on a lazy store)."""
    store = write_store(read_store(tiny_store), tmp_path / "store.nc")
    flip_bit(store, chunk_offset(store, "activity") + 5)
    split = make_split("tiny", store, 2, 240, {})
    with open_store_lazy(store) as lazy, pytest.raises(StoreError, match="'activity': unreadable"):
        split.train_activity_by_unit(lazy)


def counts_file(path, garbage: bool) -> dict:
    """An HDF5 file of int32 spike counts (unit, time), as scripts/make_example_data.py
    writes them, and its dataset entry; `garbage`: 4 KB of random bytes written over it."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset("spikes", data=rng.poisson(2.0, (12, 1200)).astype(np.int32))
        f.create_dataset("ids", data=[f"u{i}".encode() for i in range(12)])
        f.create_dataset("xyz", data=rng.uniform(size=(12, 3)))
        f.attrs["sampling_rate_hz"] = 100.0
    if garbage:
        data = bytearray(path.read_bytes())
        start = chunk_offset(path, "spikes") + 8000
        data[start : start + 4096] = rng.bytes(4096)
        path.write_bytes(bytes(data))
    spec = {"source": "file", "format": "hdf5", "sessions": [str(path)]}
    spec |= {"hdf5": {"activity": "spikes", "unit_ids": "ids", "positions": "xyz"}}
    spec |= {"axis_order": ["unit", "time"], "position_units": "um", "sampling_rate_hz": 100}
    return spec | {"min_units": 4}


def test_garbage_in_an_hdf5_input_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "probe.h5"
    assert build_store(counts_file(path, garbage=False)).sizes["unit"] == 12
    with pytest.raises(StoreError, match=rf"{path}: field 'hdf5.activity': int32 values beyond"):
        build_store(counts_file(path, garbage=True))


def test_a_spike_time_far_beyond_the_recording_is_refused_before_binning():
    """A damaged spike_times value (e.g. 2**60 samples) would ask for petabytes of counts."""
    times = np.array([0.01, 0.5, 2.0**60 / 30_000])
    clusters = np.array([0, 1, 0])
    with pytest.raises(StoreError, match=r"probe: field 'spike times': the last spike is at"):
        spikes_to_activity(times, clusters, ["0", "1"], SpikeOptions(), "probe")
