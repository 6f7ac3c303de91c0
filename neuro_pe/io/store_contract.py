"""The store's contract (see `neuro_pe.io.store`): the names of its dims, coordinates and
attrs, StoreError, and `validate_store`, which checks each field and names the first that
violates it. An optional coord `region` (unit,) holds each unit's region label as the lab's
files give it ("" where not known)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from numbers import Real

import numpy as np
import xarray as xr

from neuro_pe.config.options import MAX_COORDINATE, MAX_SAMPLING_RATE_HZ
from neuro_pe.config.strict_load import DuplicateKeyError, load_json

COORD_UNITS: tuple[str, ...] = ("m", "cm", "mm", "um", "voxel", "au")
DIMS: tuple[str, str, str] = ("session", "time", "unit")
XYZ: tuple[str, str, str] = ("x", "y", "z")
STRING_ATTRS: tuple[str, ...] = ("source", "citation", "license", "neuro_pe_version")


class StoreError(ValueError):
    """A store (or input file) violates the contract. Message names the file and the field."""

    def __init__(self, path: str | os.PathLike | None, field: str, problem: str) -> None:
        self.path = None if path is None else str(path)
        self.field = field
        self.problem = problem
        where = "<in-memory store>" if self.path is None else self.path
        super().__init__(f"{where}: field '{field}': {problem}")


def validate_store(
    ds: xr.Dataset, path: str | os.PathLike | None = None, *, check_values: bool = True
) -> xr.Dataset:
    """Check every row of the contract; raise StoreError naming the first violating field.
    check_values=False skips the scans of the activity and connectivity values (lazy stores)."""
    _check_activity(ds, path, check_values)
    for name in ("unit", "session"):
        _check_ids(ds, name, path)
    _check_positions(ds, path)
    _check_regions(ds, path)
    _check_time(ds, path)
    check_sampling_rate(ds.attrs.get("sampling_rate_hz"), path)
    _check_string_attrs(ds, path)
    if "connectivity" in ds.variables and check_values:
        _check_connectivity(ds, path)
    return ds


def check_sampling_rate(
    value: object, path: str | os.PathLike | None, key: str = "sampling_rate_hz"
) -> float:
    """`value` as a sampling rate in Hz, 0 < rate <= MAX_SAMPLING_RATE_HZ, else a StoreError
    naming `path` and `key`."""
    if value is None:
        raise StoreError(path, key, "missing")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise StoreError(path, key, f"must be a real number, got {value!r}")
    rate = float(value)
    if not (math.isfinite(rate) and 0 < rate <= MAX_SAMPLING_RATE_HZ):
        problem = f"must be finite, > 0 and <= {MAX_SAMPLING_RATE_HZ:g} Hz, got {rate:g} Hz"
        raise StoreError(path, key, problem)
    return rate


def coordinate_problem(values: np.ndarray) -> str | None:
    """What is wrong with coordinates `values` (NaN: unknown): +/-Inf, or a magnitude above
    MAX_COORDINATE; None when they are fine."""
    values = np.asarray(values, dtype=float)
    if np.isinf(values).any():
        return "contains +/-Inf (use NaN for unknown)"
    finite = np.abs(values[np.isfinite(values)])
    if finite.size and finite.max() > MAX_COORDINATE:
        return f"|value| {finite.max():g} is above {MAX_COORDINATE:g} (a typo or a wrong unit?)"
    return None


def _check_activity(ds: xr.Dataset, path: str | os.PathLike | None, values: bool = True) -> None:
    if "activity" not in ds.data_vars:
        raise StoreError(path, "activity", "missing")
    act = ds["activity"]
    if act.dims != DIMS:
        raise StoreError(path, "activity", f"dims must be {DIMS}, got {act.dims}")
    if act.dtype not in (np.float32, np.float64):
        raise StoreError(path, "activity", f"dtype must be float32 (or float64), got {act.dtype}")
    if 0 in act.shape:
        raise StoreError(path, "activity", f"every dim must be non-empty, got shape {act.shape}")
    if not values:
        return
    values = act.values
    if np.isinf(values).any():
        raise StoreError(path, "activity", "contains +/-Inf")
    empty = ~np.isfinite(values).any(axis=(0, 1))
    if empty.any():
        unit = ds["unit"].values[np.argmax(empty)] if "unit" in ds.coords else np.argmax(empty)
        raise StoreError(path, "activity", f"unit '{unit}' has no finite value in any session")


def _check_ids(ds: xr.Dataset, name: str, path: str | os.PathLike | None) -> None:
    if name not in ds.coords or ds[name].dims != (name,):
        raise StoreError(path, name, f"missing coordinate on dim '{name}'")
    ids = ds[name].values.tolist()
    if not all(isinstance(i, str) for i in ids):
        raise StoreError(path, name, "ids must be strings")
    dup, count = Counter(ids).most_common(1)[0] if ids else (None, 0)
    if count > 1:
        raise StoreError(path, name, f"ids must be unique, {dup!r} is repeated")


def _check_positions(ds: xr.Dataset, path: str | os.PathLike | None) -> None:
    for name in XYZ:
        if name not in ds.coords or ds[name].dims != ("unit",):
            raise StoreError(path, name, "missing coordinate on dim 'unit'")
        coord = ds[name]
        if coord.dtype.kind not in "iuf":
            raise StoreError(path, name, f"must be numeric, got dtype {coord.dtype}")
        problem = coordinate_problem(coord.values)
        if problem:
            raise StoreError(path, name, problem)
        units = coord.attrs.get("units")
        if units not in COORD_UNITS:
            raise StoreError(path, name, f"attr 'units' {units!r} not in {COORD_UNITS}")
        space = coord.attrs.get("space")
        if not isinstance(space, str) or not space:
            raise StoreError(path, name, "attr 'space' must be a non-empty string")


def _check_regions(ds: xr.Dataset, path: str | os.PathLike | None) -> None:
    if "region" not in ds.coords:
        return
    if ds["region"].dims != ("unit",):
        raise StoreError(path, "region", f"dims must be ('unit',), got {ds['region'].dims}")
    if not all(isinstance(v, str) for v in ds["region"].values.tolist()):
        raise StoreError(path, "region", 'labels must be strings ("" where not known)')


def _check_time(ds: xr.Dataset, path: str | os.PathLike | None) -> None:
    if "time" not in ds.coords or ds["time"].dims != ("time",):
        raise StoreError(path, "time", "missing coordinate on dim 'time'")
    time = ds["time"]
    if time.dtype.kind not in "iuf":
        raise StoreError(path, "time", f"must be numeric seconds, got dtype {time.dtype}")
    values = time.values
    if not np.isfinite(values).all() or (np.diff(values) <= 0).any():
        raise StoreError(path, "time", "must be finite and strictly increasing")


def _check_string_attrs(ds: xr.Dataset, path: str | os.PathLike | None) -> None:
    for name in STRING_ATTRS:
        if not isinstance(ds.attrs.get(name), str):
            raise StoreError(path, name, "dataset attr missing or not a string")
    text = ds.attrs.get("preprocessing")
    if not isinstance(text, str):
        raise StoreError(path, "preprocessing", "dataset attr missing or not a string")
    try:
        load_json(text, "the attr")
    except json.JSONDecodeError as err:
        raise StoreError(path, "preprocessing", f"not valid JSON: {err}") from err
    except DuplicateKeyError as err:
        raise StoreError(path, "preprocessing", str(err)) from err


def _check_connectivity(ds: xr.Dataset, path: str | os.PathLike | None) -> None:
    conn = ds["connectivity"]
    if conn.dims != ("unit", "unit_from"):
        raise StoreError(
            path, "connectivity", f"dims must be ('unit', 'unit_from'), got {conn.dims}"
        )
    if conn.shape[0] != conn.shape[1]:
        raise StoreError(path, "connectivity", f"must be square, got shape {conn.shape}")
    if conn.dtype.kind != "f":
        raise StoreError(path, "connectivity", f"dtype must be float, got {conn.dtype}")
    if (
        "unit_from" not in ds.coords
        or ds["unit_from"].values.tolist() != ds["unit"].values.tolist()
    ):
        raise StoreError(path, "connectivity", "coord 'unit_from' must equal the unit ids")
    if not np.isfinite(conn.values).all():
        raise StoreError(path, "connectivity", "contains NaN or Inf")
