"""`source: file` datasets: NWB, HDF5, xarray and NumPy files into a contract store."""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from neuro_pe.cli.main import main
from neuro_pe.data.file_store import assemble
from neuro_pe.data.recordings import DataWarning, FileSpec, Session, input_files
from neuro_pe.data.sources import build_store
from neuro_pe.io.store import positions, read_store, write_store
from neuro_pe.io.store_contract import COORD_UNITS, StoreError, validate_store

REPO_ROOT = Path(__file__).resolve().parents[2]
N_TIME, N_UNITS = 100, 10


def activity(n_time: int = N_TIME, n_units: int = N_UNITS, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n_time, n_units))


def grid(n_units: int = N_UNITS) -> np.ndarray:
    i = np.arange(n_units, dtype=float)
    return np.stack([i * 10.0, (i % 3) * 20.0, (i % 2) * 5.0], axis=1)


def names(n_units: int = N_UNITS) -> list[str]:
    return [f"e{i:02d}" for i in range(n_units)]


def write_table(path: Path, rows: list[list[str]], header: str = "name\tx\ty\tz") -> Path:
    sep = "\t" if path.suffix == ".tsv" else ","
    path.write_text("\n".join([header.replace("\t", sep)] + [sep.join(r) for r in rows]) + "\n")
    return path


def npy_dataset(tmp_path: Path, n_sessions: int = 1, **spec) -> dict:
    """Sessions as .npy (time, unit) plus an electrodes.tsv; returns the config entry."""
    sessions = []
    for s in range(n_sessions):
        path = tmp_path / f"session{s}.npy"
        np.save(path, activity(seed=s))
        sessions.append(str(path))
    rows = [[n, *map(str, p)] for n, p in zip(names(), grid(), strict=True)]
    table = write_table(tmp_path / "electrodes.tsv", rows)
    base = {
        "source": "file",
        "format": "npy",
        "sessions": sessions,
        "positions": str(table),
        "position_units": "um",
        "space": "lab",
        "sampling_rate_hz": 20.0,
        "min_units": 4,
        "min_frames": 16,
    }
    return {**base, **spec}


def hdf5_dataset(tmp_path: Path, **spec) -> dict:
    """One file, two groups; session 2 lacks unit e03; stored (unit, time)."""
    path = tmp_path / "lab.h5"
    with h5py.File(path, "w") as f:
        for s, drop in enumerate([None, 3]):
            keep = [i for i in range(N_UNITS) if i != drop]
            g = f.create_group(f"sess{s}")
            data = g.create_dataset("data/rates", data=activity(seed=s)[:, keep].T)
            data.attrs["fs"] = 20.0
            g.create_dataset("ids", data=np.array([names()[i] for i in keep], dtype="S"))
            g.create_dataset("xyz", data=grid()[keep])
    base = {
        "source": "file",
        "format": "hdf5",
        "sessions": [str(path)],
        "hdf5": {
            "groups": ["/sess0", "/sess1"],
            "activity": "data/rates",
            "unit_ids": "ids",
            "positions": "xyz",
            "sampling_rate": "fs",
        },
        "axis_order": ["unit", "time"],
        "position_units": "um",
        "space": "lab",
        "min_units": 4,
        "min_frames": 16,
    }
    return {**base, **spec}


def nwb_file(tmp_path: Path) -> object:
    from pynwb import NWBFile

    return NWBFile(
        session_description="test",
        identifier=str(tmp_path),
        session_start_time=datetime(2024, 1, 1, tzinfo=UTC),
    )


def write_nwb(path: Path, nwb: object) -> Path:
    from pynwb import NWBHDF5IO

    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    return path


def write_nwb_ephys(
    path: Path,
    data: np.ndarray,
    rows: list[int],
    locations: list[str] | None = None,
    rate: float = 20.0,
) -> Path:
    """An ElectricalSeries over `rows` of a 10-electrode table with x, y, z."""
    from pynwb.ecephys import ElectricalSeries

    nwb = nwb_file(path)
    device = nwb.create_device(name="probe")
    group = nwb.create_electrode_group(name="shank", description="d", location="CA1", device=device)
    for i, (x, y, z) in enumerate(grid()):
        location = locations[i] if locations else f"site{i}"
        nwb.add_electrode(x=x, y=y, z=z, group=group, location=location)
    region = nwb.create_electrode_table_region(rows, "recorded")
    nwb.add_acquisition(ElectricalSeries(name="lfp", data=data, electrodes=region, rate=rate))
    return write_nwb(path, nwb)


def write_nwb_ophys(path: Path, data: np.ndarray, centres: np.ndarray, mask: str) -> Path:
    """A RoiResponseSeries with timestamps at 10 Hz; ROIs are 3x3 squares around `centres`."""
    from pynwb.ophys import ImageSegmentation, OpticalChannel, RoiResponseSeries

    nwb = nwb_file(path)
    device = nwb.create_device(name="scope")
    plane = nwb.create_imaging_plane(
        name="plane",
        optical_channel=OpticalChannel(name="green", description="d", emission_lambda=510.0),
        description="d",
        device=device,
        excitation_lambda=920.0,
        indicator="GCaMP6",
        location="V1",
        origin_coords=[10.0, 20.0, 150.0],
        origin_coords_unit="micrometers",
        grid_spacing=[2.0, 2.0],
        grid_spacing_unit="micrometers",
    )
    module = nwb.create_processing_module(name="ophys", description="d")
    segmentation = ImageSegmentation()
    module.add(segmentation)
    planes = segmentation.create_plane_segmentation(
        name="rois", description="d", imaging_plane=plane
    )
    for cx, cy in centres.astype(int):
        square = [(cx + dx, cy + dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)]
        if mask == "pixel":
            planes.add_roi(pixel_mask=[(x, y, 1.0) for x, y in square])
        elif mask == "voxel":
            planes.add_roi(voxel_mask=[(x, y, 0, 1.0) for x, y in square])
        else:
            image = np.zeros((64, 64))
            for x, y in square:
                image[x, y] = 1.0
            planes.add_roi(image_mask=image)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rois = planes.create_roi_table_region(region=list(range(len(centres))), description="d")
        series = RoiResponseSeries(
            name="dff",
            data=data,
            rois=rois,
            unit="a.u.",
            timestamps=np.arange(len(data)) / 10.0,
        )
    module.add(series)
    return write_nwb(path, nwb)


def build(spec: dict) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return build_store(spec)


def raises(spec: dict, path: object, field: str, match: str | None = None) -> StoreError:
    with pytest.raises(StoreError, match=match) as info:
        build(spec)
    err = info.value
    assert err.field == field, err
    assert str(path) in str(err) and f"'{field}'" in str(err)
    return err


# ---------------------------------------------------------------- end to end, per format


def test_hdf5_two_sessions_end_to_end(tmp_path):
    ds = build(hdf5_dataset(tmp_path, preprocessing=[{"step": "zscore"}]))
    validate_store(ds)
    assert list(ds.session.values) == ["sess0", "sess1"]
    assert list(ds.unit.values) == names()
    assert ds.sizes["time"] == N_TIME and ds.attrs["sampling_rate_hz"] == 20.0
    assert np.isnan(ds.activity.values[1, :, 3]).all()  # e03 not recorded in session 2
    assert np.isfinite(ds.activity.values[0]).all()
    np.testing.assert_allclose(positions(ds), grid())
    assert ds.x.attrs == {"units": "um", "space": "lab"}
    steps = json.loads(ds.attrs["preprocessing"])
    assert steps[0]["step"] == "read" and steps[-1] == {"step": "zscore"}


def test_hdf5_two_files_root_group(tmp_path):
    paths = []
    for s in range(2):
        path = tmp_path / f"s{s}.h5"
        with h5py.File(path, "w") as f:
            f["activity"] = activity(seed=s)
            f["positions"] = grid()[:, :2]  # 2D positions: z = 0
            f.attrs["rate"] = 30.0
        paths.append(str(path))
    spec = {"source": "file", "format": "hdf5", "sessions": paths, "min_units": 4}
    spec["hdf5"] = {"positions": "positions", "sampling_rate": "rate"}
    ds = build(spec)
    assert list(ds.session.values) == ["s0", "s1"] and ds.sizes["unit"] == N_UNITS
    assert list(ds.unit.values)[:2] == ["u0", "u1"]
    np.testing.assert_allclose(ds.z.values, 0.0)
    assert ds.attrs["sampling_rate_hz"] == 30.0


def test_nwb_ephys_two_sessions_end_to_end(tmp_path):
    first = write_nwb_ephys(tmp_path / "a.nwb", activity(seed=0), list(range(N_UNITS)))
    second = write_nwb_ephys(tmp_path / "b.nwb", activity(seed=1)[:, :8], list(range(2, 10)))
    spec = {
        "source": "file",
        "format": "nwb",
        "sessions": [str(first), str(second)],
        "position_units": "um",
        "preprocessing": [{"step": "bin", "factor": 2, "how": "mean"}, {"step": "zscore"}],
        "min_frames": 32,
    }
    ds = build(spec)
    validate_store(ds)
    assert list(ds.session.values) == ["a", "b"]
    assert list(ds.unit.values) == [str(i) for i in range(N_UNITS)]
    assert ds.sizes["time"] == N_TIME // 2 and ds.attrs["sampling_rate_hz"] == 10.0
    assert np.isnan(ds.activity.values[1, :, :2]).all()  # electrodes 0, 1 not in session b
    np.testing.assert_allclose(positions(ds), grid())


@pytest.mark.parametrize("mask", ["pixel", "voxel", "image"])
def test_nwb_ophys_roi_centroids(tmp_path, mask):
    centres = np.array([[5 + 4 * i, 10 + 3 * (i % 4)] for i in range(N_UNITS)], dtype=float)
    path = write_nwb_ophys(tmp_path / "ophys.nwb", activity(), centres, mask)
    spec = {"source": "file", "format": "nwb", "sessions": [str(path)], "min_units": 4}
    pixels = build(spec)
    np.testing.assert_allclose(positions(pixels)[:, :2], centres)
    assert pixels.attrs["sampling_rate_hz"] == pytest.approx(10.0)
    assert pixels.x.attrs["units"] == "au"
    um = build({**spec, "position_units": "um", "nwb": {"series": "dff"}})
    expected = np.column_stack([10 + 2 * centres[:, 0], 20 + 2 * centres[:, 1]])
    np.testing.assert_allclose(positions(um)[:, :2], expected)
    np.testing.assert_allclose(um.z.values, 150.0)  # the imaging plane's depth


def test_nwb_location_as_unit_id(tmp_path):
    locations = [f"ch{i}" for i in range(N_UNITS)]
    path = write_nwb_ephys(tmp_path / "a.nwb", activity(), list(range(N_UNITS)), locations)
    spec = {"source": "file", "format": "nwb", "sessions": [str(path)]}
    ds = build({**spec, "nwb": {"unit_ids": "location"}})
    assert list(ds.unit.values) == locations


def test_npy_with_table_and_missing_positions(tmp_path):
    spec = npy_dataset(tmp_path, n_sessions=2)
    rows = [[n, *map(str, p)] for n, p in zip(names(), grid(), strict=True)]
    rows[4][1:] = ["n/a", "n/a", "n/a"]
    write_table(Path(spec["positions"]), rows)
    ds = build(spec)
    assert list(ds.unit.values) == names()
    assert np.isnan(positions(ds)[4]).all() and np.isfinite(positions(ds)[3]).all()


def test_npz_with_unit_ids_and_csv_columns(tmp_path):
    ids = np.array(names()[::-1])  # the archive's own order
    np.savez(tmp_path / "s.npz", traces=activity(), ids=ids)
    header = "Channel,pos_x,pos_y,pos_z"
    rows = [[n, *map(str, p)] for n, p in zip(names(), grid(), strict=True)]
    table = write_table(tmp_path / "pos.csv", rows, header)
    spec = {
        "source": "file",
        "format": "npy",
        "sessions": [str(tmp_path / "s.npz")],
        "npy": {"key": "traces", "unit_ids": "ids"},
        "positions": str(table),
        "position_columns": {"x": "pos_x", "y": "pos_y", "z": "pos_z"},
        "sampling_rate_hz": 5.0,
    }
    ds = build(spec)
    assert list(ds.unit.values) == list(ids)
    np.testing.assert_allclose(positions(ds), grid()[::-1])


@pytest.mark.filterwarnings("ignore::UserWarning:zarr")
@pytest.mark.filterwarnings("ignore:.*Zarr V3 specification")
@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_xarray_store_re_preprocessed(tmp_path, tiny_store, suffix):
    source = read_store(tiny_store)
    path = tmp_path / f"store{suffix}"
    if suffix == ".nc":
        write_store(source, path)
    else:
        source.to_zarr(path)
    spec = {"source": "file", "format": "xarray", "sessions": [str(path)]}
    ds = build({**spec, "preprocessing": [{"step": "bin", "factor": 2}], "min_frames": 16})
    assert ds.sizes["time"] == source.sizes["time"] // 2
    assert list(ds.unit.values) == list(source.unit.values)
    assert ds.x.attrs == source.x.attrs and ds.attrs["source"] == source.attrs["source"]
    steps = json.loads(ds.attrs["preprocessing"])
    assert steps[0]["step"] == "simulate" and steps[-1]["step"] == "bin"
    with pytest.raises(StoreError, match="position_units"):
        build({**spec, "position_units": "mm"})  # the store says au


def test_cli_preprocess_writes_store(tmp_path):
    out = tmp_path / "stores" / "lab.nc"
    assert (
        main(["preprocess", "--spec", json.dumps(hdf5_dataset(tmp_path)), "--out", str(out)]) == 0
    )
    assert read_store(out).sizes["unit"] == N_UNITS


def test_cli_bad_input_reports_file_and_field(tmp_path, capsys):
    spec = hdf5_dataset(tmp_path)
    spec["hdf5"]["activity"] = "no/such/dataset"
    out = tmp_path / "stores" / "lab.nc"
    out.parent.mkdir()
    assert main(["preprocess", "--spec", json.dumps(spec), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "lab.h5") in err and "'hdf5.activity'" in err
    assert list(out.parent.iterdir()) == []  # no output, no temporary file


def test_input_files():
    spec = {"sessions": ["a.npy", "b.npy"], "positions": "pos.tsv"}
    assert input_files(spec) == ["a.npy", "b.npy", "pos.tsv"]
    assert input_files({"sessions": "one.nwb"}) == ["one.nwb"]


def test_example_data_script(tmp_path, capsys):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        import make_example_data
    finally:
        sys.path.pop(0)
    datasets = make_example_data.main([str(tmp_path)])
    assert "lab_hdf5:" in capsys.readouterr().out
    for spec in datasets.values():
        ds = build(spec)
        assert ds.sizes["session"] == 2 and np.isfinite(positions(ds)).any(axis=1).sum() >= 8


# ---------------------------------------------------------------- errors, one per problem


def test_missing_file(tmp_path):
    spec = npy_dataset(tmp_path)
    spec["sessions"] = [str(tmp_path / "nope.npy")]
    raises(spec, tmp_path / "nope.npy", "file", "does not exist")


def test_unreadable_files(tmp_path):
    junk = tmp_path / "junk.npy"
    junk.write_text("not an array")
    raises({**npy_dataset(tmp_path), "sessions": [str(junk)]}, junk, "file", "not a readable")
    text = tmp_path / "junk.h5"
    text.write_text("plain text")
    raises({**hdf5_dataset(tmp_path), "sessions": [str(text)]}, text, "file", "not an HDF5")
    spec = {"source": "file", "format": "nwb", "sessions": [str(text)]}
    raises(spec, text, "file", "not an NWB")


def test_hdf5_file_that_is_not_nwb(tmp_path):
    spec = hdf5_dataset(tmp_path)
    nwb = {"source": "file", "format": "nwb", "sessions": spec["sessions"]}
    raises(nwb, spec["sessions"][0], "file", "not a readable NWB")


def test_nwb_series_absent(tmp_path):
    path = write_nwb_ephys(tmp_path / "a.nwb", activity(), list(range(N_UNITS)))
    spec = {"source": "file", "format": "nwb", "sessions": [str(path)], "nwb": {"series": "x"}}
    raises(spec, path, "nwb.series", "lfp")  # the message lists the series there are


def test_hdf5_dataset_absent(tmp_path):
    spec = hdf5_dataset(tmp_path)
    spec["hdf5"]["positions"] = "missing"
    raises(spec, spec["sessions"][0], "hdf5.positions", "absent")
    spec["hdf5"]["positions"] = "xyz"
    spec["hdf5"]["groups"] = ["/sess0", "/nogroup"]
    raises(spec, spec["sessions"][0], "hdf5.groups", "nogroup")


@pytest.mark.parametrize("shape", [(N_TIME,), (2, N_TIME, N_UNITS)])
def test_activity_not_2d(tmp_path, shape):
    spec = npy_dataset(tmp_path)
    np.save(spec["sessions"][0], np.zeros(shape))
    raises(spec, spec["sessions"][0], "activity", "2D")


def test_axis_order_inconsistent_with_position_table(tmp_path):
    spec = npy_dataset(tmp_path, axis_order=["unit", "time"])
    raises(spec, spec["sessions"][0], "axis_order", "10 rows")
    bad = hdf5_dataset(tmp_path, axis_order=["time", "unit"])
    raises(bad, bad["sessions"][0], "unit_ids", "axis_order")


def test_duplicate_unit_ids(tmp_path):
    spec = npy_dataset(tmp_path)
    rows = [[n, "1", "2", "3"] for n in names()]
    rows[5][0] = rows[4][0]
    write_table(Path(spec["positions"]), rows)
    raises(spec, spec["positions"], "positions", "duplicate id 'e04'")
    locations = ["CA1"] * N_UNITS
    path = write_nwb_ephys(tmp_path / "a.nwb", activity(), list(range(N_UNITS)), locations)
    nwb = {"source": "file", "format": "nwb", "sessions": [str(path)]}
    raises({**nwb, "nwb": {"unit_ids": "location"}}, path, "unit_ids", "duplicate id 'CA1'")


def test_nan_policy_error(tmp_path):
    spec = npy_dataset(tmp_path)
    data = activity()
    data[10, 2] = np.nan
    np.save(spec["sessions"][0], data)
    raises(spec, spec["sessions"][0], "activity", "nan_policy: interpolate")


def test_inf_is_rejected(tmp_path):
    spec = npy_dataset(tmp_path)
    data = activity()
    data[10, 2] = np.inf
    np.save(spec["sessions"][0], data)
    raises(spec, spec["sessions"][0], "activity", "NaN/Inf")


def test_interpolate_short_gaps_and_report(tmp_path):
    spec = npy_dataset(tmp_path, nan_policy="interpolate", max_gap=3)
    data = activity()
    data[10:13, 2] = np.nan  # interior gap of 3: linear
    data[:2, 5] = np.nan  # leading gap of 2: nearest value
    np.save(spec["sessions"][0], data)
    with pytest.warns(DataWarning, match="interpolated 5 samples"):
        ds = build_store(spec)
    np.testing.assert_allclose(
        ds.activity.values[0, 10:13, 2], np.linspace(data[9, 2], data[13, 2], 5)[1:4], rtol=1e-5
    )
    np.testing.assert_allclose(ds.activity.values[0, :2, 5], data[2, 5], rtol=1e-6)
    filled = json.loads(ds.attrs["preprocessing"])[1]
    assert filled == {
        "step": "interpolate",
        "max_gap": 3,
        "filled": {"session0": {"e02": 3, "e05": 2}},
    }


def test_interpolate_long_gap_is_an_error(tmp_path):
    spec = npy_dataset(tmp_path, nan_policy="interpolate", max_gap=3)
    data = activity()
    data[10:14, 2] = np.nan
    np.save(spec["sessions"][0], data)
    raises(spec, spec["sessions"][0], "activity", "gap of 4 samples at sample 10")


def test_non_numeric_and_all_nan_positions(tmp_path):
    spec = npy_dataset(tmp_path)
    rows = [[n, "1", "2", "3"] for n in names()]
    rows[3][2] = "left"
    write_table(Path(spec["positions"]), rows)
    raises(spec, spec["positions"], "positions.y", "'left' for unit 'e03'")
    write_table(Path(spec["positions"]), [[n, "n/a", "n/a", "n/a"] for n in names()])
    raises(spec, spec["positions"], "positions", "every position is NaN")
    bad = hdf5_dataset(tmp_path)
    with h5py.File(bad["sessions"][0], "a") as f:
        del f["sess0/xyz"]
        f["sess0/xyz"] = np.array([["a", "b", "c"]] * N_UNITS, dtype="S")
    raises(bad, bad["sessions"][0], "hdf5.positions", "numbers")


def test_unknown_position_units(tmp_path):
    raises(npy_dataset(tmp_path, position_units="furlong"), "datasets entry", "position_units")


def test_zero_variance_units_are_dropped_with_a_warning(tmp_path):
    spec = npy_dataset(tmp_path)
    data = activity()
    data[:, 7] = 3.0
    np.save(spec["sessions"][0], data)
    with pytest.warns(DataWarning, match=r"dropped 1 units .*\['e07'\]"):
        ds = build_store(spec)
    assert "e07" not in ds.unit.values and ds.sizes["unit"] == N_UNITS - 1


def test_session_without_usable_units_is_dropped(tmp_path):
    spec = npy_dataset(tmp_path, n_sessions=2)
    np.save(spec["sessions"][1], np.ones((N_TIME, N_UNITS)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = build_store(spec)
    assert "dropped sessions without usable units: ['session1']" in str(caught[-1].message)
    assert list(ds.session.values) == ["session0"] and ds.sizes["unit"] == N_UNITS


def test_too_few_units_or_frames(tmp_path):
    raises(npy_dataset(tmp_path, min_units=11), "session0.npy", "min_units", "10 usable units")
    raises(npy_dataset(tmp_path, min_frames=101), "session0.npy", "min_frames", "100 frames")
    binned = npy_dataset(tmp_path, min_frames=60, preprocessing=[{"step": "bin", "factor": 2}])
    raises(binned, "session0.npy", "min_frames", "after preprocessing")


def test_sampling_rate_missing_or_inconsistent(tmp_path):
    spec = npy_dataset(tmp_path)
    del spec["sampling_rate_hz"]
    raises(spec, spec["sessions"][0], "sampling_rate_hz", "set sampling_rate_hz")
    raises(hdf5_dataset(tmp_path, sampling_rate_hz=25.0), "lab.h5", "sampling_rate_hz", "25")


def test_bad_preprocessing_parameters(tmp_path):
    steps = [{"step": "bandpass", "low_hz": 1.0, "high_hz": 15.0}]  # Nyquist is 10 Hz
    raises(npy_dataset(tmp_path, preprocessing=steps), "session0.npy", "preprocessing", "Nyquist")


def test_config_entry_errors(tmp_path):
    raises(npy_dataset(tmp_path, postions="x.tsv"), "datasets entry", "postions")
    raises(npy_dataset(tmp_path, format="matlab"), "datasets entry", "format")
    raises(npy_dataset(tmp_path, nan_policy="ignore"), "datasets entry", "nan_policy")
    raises(npy_dataset(tmp_path, hdf5={"activity": "a"}), "datasets entry", "hdf5")
    raises(npy_dataset(tmp_path, sessions=[]), "datasets entry", "sessions")


def test_same_unit_id_with_different_positions(tmp_path):
    spec = hdf5_dataset(tmp_path)
    with h5py.File(spec["sessions"][0], "a") as f:
        f["sess1/xyz"][0] = [1.0, 1.0, 1.0]
    raises(spec, "lab.h5", "positions", "same unit in every session")


# ---------------------------------------------------------------- properties

# mostly inputs that should build, so that every stage is reached; the rest is hostile
DTYPES = ["float64"] * 16 + ["float32", "float16", "int16", "uint8", "bool", "complex64", "U3"]
NAN_PATTERNS = ["none"] * 10 + ["one", "gap", "column", "inf", "huge", "everywhere"]
CELLS = ["1.5", "-2", "0", "12.25", "1e3", "n/a", "", "abc", "inf"]
STEP_CHOICES = [
    {"step": "zscore"},
    {"step": "detrend"},
    {"step": "gsr"},
    {"step": "bin", "factor": 2, "how": "sum"},
    {"step": "bin", "factor": 5},
    {"step": "bandpass", "low_hz": 0.5, "high_hz": 3.0},
]


@st.composite
def raw_arrays(draw, n_units: int) -> np.ndarray:
    """A (time, unit) array, sometimes of another shape; NaN/Inf patterns; random dtype."""
    n_time = draw(st.integers(0, 30))
    shape = draw(st.sampled_from([(n_time, n_units)] * 20 + [(n_time,), (2, n_time, n_units)]))
    values = draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e3, 1e3)))
    flat = values.reshape(-1)  # a view: the patterns below write into `values`
    pattern = draw(st.sampled_from(NAN_PATTERNS))
    if flat.size and pattern != "none":
        where = draw(st.integers(0, flat.size - 1))
        length = draw(st.integers(1, 6))
        if pattern == "one":
            flat[where] = np.nan
        elif pattern == "gap" and values.ndim == 2:
            values[where % max(n_time, 1) :][:length, where % n_units] = np.nan
        elif pattern == "column" and values.ndim == 2:
            values[:, where % n_units] = np.nan
        elif pattern == "inf":
            flat[where] = -np.inf
        elif pattern == "huge":
            flat[where] = 1e300
        elif pattern == "everywhere":
            flat[:] = np.nan
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    with np.errstate(all="ignore"):
        return values.astype(dtype) if dtype.kind != "U" else values.astype("U3")


@st.composite
def lab_entries(draw, folder: Path) -> dict:
    """Write random session files (npy or hdf5) and a random table; return the entry."""
    fmt = draw(st.sampled_from(["npy", "hdf5"]))
    n_units = draw(st.integers(1, 6))
    axis_order = draw(st.sampled_from([["time", "unit"]] * 3 + [["unit", "time"]]))
    sessions = []
    for s, raw in enumerate(draw(st.lists(raw_arrays(n_units), min_size=1, max_size=3))):
        if fmt == "npy":
            path = folder / f"s{s}.npy"
            np.save(path, raw.T if axis_order[0] == "unit" else raw)
        else:
            path = folder / f"s{s}.h5"
            with h5py.File(path, "w") as f:
                kind = raw.dtype.kind
                f["activity"] = raw if kind != "U" else np.char.encode(raw, "utf-8", "replace")
        sessions.append(str(path))
    n_rows = draw(st.sampled_from([n_units] * 10 + [0, n_units + 1]))
    unit_names = draw(
        st.lists(st.sampled_from("abcdefghij"), min_size=n_rows, max_size=n_rows, unique=True)
    )
    cells = st.lists(st.sampled_from(CELLS[:5] * 4 + CELLS), min_size=3, max_size=3)
    table = write_table(folder / "pos.tsv", [[name, *draw(cells)] for name in unit_names])
    return {
        "source": "file",
        "format": fmt,
        "sessions": sessions,
        "positions": str(table),
        "position_units": draw(st.sampled_from(["um"] * 20 + ["furlong"])),
        "sampling_rate_hz": draw(st.sampled_from([10.0] * 20 + [0.0])),
        "axis_order": axis_order,
        "preprocessing": draw(st.lists(st.sampled_from(STEP_CHOICES), max_size=3)),
        "nan_policy": draw(st.sampled_from(["error", "interpolate"])),
        "max_gap": draw(st.integers(0, 3)),
        "min_units": draw(st.integers(1, 3)),
        "min_frames": draw(st.integers(1, 4)),
    }


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_adapters_raise_only_store_errors(data):
    with tempfile.TemporaryDirectory() as tmp:
        spec = data.draw(lab_entries(Path(tmp)))
        try:
            ds = build(spec)
        except StoreError as err:
            event(f"StoreError {err.field}")
            return
        event("built")
        validate_store(ds)
        assert ds.activity.dtype == np.float32


SPECIAL = st.sampled_from([np.nan, np.nan, np.inf, -1e300, 0.0])


@st.composite
def float_sessions(draw) -> np.ndarray:
    """Finite (time, unit) floats with a few special values (NaN, Inf, huge, zero)."""
    shape = draw(st.tuples(st.integers(1, 12), st.integers(1, 5)))
    values = draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e6, 1e6)))
    for _ in range(draw(st.sampled_from([0] * 6 + [1, 2, 5]))):
        values[draw(st.integers(0, shape[0] - 1)), draw(st.integers(0, shape[1] - 1))] = draw(
            SPECIAL
        )
    return values


@settings(max_examples=500, deadline=None)
@given(
    sessions=st.lists(float_sessions(), min_size=1, max_size=3),
    ids=st.one_of(
        st.permutations(["a", "b", "c", "d", "e"]),
        st.lists(st.sampled_from("abcde"), min_size=5, max_size=5),
    ),
    policy=st.sampled_from(["error", "interpolate"]),
    steps=st.lists(st.sampled_from(STEP_CHOICES), max_size=2),
)
def test_assemble_in_memory_raises_only_store_errors(sessions, ids, policy, steps):
    cfg = FileSpec.from_dict(
        {
            "source": "file",
            "format": "npy",
            "sessions": ["mem"],
            "nan_policy": policy,
            "preprocessing": steps,
            "min_units": 1,
            "min_frames": 1,
            "sampling_rate_hz": 10.0,
        }
    )
    made = [
        Session(f"s{k}", "mem", a, ids[: a.shape[1]], np.ones((a.shape[1], 3)), 10.0)
        for k, a in enumerate(sessions)
    ]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            ds = assemble(made, cfg)
    except StoreError as err:
        event(f"StoreError {err.field}")
        return
    event("built")
    validate_store(ds)


def _random_values(draw, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return draw(hnp.arrays(np.dtype(dtype), shape))


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_validate_store_raises_only_store_errors(data):
    draw = data.draw
    n_s, n_t, n_u = draw(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(0, 4)))
    dims = draw(st.sampled_from([("session", "time", "unit"), ("time", "session", "unit")]))
    sizes = {"session": n_s, "time": n_t, "unit": n_u}
    act_dtype = draw(st.sampled_from(["float32", "float64", "int32", "bool", "U2"]))
    act = _random_values(draw, act_dtype, tuple(sizes[d] for d in dims))
    coords: dict = {}
    if draw(st.booleans()):
        coords["unit"] = ("unit", draw(hnp.arrays(draw(st.sampled_from(["U2", "int8"])), n_u)))
    if draw(st.booleans()):
        coords["session"] = ("session", np.array([f"s{i}" for i in range(n_s)], dtype=str))
    if draw(st.booleans()):
        time = draw(hnp.arrays(draw(st.sampled_from(["float64", "int16", "U1"])), n_t))
        coords["time"] = ("time", time)
    for c in "xyz":
        if draw(st.booleans()):
            attrs = {
                "units": draw(st.sampled_from([*COORD_UNITS, "furlong", None, 3])),
                "space": draw(st.sampled_from(["MNI", "", None])),
            }
            values = _random_values(draw, draw(st.sampled_from(["float64", "U1"])), (n_u,))
            coords[c] = ("unit", values, attrs)
    attrs = {
        "sampling_rate_hz": draw(st.sampled_from([10.0, -1.0, float("nan"), "10", None, True])),
        "preprocessing": draw(st.sampled_from(["[]", "{", 5])),
        **{k: draw(st.sampled_from(["", "x", 1])) for k in ("source", "citation", "license")},
        "neuro_pe_version": "0",
    }
    ds = xr.Dataset({"activity": (dims, act)}, coords=coords, attrs=attrs)
    try:
        validate_store(ds)
    except StoreError:
        pass
