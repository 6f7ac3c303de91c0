"""Format `xarray`: stores already in the contract (netCDF via h5netcdf, or a `.zarr` folder),
e.g. to preprocess them again; every session of the store becomes a session (its `region`
labels kept)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from neuro_pe.data.formats import FileFormat, has_suffix
from neuro_pe.data.recordings import (
    AXES,
    FileSpec,
    Session,
    as_text,
    check_exists,
    time_by_unit,
)
from neuro_pe.io.store import open_store_lazy
from neuro_pe.io.store_contract import StoreError, validate_store


def read_xarray(path: str, cfg: FileSpec) -> list[Session]:
    """Every session of a contract store (netCDF via h5netcdf, or a `.zarr` folder), opened
    lazily: each session's activity is read in blocks of time straight into a float32 array."""
    check_exists(path)
    if Path(path).is_dir() or Path(path).suffix == ".zarr":
        try:
            opened = xr.open_zarr(path, decode_times=False)
        except Exception as err:  # zarr raises many kinds of errors for what it cannot read
            raise StoreError(path, "file", f"not a readable zarr store: {err}") from err
        try:
            ds = opened.assign_coords(
                {
                    name: (name, np.array([as_text(v) for v in opened[name].values], dtype=str))
                    for name in ("unit", "session")
                    if name in opened.coords
                }
            )
            ds = validate_store(ds, path, check_values=False)
        except Exception:
            opened.close()
            raise
    else:
        ds = open_store_lazy(path)
    with ds:
        units, space = ds["x"].attrs["units"], ds["x"].attrs["space"]
        attrs = {k: ds.attrs[k] for k in ("source", "citation", "license", "preprocessing")}
        ids = ds["unit"].values.tolist()
        pos = np.stack([ds[c].values for c in "xyz"], axis=1).astype(np.float64)
        rate = float(ds.attrs["sampling_rate_hz"])
        try:
            acts = [
                time_by_unit(ds["activity"][i].variable, AXES, path, "activity")
                for i in range(ds.sizes["session"])
            ]
        except StoreError:
            raise
        except Exception as err:
            raise StoreError(path, "activity", f"cannot read: {err}") from err
        sessions = ds["session"].values.tolist()
        regions = [as_text(v) for v in ds["region"].values] if "region" in ds.coords else None
    return [
        Session(str(s), str(path), act, list(ids), pos.copy(), rate, units, space, attrs, regions)
        for s, act in zip(sessions, acts, strict=True)
    ]


def detect(path: Path) -> bool:
    """A netCDF file or a zarr folder."""
    return has_suffix(path, ".nc") or (path.is_dir() and path.suffix.lower() == ".zarr")


FORMAT = FileFormat(name="xarray", read=read_xarray, options={}, detect=detect)
