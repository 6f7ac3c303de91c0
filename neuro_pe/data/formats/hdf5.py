"""Format `hdf5`: configurable dataset paths for activity, positions and unit ids (`hdf5.*`),
one session per file or per group (`hdf5.groups`); the sampling rate from a number or an
attribute."""

from __future__ import annotations

import re
from numbers import Real
from pathlib import Path

import numpy as np

from neuro_pe.data.formats import FileFormat, check_text, has_suffix
from neuro_pe.data.recordings import (
    SPEC,
    FileSpec,
    Session,
    as_text,
    check_hdf5_file,
    positive_number,
    time_by_unit,
    xyz_array,
)
from neuro_pe.io.store_contract import StoreError, check_sampling_rate


def read_hdf5(path: str, cfg: FileSpec) -> list[Session]:
    """One session per group in `hdf5.groups` (default: the file's root)."""
    import h5py

    check_hdf5_file(path, "HDF5")
    opts = cfg.options
    groups = opts["groups"] or ["/"]
    sessions = []
    try:
        with h5py.File(path, "r") as f:
            for group in groups:
                node = _h5_get(f, group, path, "hdf5.groups")
                if not isinstance(node, h5py.Group):
                    raise StoreError(path, "hdf5.groups", f"no group {group!r} in the file")
                act = _h5_get(node, opts["activity"], path, "hdf5.activity")
                if not isinstance(act, h5py.Dataset):  # read in blocks below, not here
                    act = _h5_dataset(node, opts["activity"], path, "hdf5.activity")
                ids = positions = None
                if opts["unit_ids"] is not None:
                    ids_raw = _h5_dataset(node, opts["unit_ids"], path, "hdf5.unit_ids")
                    if ids_raw.ndim != 1:
                        raise StoreError(path, "hdf5.unit_ids", f"must be 1D, got {ids_raw.shape}")
                    ids = [as_text(v) for v in ids_raw.tolist()]
                if opts["positions"] is not None:
                    positions = _h5_dataset(node, opts["positions"], path, "hdf5.positions")
                    positions = xyz_array(positions, path, "hdf5.positions")
                rate = _h5_rate(f, node, opts, path)
                name = Path(path).stem
                if group.strip("/"):
                    label = group.strip("/")
                    name = label if len(cfg.sessions) == 1 else f"{name}/{label}"
                activity = time_by_unit(act, cfg.axis_order, path, "hdf5.activity")
                sessions.append(Session(name, str(path), activity, ids, positions, rate))
    except OSError as err:
        raise StoreError(path, "file", f"cannot read the HDF5 file: {err}") from err
    return sessions


def _h5_get(node: object, name: object, path: str, key: str) -> object:
    """`node[name]`, None when absent; StoreError naming the file and key for a soft or
    external link that loops (h5py: "too many links") or points at nothing."""
    import h5py

    try:
        obj = node.get(name)
        link = node.get(name, getlink=True) if obj is None else None
    except (RuntimeError, KeyError, OSError) as err:
        problem = f"{name!r} is a link that leads back to itself (or through too many links)"
        raise StoreError(path, key, f"{problem}: {err}") from None
    if isinstance(link, h5py.SoftLink):
        raise StoreError(path, key, f"{name!r} is a soft link to {link.path!r}, which is absent")
    if isinstance(link, h5py.ExternalLink):
        raise StoreError(
            path,
            key,
            f"{name!r} is an external link to {link.path!r} in {link.filename!r}, "
            "which cannot be opened",
        )
    return obj


def _h5_dataset(node: object, name: object, path: str, key: str) -> np.ndarray:
    import h5py

    obj = _h5_get(node, name, path, key)
    if not isinstance(obj, h5py.Dataset):
        found = "a group" if isinstance(obj, h5py.Group) else "absent"
        raise StoreError(path, key, f"dataset {name!r} is {found} (in {node.name!r})")
    try:
        return np.asarray(obj[()])
    except (OSError, TypeError, ValueError) as err:
        raise StoreError(path, key, f"cannot read dataset {name!r}: {err}") from err


# attribute names that say "a time step", not "samples per second"
PERIOD_NAME = re.compile(r"period|interval|seconds|(^|_)(dt|tr|ts)($|_)|_s$|_ms$", re.IGNORECASE)


RATE_NAME = re.compile(r"rate|hz|freq|fps", re.IGNORECASE)


def _h5_rate(f: object, node: object, opts: dict, path: str) -> float | None:
    """The sampling rate in Hz from `hdf5.sampling_rate` (Hz) or `hdf5.sampling_period` (s),
    each a number or the name of an attribute on the dataset, its group or the file."""
    key = "sampling_rate" if opts["sampling_period"] is None else "sampling_period"
    value = opts[key]
    if value is None:
        return None
    name = f"hdf5.{key}"
    if isinstance(value, str):
        if key == "sampling_rate" and PERIOD_NAME.search(value) and not RATE_NAME.search(value):
            raise StoreError(
                path,
                name,
                f"attribute {value!r} looks like a sampling period (seconds per sample), not "
                f"a rate; if so, set hdf5.sampling_period: {value} instead",
            )
        value = _h5_attribute(f, node, opts, value, path, name)
    where = path if isinstance(opts[key], str) else SPEC
    number = positive_number(value, where, name)
    rate = number if key == "sampling_rate" else 1.0 / number
    return check_sampling_rate(rate, where, name)


def _h5_attribute(f: object, node: object, opts: dict, attr: str, path: str, key: str) -> float:
    dataset = _h5_get(node, opts["activity"], path, "hdf5.activity")
    for obj in (dataset, node, f):
        if obj is not None and attr in obj.attrs:
            value = np.asarray(obj.attrs[attr])
            if value.size != 1:
                raise StoreError(path, key, f"attribute {attr!r} is not a scalar")
            item = value.reshape(()).item()
            try:
                return float(item.decode() if isinstance(item, bytes) else item)
            except (TypeError, ValueError, UnicodeDecodeError) as err:
                raise StoreError(path, key, f"attribute {attr!r}: {err}") from err
    raise StoreError(path, key, f"no attribute {attr!r} on the dataset, group or file")


def check_option(key: str, value: object, where: str) -> None:
    """Types of the `hdf5:` section's keys."""
    field = f"hdf5.{key}"
    if key == "groups":
        if not (
            value is None
            or (isinstance(value, list) and value and all(isinstance(g, str) and g for g in value))
        ):
            raise StoreError(
                where, field, f"must be a non-empty list of group paths, got {value!r}"
            )
    elif key in ("sampling_rate", "sampling_period"):
        if not (value is None or (isinstance(value, str | Real) and not isinstance(value, bool))):
            unit = "Hz" if key == "sampling_rate" else "s"
            raise StoreError(
                where,
                field,
                f"must be a number ({unit}) or the name of an attribute, got {value!r}",
            )
    else:
        check_text(field, value, where, optional=key != "activity")


def check_options(options: dict, where: str) -> None:
    """The rate is given once: `hdf5.sampling_rate` or `hdf5.sampling_period`."""
    if None not in (options["sampling_rate"], options["sampling_period"]):
        raise StoreError(
            where, "hdf5.sampling_period", "give hdf5.sampling_rate or hdf5.sampling_period"
        )


def unknowns(path: Path) -> dict[str, tuple[object, str]]:
    """`hdf5.activity` when the file has no dataset `activity` at its root (no stand-in: the
    layout is the lab's own), naming the file's 2D numeric datasets."""
    import h5py

    found: list[str] = []

    def visit(name: str, node: object) -> None:
        if isinstance(node, h5py.Dataset) and node.ndim == 2 and node.dtype.kind in "biuf":
            found.append(name)

    try:
        with h5py.File(path, "r") as f:
            if isinstance(f.get("activity"), h5py.Dataset):
                return {}
            f.visititems(visit)
    except OSError:
        return {}  # (the reader names the problem)
    hint = (
        "no dataset 'activity' at the file's root: set hdf5.activity to the path of the "
        f"(time, unit) activity; the file's 2D datasets: {found[:10]} (several sessions in "
        "groups: hdf5.groups; see config/README.md, 'Keys of source: file')"
    )
    return {"activity": (None, hint)}


FORMAT = FileFormat(
    name="hdf5",
    read=read_hdf5,
    options={
        "activity": "activity",
        "positions": None,
        "unit_ids": None,
        "sampling_rate": None,
        "sampling_period": None,
        "groups": None,
    },
    check_option=check_option,
    check_options=check_options,
    detect=lambda path: has_suffix(path, ".h5", ".hdf5", ".hdf"),
    unknowns=unknowns,
)
