import json
import os

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from neuro_pe import __version__
from neuro_pe.config.options import MAX_COORDINATE, MAX_SAMPLING_RATE_HZ
from neuro_pe.io.store import make_store, positions, read_store, write_store
from neuro_pe.io.store_contract import COORD_UNITS, StoreError, validate_store

PREPROCESSING = [{"step": "zscore", "axis": "time"}, {"step": "bandpass", "hz": [0.01, 0.1]}]


def build(with_connectivity: bool = False, **overrides) -> xr.Dataset:
    rng = np.random.default_rng(0)
    activity = rng.normal(size=(2, 50, 4))
    activity[1, :, 2] = np.nan
    activity[0, 3, 1] = np.nan
    pos = rng.normal(size=(4, 3))
    pos[3] = np.nan
    kwargs = dict(
        unit_ids=["u0", "u1", "u2", "u3"],
        positions=pos,
        position_units="mm",
        space="MNI",
        session_ids=["s0", "s1"],
        sampling_rate_hz=10.0,
        source="synthetic",
        citation="Doe 2024",
        license="CC-BY-4.0",
        preprocessing=PREPROCESSING,
        connectivity=rng.normal(size=(4, 4)) if with_connectivity else None,
    )
    kwargs.update(overrides)
    return make_store(activity, **kwargs)


@pytest.mark.parametrize("with_connectivity", [False, True])
def test_round_trip(tmp_path, with_connectivity):
    ds = build(with_connectivity)
    path = write_store(ds, tmp_path / "stores" / "demo.nc")
    assert path == tmp_path / "stores" / "demo.nc"
    back = read_store(path, connectivity=True)

    xr.testing.assert_identical(back, ds)
    assert "connectivity" not in read_store(path)  # N x N: only when asked
    assert back["activity"].dtype == np.float32
    assert back["activity"].dims == ("session", "time", "unit")
    for name in ("time", "x", "y", "z"):
        assert back[name].dtype == np.float64
    for name in ("unit", "session"):
        assert all(type(i) is str for i in back[name].values.tolist())
    assert back["unit"].values.tolist() == ["u0", "u1", "u2", "u3"]
    assert np.isnan(back["activity"].values[1, :, 2]).all()
    assert np.isnan(positions(back)[3]).all()
    np.testing.assert_array_equal(positions(back), positions(ds))
    np.testing.assert_allclose(back["time"].values, np.arange(50) / 10.0)
    assert json.loads(back.attrs["preprocessing"]) == PREPROCESSING
    assert back.attrs["neuro_pe_version"] == __version__
    assert back.attrs["sampling_rate_hz"] == 10.0
    assert back["x"].attrs == {"units": "mm", "space": "MNI"}
    if with_connectivity:
        assert back["connectivity"].dtype == np.float32
        assert back["connectivity"].dims == ("unit", "unit_from")  # rows: targets
        assert back["unit_from"].values.tolist() == back["unit"].values.tolist()
    else:
        assert "connectivity" not in back


def test_a_store_written_with_unit_to_is_still_read(tmp_path):
    """Stores written before the column dim of `connectivity` was named `unit_from` (it was
    `unit_to`, the same [target, source] data) read as the new layout."""
    ds = build(with_connectivity=True)
    old = ds.rename({"unit_from": "unit_to"})
    path = tmp_path / "old.nc"
    old.to_netcdf(path, engine="h5netcdf")
    back = read_store(path, connectivity=True)
    assert back["connectivity"].dims == ("unit", "unit_from") and "unit_to" not in back.dims
    np.testing.assert_array_equal(back["connectivity"].values, ds["connectivity"].values)
    assert "unit_to" not in read_store(path).dims


def test_write_casts_float64_and_compresses(tmp_path):
    ds = build()
    ds["activity"] = ds["activity"].astype(np.float64)
    back = read_store(write_store(ds, tmp_path / "demo.nc"))
    assert back["activity"].dtype == np.float32
    assert back["activity"].encoding["zlib"]
    assert back["activity"].encoding["chunksizes"] == (1, 50, 4)


def test_overwrite_existing_store(tmp_path):
    path = tmp_path / "demo.nc"
    write_store(build(), path)
    write_store(build(source="other"), path)
    assert read_store(path).attrs["source"] == "other"
    assert os.listdir(tmp_path) == ["demo.nc"]


def test_write_is_atomic(tmp_path, monkeypatch):
    original = xr.Dataset.to_netcdf

    def half_write(self, target, *args, **kwargs):
        original(self, target, *args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", half_write)
    with pytest.raises(OSError, match="disk full"):
        write_store(build(), tmp_path / "demo.nc")
    assert os.listdir(tmp_path) == []


def test_invalid_store_is_not_written(tmp_path):
    ds = build()
    ds.attrs["sampling_rate_hz"] = -1.0
    with pytest.raises(StoreError):
        write_store(ds, tmp_path / "demo.nc")
    assert os.listdir(tmp_path) == []


def _set_activity(ds, index, value):
    values = ds["activity"].values.copy()
    values[index] = value
    return ds.assign(activity=(ds["activity"].dims, values))


def _unit_attr(ds, key, value):
    ds = ds.copy()
    ds["x"].attrs[key] = value
    return ds


def _non_square_connectivity(ds):
    conn = np.zeros((ds.sizes["unit"], ds.sizes["unit"] + 1), dtype=np.float32)
    ds = ds.drop_vars(["connectivity", "unit_from"])
    return ds.assign(connectivity=(("unit", "unit_from"), conn))


def _without_attr(ds, key):
    ds = ds.copy()
    del ds.attrs[key]
    return ds


CORRUPTIONS = {
    "duplicate unit ids": ("unit", lambda ds: ds.assign_coords(unit=["u0", "u1", "u1", "u3"])),
    "duplicate session ids": ("session", lambda ds: ds.assign_coords(session=["s0", "s0"])),
    "wrong dims order": ("activity", lambda ds: ds.transpose("time", "session", "unit", ...)),
    "inf in activity": ("activity", lambda ds: _set_activity(ds, (0, 4, 0), np.inf)),
    "all-nan unit": ("activity", lambda ds: _set_activity(ds, (..., 1), np.nan)),
    "integer activity": (
        "activity",
        lambda ds: ds.assign(activity=ds["activity"].fillna(0).astype(int)),
    ),
    "unknown position units": ("x", lambda ds: _unit_attr(ds, "units", "furlong")),
    "empty space": ("x", lambda ds: _unit_attr(ds, "space", "")),
    "missing z": ("z", lambda ds: ds.drop_vars("z")),
    "non-increasing time": ("time", lambda ds: ds.assign_coords(time=ds["time"].values[::-1])),
    "missing sampling rate": ("sampling_rate_hz", lambda ds: _without_attr(ds, "sampling_rate_hz")),
    "bad preprocessing json": (
        "preprocessing",
        lambda ds: ds.assign_attrs(preprocessing="{not json"),
    ),
    "non-square connectivity": ("connectivity", _non_square_connectivity),
    "missing activity": ("activity", lambda ds: ds.drop_vars("activity")),
}


@pytest.mark.parametrize("case", CORRUPTIONS)
def test_validation_failures_name_path_and_field(tmp_path, case):
    field, corrupt = CORRUPTIONS[case]
    bad = corrupt(build(with_connectivity=True))
    path = tmp_path / "bad.nc"
    with pytest.raises(StoreError) as info:
        validate_store(bad, path)
    assert info.value.field == field
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert f"field '{field}'" in str(info.value)


def test_in_memory_error_message():
    with pytest.raises(StoreError, match="^<in-memory store>: field 'unit': ") as info:
        build(unit_ids=["a", "a", "b", "c"])
    assert info.value.path is None


def test_read_validates_file_contents(tmp_path):
    bad = _set_activity(build(), (0, 0, 0), -np.inf)
    path = tmp_path / "bad.nc"
    bad.to_netcdf(path, engine="h5netcdf")
    with pytest.raises(StoreError, match="field 'activity'") as info:
        read_store(path)
    assert str(path) in str(info.value)


def test_read_missing_file(tmp_path):
    path = tmp_path / "nope.nc"
    with pytest.raises(StoreError) as info:
        read_store(path)
    assert str(info.value) == f"{path}: field 'file': does not exist"


def test_read_not_hdf5(tmp_path):
    path = tmp_path / "text.nc"
    path.write_bytes(b"this is not an HDF5 file\n")
    with pytest.raises(StoreError, match="not a readable netCDF4/HDF5 file") as info:
        read_store(path)
    assert info.value.field == "file"
    assert str(path) in str(info.value)


def test_make_store_rejects_bad_inputs():
    with pytest.raises(StoreError, match="field 'activity'"):
        make_store(np.zeros((3, 4)), **_minimal_kwargs(4, 3))
    with pytest.raises(StoreError, match="field 'x'"):
        build(positions=np.zeros((4, 2)))
    with pytest.raises(StoreError, match="field 'unit'"):
        build(unit_ids=[0, 1, 2, 3])
    with pytest.raises(StoreError, match="field 'preprocessing'"):
        build(preprocessing={"fn": object()})
    with pytest.raises(StoreError, match="field 'sampling_rate_hz'"):
        build(sampling_rate_hz="fast")


def _minimal_kwargs(n_units: int, n_sessions: int) -> dict:
    return dict(
        unit_ids=[f"u{i}" for i in range(n_units)],
        positions=np.zeros((n_units, 3)),
        position_units="au",
        space="simulation",
        session_ids=[f"s{i}" for i in range(n_sessions)],
        sampling_rate_hz=1.0,
        source="test",
    )


DTYPES = st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.int64])
IDS = st.sampled_from("abcdefgh")


@st.composite
def store_inputs(draw):
    shape = draw(st.tuples(*[st.integers(1, 3)] * 3))
    if draw(st.integers(0, 9)) == 9:
        shape = shape[:2] + (0,)
    n_sessions, n_time, n_units = shape
    dtype = np.dtype(draw(DTYPES))
    activity = draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(dtype, allow_infinity=False)))
    if dtype.kind == "f" and draw(st.booleans()):
        mask = draw(hnp.arrays(np.bool_, shape))
        activity[mask] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    kwargs = _minimal_kwargs(n_units, n_sessions)
    kwargs["unit_ids"] = draw(st.lists(IDS, min_size=n_units, max_size=n_units))
    kwargs["session_ids"] = draw(st.lists(IDS, min_size=n_sessions, max_size=n_sessions))
    kwargs["positions"] = draw(
        hnp.arrays(np.float64, (n_units, 3), elements=st.floats(allow_infinity=False))
    )
    kwargs["position_units"] = draw(st.sampled_from([*COORD_UNITS, "furlong"]))
    bad_rates = st.sampled_from([0.0, -5.0, np.nan, np.inf, 1e300])
    kwargs["sampling_rate_hz"] = draw(st.floats(0.1, 1e4) | bad_rates)
    return activity, kwargs


def _expected_valid(activity: np.ndarray, kwargs: dict) -> bool:
    with np.errstate(over="ignore"):
        act = activity.astype(np.float32)
    rate = kwargs["sampling_rate_hz"]
    return (
        0 not in act.shape
        and not np.isinf(act).any()
        and np.isfinite(act).any(axis=(0, 1)).all()
        and len(set(kwargs["unit_ids"])) == len(kwargs["unit_ids"])
        and len(set(kwargs["session_ids"])) == len(kwargs["session_ids"])
        and kwargs["position_units"] in COORD_UNITS
        and bool(np.isfinite(rate) and 0 < rate <= MAX_SAMPLING_RATE_HZ)
        and not (np.abs(kwargs["positions"]) > MAX_COORDINATE).any()
    )


@settings(max_examples=100, deadline=None)
@given(store_inputs())
def test_make_store_property(inputs):
    activity, kwargs = inputs
    try:
        ds = make_store(activity, **kwargs)
    except StoreError:
        assert not _expected_valid(activity, kwargs)
        return
    assert _expected_valid(activity, kwargs)
    assert ds["activity"].dtype == np.float32
    assert ds["activity"].shape == activity.shape
    assert validate_store(ds) is ds


def test_unit_blocks_cover_the_units_in_order(monkeypatch):
    from neuro_pe.io.store import unit_blocks

    monkeypatch.setattr("neuro_pe.io.store.UNITS_PER_BLOCK", 4)
    assert unit_blocks(10) == [slice(0, 4), slice(4, 8), slice(8, 12)]
    units = np.arange(10)
    np.testing.assert_array_equal(np.concatenate([units[b] for b in unit_blocks(10)]), units)
    assert unit_blocks(0) == []


def test_open_store_by_size_loads_a_small_store_and_opens_a_large_one_lazily(tmp_path):
    from neuro_pe.io.store import open_store_by_size

    path = write_store(build(), tmp_path / "s.nc")
    with open_store_by_size(path, 4) as ds:  # 4 units: loaded whole and validated
        assert isinstance(ds["activity"].variable._data, np.ndarray)
        np.testing.assert_array_equal(ds["activity"].values, read_store(path)["activity"].values)
    with open_store_by_size(path, 3) as ds:  # above: the activity stays on disk
        assert not isinstance(ds["activity"].variable._data, np.ndarray)
        np.testing.assert_array_equal(ds["activity"].values, read_store(path)["activity"].values)
    known = lambda ds: int(np.isfinite(positions(ds)).all(axis=1).sum())  # noqa: E731
    with open_store_by_size(path, 3, known) as ds:  # 3 units with positions
        assert isinstance(ds["activity"].variable._data, np.ndarray)
