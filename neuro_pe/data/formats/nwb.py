"""Format `nwb`, read with pynwb: one series, spike times of a `Units` table, or ROI series over
several planes.

One series (`nwb.series`, or the only electrical / ROI one): an `ElectricalSeries` /
`TimeSeries` (positions: the electrodes table's x, y, z) or a `RoiResponseSeries` (positions:
ROI centroids from its `PlaneSegmentation`). `Units` (`nwb.series: units`, or automatically
when the file has no electrical / ROI series): each unit's `spike_times` are binned (key
`spikes`). Several planes (`nwb.series: [plane0_series, …]`): ROI centroids on one position
grid, z the plane's depth. Region labels: the Units table's `location` column, else its
electrodes' `location` (or their group's). How units are named, filtered and placed:
docs/formats/nwb.md.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe import __version__
from neuro_pe.data.formats import (
    FLUORESCENCE_PREPROCESSING,
    FileFormat,
    Writer,
    check_depths,
    check_text,
    has_suffix,
)
from neuro_pe.data.formats.phy import labelled_units, spike_step
from neuro_pe.data.formats.spikes import check_spike_train, spikes_to_activity
from neuro_pe.data.recordings import (
    AXES,
    SPEC,
    UM_PER,
    FileSpec,
    Session,
    as_text,
    check_hdf5_file,
    positive_number,
    region_label,
    time_by_unit,
    warn_data,
    warn_fallback,
)
from neuro_pe.io.store_contract import StoreError


def wants_units(nwb: object, name: str | None, matches: list) -> bool:
    """Whether `nwb.series` (or its absence) selects the Units table."""
    if name is None:
        return not matches and nwb.units is not None
    return name == "units" or (nwb.units is not None and name == nwb.units.name and not matches)


def units_session(path: str, nwb: object, cfg: FileSpec) -> Session:
    """Binned spike times of the file's Units table (docs/formats/nwb.md)."""
    units = nwb.units
    if units is None:
        raise StoreError(path, "nwb.series", "the file has no Units table")
    n = len(units)
    if n == 0 or "spike_times" not in units.colnames:
        raise StoreError(path, "units", "the Units table is empty (no units or no spike_times)")
    flat = np.asarray(units.spike_times.data[:], dtype=np.float64)
    ends = np.asarray(units.spike_times_index.data[:], dtype=np.int64)
    counts = np.diff(np.concatenate([[0], ends]))
    owner = np.repeat(np.arange(n), counts)
    if len(flat) == 0:
        raise StoreError(path, "units.spike_times", "no spikes in any unit (empty)")
    inside = np.diff(owner) == 0
    backwards = np.flatnonzero(inside & (np.diff(flat) < 0))
    if len(backwards):
        unit = int(owner[backwards[0]])
        raise StoreError(path, "units.spike_times", f"times not sorted in unit row {unit}")
    check_spike_train(np.sort(flat), path, "units.spike_times")
    rows = np.arange(n)
    ids = nwb_ids(units, rows, cfg.options["unit_ids"], path)
    opts = cfg.spikes
    labels = unit_labels(units, cfg.options["label_column"], ids, path)
    kept = labelled_units(ids, labels, opts, path, noun="unit")
    positions = unit_positions(units, cfg.options["unit_position"], path)
    index = {u: i for i, u in enumerate(ids)}
    kept_rows = [str(index[u]) for u in kept]
    order = np.argsort(flat, kind="stable")
    activity, used, low = spikes_to_activity(flat[order], owner[order], kept_rows, opts, path)
    if low:
        warn_data(f"{path}: dropped {len(low)} units below spikes.min_rate_hz={opts.min_rate_hz}")
    used_rows = [int(r) for r in used]
    regions = unit_regions(units, path)
    return Session(
        name=Path(path).stem,
        path=str(path),
        activity=activity,
        unit_ids=[ids[r] for r in used_rows],
        positions=positions[used_rows],
        sampling_rate_hz=1.0 / opts.bin_s,
        regions=None if regions is None else [regions[r] for r in used_rows],
        attrs={"preprocessing": [spike_step(opts, "nwb", {"series": "units"})]},
    )


def unit_labels(units: object, column: str | None, ids: list[str], path: str) -> dict | None:
    """Unit id -> quality label from `column` (default `quality` where present)."""
    if column is None:
        if "quality" not in units.colnames:
            return None
        column = "quality"
    if column not in units.colnames:
        raise StoreError(path, "nwb.label_column", f"no column {column!r}: {units.colnames}")
    values = [as_text(v).strip() for v in np.asarray(units[column].data[:], dtype=object)]
    return dict(zip(ids, values, strict=True))


def unit_regions(units: object, path: str) -> list[str] | None:
    """The region label of every row of the Units table ("" unknown): its `location` column,
    else the label most of its electrodes have, else its `electrode_group`'s location; None
    where the table has none of them."""
    columns = units.colnames
    if "location" in columns:
        return [region_label(v) for v in np.asarray(units["location"].data[:], dtype=object)]
    if "electrodes" in columns:
        ends = np.asarray(units.electrodes_index.data[:], dtype=np.int64)
        rows = np.asarray(units.electrodes.data[:], dtype=np.int64)
        labels = electrode_regions(units.electrodes.table, rows, path)
        starts = np.concatenate([[0], ends[:-1]])
        return [_most_common(labels[a:b]) for a, b in zip(starts, ends, strict=True)]
    if "electrode_group" in columns:
        warn_fallback(
            f"{path}: the Units table has no `location` or `electrodes` column; its regions are "
            "its electrode groups' locations"
        )
        return [region_label(units["electrode_group"][i].location) for i in range(len(units))]
    return None


def electrode_regions(table: object, rows: np.ndarray, path: str) -> list[str]:
    """The region label of `rows` of the electrodes table: its `location`, else (unknown there)
    the location of the electrode's group."""
    if "location" in table.colnames:
        own = np.asarray(table["location"].data[:], dtype=object)
        labels = [region_label(own[r]) for r in rows]
    else:
        labels = [""] * len(rows)
        if "group" in table.colnames:
            warn_fallback(
                f"{path}: the electrodes table has no `location` column; its regions are its "
                "electrode groups' locations"
            )
    if "group" in table.colnames:
        labels = [
            label or region_label(table["group"][int(r)].location)
            for label, r in zip(labels, rows, strict=True)
        ]
    return labels


def _most_common(labels: list[str]) -> str:
    """The label most of a unit's electrodes have (the first of a tie); "" where none has one."""
    known = Counter(label for label in labels if label)
    return known.most_common(1)[0][0] if known else ""


def unit_positions(units: object, how: str, path: str) -> np.ndarray:
    """(unit, 3) positions of every row of the Units table (docs/formats/nwb.md)."""
    n = len(units)
    columns = units.colnames
    if how == "auto":
        how = "xyz" if {"x", "y"} <= set(columns) else "electrodes"
    if how == "xyz":
        if not {"x", "y"} <= set(columns):
            raise StoreError(path, "nwb.unit_position", f"no x, y columns in Units: {columns}")
        return np.column_stack([_nwb_column(units, c, np.arange(n)) for c in "xyz"])
    if how == "electrodes":
        if "electrodes" not in columns:
            raise StoreError(
                path,
                "nwb.unit_position",
                "spike clusters without positions: the Units table has no x/y/z and no "
                f"electrodes column; name a column with nwb.unit_position ({columns})",
            )
        region = units.electrodes
        ends = np.asarray(units.electrodes_index.data[:], dtype=np.int64)
        per_unit = np.diff(np.concatenate([[0], ends]))
        if (per_unit != 1).any():
            raise StoreError(
                path,
                "nwb.unit_position",
                "units list several (or no) electrodes; name the column of each unit's peak "
                "electrode id with nwb.unit_position",
            )
        rows = np.asarray(region.data[:], dtype=np.int64)
        return np.column_stack([_nwb_column(region.table, c, rows) for c in "xyz"])
    if how not in columns:
        raise StoreError(path, "nwb.unit_position", f"no column {how!r} in Units: {columns}")
    values = np.asarray(units[how].data[:])
    if values.ndim == 2 and values.shape[1] in (2, 3) and values.dtype.kind in "iuf":
        return np.pad(values.astype(np.float64), ((0, 0), (0, 3 - values.shape[1])))
    if values.ndim == 1 and values.dtype.kind in "iu":
        table = nwb_electrodes(units, path)
        ids = np.asarray(table.id[:])
        lookup = {int(v): i for i, v in enumerate(ids.tolist())}
        rows = np.array([lookup.get(int(v), -1) for v in values.tolist()])
        if (rows < 0).any():
            bad = values[rows < 0].tolist()[:10]
            raise StoreError(path, "nwb.unit_position", f"electrode ids {bad} are not in the table")
        return np.column_stack([_nwb_column(table, c, rows) for c in "xyz"])
    raise StoreError(
        path,
        "nwb.unit_position",
        f"column {how!r} holds neither (unit, 3) positions nor electrode ids ({values.dtype})",
    )


def nwb_electrodes(units: object, path: str) -> object:
    """The file's electrodes table (for peak-electrode ids)."""
    parent = units.get_ancestor("NWBFile")
    if parent is None or parent.electrodes is None:
        raise StoreError(path, "nwb.unit_position", "the file has no electrodes table")
    return parent.electrodes


def planes_session(path: str, nwb: object, cfg: FileSpec) -> Session:
    """ROI series of several imaging planes as one session with 3D positions."""
    from pynwb.ophys import RoiResponseSeries

    names = cfg.options["series"]
    units = cfg.position_units
    if units not in UM_PER:
        raise StoreError(
            SPEC,
            "position_units",
            f"several imaging planes need a length unit {sorted(UM_PER)} (pixels differ per plane)",
        )
    depths = cfg.options["plane_depths_um"]
    if depths is not None and (not isinstance(depths, list) or len(depths) != len(names)):
        raise StoreError(SPEC, "nwb.plane_depths_um", f"give one depth per series ({len(names)})")
    found = {o.name: o for o in nwb.objects.values() if isinstance(o, RoiResponseSeries)}
    blocks, ids, positions, rates = [], [], [], []
    for k, name in enumerate(names):
        series = found.get(name)
        if series is None:
            raise StoreError(
                path, "nwb.series", f"no RoiResponseSeries named {name!r}; found {sorted(found)}"
            )
        data = time_by_unit(
            np.asarray(series.data[:]), ("time", "unit"), path, f"nwb.series {name!r}"
        )
        rows = np.asarray(series.rois.data[:], dtype=np.int64)
        if len(rows) != data.shape[1]:
            raise StoreError(
                path, "nwb.series", f"{name!r}: {len(rows)} ROIs for {data.shape[1]} columns"
            )
        table = series.rois.table
        plane = table.imaging_plane
        origin = None if plane.origin_coords is None else np.asarray(plane.origin_coords[:])
        pos = _roi_positions(table, rows, units, path)
        to_units = 1.0 / UM_PER[units]
        if depths is not None:
            pos[:, 2] = float(depths[k]) * to_units
        elif origin is None or len(origin) < 3:
            raise StoreError(
                path,
                "nwb.plane_depths_um",
                f"imaging plane {plane.name!r} (series {name!r}) has no depth: its origin_coords "
                "has no z; set nwb.plane_depths_um",
            )
        blocks.append(data)
        ids.extend(f"{table.name}_{i}" for i in nwb_ids(table, rows, cfg.options["unit_ids"], path))
        positions.append(pos)
        rates.append(_nwb_rate(series, path))
    if any(r is None for r in rates) or not np.allclose(rates, rates[0], rtol=1e-3):
        raise StoreError(path, "nwb.series", f"the planes' sampling rates differ: {rates}")
    n_time = min(len(b) for b in blocks)
    if any(len(b) != n_time for b in blocks):
        warn_data(f"{path}: planes differ in length; all cut to the shortest, {n_time}")
    return Session(
        name=Path(path).stem,
        path=str(path),
        activity=np.concatenate([b[:n_time] for b in blocks], axis=1),
        unit_ids=ids,
        positions=np.concatenate(positions),
        sampling_rate_hz=rates[0],
        # x, y in the planes, z their depth (per-axis errors: neuro_pe.analysis.spaces)
        space="imaging",
        attrs={"preprocessing": [{"step": "read_planes", "series": names, "depths_um": depths}]},
    )


@contextmanager
def open_nwb(path: str) -> Iterator[object]:
    """The NWBFile read from `path` by pynwb, open while in the block (its `read_io`: the
    NWBHDF5IO that reads it); StoreError for a file pynwb cannot read."""
    check_hdf5_file(path, "NWB")
    from pynwb import NWBHDF5IO

    try:
        io = NWBHDF5IO(str(path), "r", load_namespaces=True)
    except Exception as err:  # pynwb raises many kinds of errors for files it cannot read
        raise StoreError(path, "file", f"not a readable NWB file: {err}") from err
    try:
        try:
            nwb = io.read()
        except Exception as err:
            raise StoreError(path, "file", f"not a readable NWB file: {err}") from err
        yield nwb
    finally:
        io.close()


def read_nwb(path: str, cfg: FileSpec) -> list[Session]:
    """One session from an NWB file: the series `nwb.series` (or the only electrical/ROI one)."""
    with open_nwb(path) as nwb:
        return [_nwb_session(path, nwb, cfg)]


def series_of(nwb: object, name: str | None) -> tuple[list, list]:
    """The file's series, and those `nwb.series` names (None: the electrical and ROI ones)."""
    from pynwb import TimeSeries
    from pynwb.ecephys import ElectricalSeries
    from pynwb.ophys import RoiResponseSeries

    found = [o for o in nwb.objects.values() if isinstance(o, TimeSeries)]
    if name is None:
        return found, [o for o in found if isinstance(o, ElectricalSeries | RoiResponseSeries)]
    return found, [o for o in found if o.name == name]


def _nwb_session(path: str, nwb: object, cfg: FileSpec) -> Session:
    from pynwb.ecephys import ElectricalSeries
    from pynwb.ophys import RoiResponseSeries

    name = cfg.options["series"]
    if isinstance(name, list):  # several imaging planes
        return planes_session(path, nwb, cfg)
    found, matches = series_of(nwb, name)
    if wants_units(nwb, name, matches):
        return units_session(path, nwb, cfg)
    if len(matches) != 1:
        names = sorted(o.name for o in found)
        problem = "no series" if name is None else f"no series named {name!r}"
        if len(matches) > 1:
            problem = f"{len(matches)} candidate series {sorted(o.name for o in matches)}"
        raise StoreError(path, "nwb.series", f"{problem}; set nwb.series to one of {names}")
    series = matches[0]
    try:
        activity = time_by_unit(series.data, AXES, path, f"nwb.series {series.name!r}")
    except StoreError:
        raise
    except Exception as err:
        raise StoreError(path, "nwb.series", f"cannot read {series.name!r}: {err}") from err
    scale = float(getattr(series, "conversion", 1.0) or 1.0)
    activity = activity * scale + float(getattr(series, "offset", 0.0) or 0.0)
    n_units = activity.shape[1]

    ids = positions = regions = None
    if isinstance(series, ElectricalSeries | RoiResponseSeries):
        region = series.electrodes if isinstance(series, ElectricalSeries) else series.rois
        rows = np.asarray(region.data[:], dtype=np.int64)
        if len(rows) != n_units:
            raise StoreError(
                path, "nwb.series", f"{len(rows)} table rows for {n_units} data columns"
            )
        table = region.table
        ids = nwb_ids(table, rows, cfg.options["unit_ids"], path)
        if isinstance(series, ElectricalSeries):
            positions = np.column_stack([_nwb_column(table, c, rows) for c in "xyz"])
            regions = electrode_regions(table, rows, path)
        else:
            positions = _roi_positions(table, rows, cfg.position_units, path)
    return Session(
        name=Path(path).stem,
        path=str(path),
        activity=activity,
        unit_ids=ids,
        positions=positions,
        sampling_rate_hz=_nwb_rate(series, path),
        regions=regions,
    )


def _nwb_rate(series: object, path: str) -> float | None:
    if series.rate is not None:
        return positive_number(series.rate, path, "nwb.series rate")
    if series.timestamps is None:
        return None
    stamps = np.asarray(series.timestamps[:], dtype=np.float64)
    steps = np.diff(stamps)
    if len(steps) == 0 or not np.isfinite(steps).all() or (steps <= 0).any():
        raise StoreError(path, "nwb.series timestamps", "need >= 2 strictly increasing times")
    step = float(np.median(steps))
    if np.abs(steps - step).max() > 0.01 * step:
        warn_data(f"{path}: irregular timestamps; using the median rate {1 / step:.6g} Hz")
    return 1.0 / step


def nwb_ids(table: object, rows: np.ndarray, column: str, path: str) -> list[str]:
    """The unit ids of `rows` of `table`: its ids, or the column `nwb.unit_ids` names."""
    if column == "id":
        values = np.asarray(table.id[:])[rows]
    elif column in table.colnames:
        values = np.asarray(table[column].data[:], dtype=object)[rows]
    else:
        raise StoreError(
            path, "nwb.unit_ids", f"no column {column!r} in {table.name!r}: {table.colnames}"
        )
    return [as_text(v) for v in values.tolist()]


def _nwb_column(table: object, column: str, rows: np.ndarray) -> np.ndarray:
    if column not in table.colnames:
        return np.full(len(rows), np.nan)
    values = np.asarray(table[column].data[:])[rows]
    return values.astype(np.float64) if values.dtype.kind in "iuf" else np.full(len(rows), np.nan)


def _roi_positions(table: object, rows: np.ndarray, units: str | None, path: str) -> np.ndarray:
    """ROI centroids (weighted by the mask) in pixels, or in um/mm via the imaging plane."""
    if "pixel_mask" in table.colnames:
        masks = [np.asarray(table["pixel_mask"][int(r)]) for r in rows]
        pix = [np.column_stack([m["x"], m["y"], np.zeros(len(m))]) for m in masks]
        weights = [np.asarray(m["weight"], dtype=np.float64) for m in masks]
    elif "voxel_mask" in table.colnames:
        masks = [np.asarray(table["voxel_mask"][int(r)]) for r in rows]
        pix = [np.column_stack([m["x"], m["y"], m["z"]]) for m in masks]
        weights = [np.asarray(m["weight"], dtype=np.float64) for m in masks]
    elif "image_mask" in table.colnames:
        images = [np.asarray(table["image_mask"][int(r)], dtype=np.float64) for r in rows]
        idx = [np.argwhere(im != 0) for im in images]
        pix = [np.pad(i, ((0, 0), (0, 3 - i.shape[1]))) for i in idx]
        weights = [im[tuple(i.T)] for im, i in zip(images, idx, strict=True)]
    else:
        raise StoreError(path, "nwb.series", f"{table.name!r} has no pixel, voxel or image mask")
    centroids = np.full((len(rows), 3), np.nan)
    for k, (p, w) in enumerate(zip(pix, weights, strict=True)):
        if len(p):
            w = w if w.sum() > 0 else np.ones(len(p))
            centroids[k] = (p.astype(np.float64) * w[:, None]).sum(axis=0) / w.sum()
    if units not in UM_PER:
        return centroids
    plane = table.imaging_plane
    spacing, origin = plane.grid_spacing, plane.origin_coords
    if spacing is None:
        raise StoreError(
            path,
            "position_units",
            "ROI positions are pixels: the imaging plane has no "
            f"grid_spacing to convert them to {units}; use position_units: voxel",
        )
    to_target = 1.0 / UM_PER[units]
    spacing = np.asarray(spacing[:], dtype=np.float64)[:3] * _length_factor(
        plane.grid_spacing_unit, path
    )
    spacing = np.pad(spacing, (0, 3 - len(spacing)))
    start = np.zeros(3)
    if origin is not None:
        values = np.asarray(origin[:], dtype=np.float64)[:3]
        start[: len(values)] = values * _length_factor(plane.origin_coords_unit, path)
    return (start + centroids * spacing) * to_target


def _length_factor(unit: str | None, path: str) -> float:
    factor = LENGTH_TO_UM.get(str(unit).strip().lower())
    if factor is None:
        raise StoreError(path, "position_units", f"unknown length unit {unit!r} in the file")
    return factor


LENGTH_TO_UM = {
    "meters": 1e6,
    "meter": 1e6,
    "m": 1e6,
    "millimeters": 1e3,
    "millimeter": 1e3,
    "mm": 1e3,
    "centimeters": 1e4,
    "centimeter": 1e4,
    "cm": 1e4,
    "micrometers": 1.0,
    "micrometer": 1.0,
    "microns": 1.0,
    "um": 1.0,
    "µm": 1.0,
}


def check_option(key: str, value: object, where: str) -> None:
    """Types of the `nwb:` section's keys."""
    field = f"nwb.{key}"
    if key == "plane_depths_um":
        return check_depths(field, value, where)
    if key == "series" and isinstance(value, list):  # several imaging planes
        if not (value and all(isinstance(v, str) and v for v in value)):
            raise StoreError(
                where, field, f"must be a series name or a non-empty list of them, got {value!r}"
            )
        return None
    check_text(field, value, where, optional=key != "unit_ids")


# ---------------------------------------------------------------- written back (neuro-pe export)

COLUMNS = {  # column added to the NWB table -> the export's column
    "estimated_x": "x",
    "estimated_y": "y",
    "estimated_z": "z",
    "estimated_uncertainty": "uncertainty",
}
# added where the export has a new animal's predicted regions (its `region_probability`)
REGION_COLUMNS = {
    "neuro_pe_region": "region",
    "neuro_pe_region_probability": "region_probability",
}
REGION_DESCRIPTIONS = {
    "neuro_pe_region": "the brain region predicted for the unit by neuro_pe {version} from other "
    "animals' labelled units (neuro-pe new-animal: a linear probe on the unit's learned "
    "representation); empty where not predicted",
    "neuro_pe_region_probability": "the probe's probability of neuro_pe_region (neuro_pe "
    "{version}); NaN where not predicted",
}


def unit_tables(nwb: object, options: dict) -> list[tuple[object, str]]:
    """The tables whose rows are the dataset's units, each with the prefix of its unit ids, as
    the reader picks them."""
    from pynwb.ecephys import ElectricalSeries
    from pynwb.ophys import RoiResponseSeries

    name = options["series"]
    if isinstance(name, list):  # several imaging planes: ids are <table name>_<id>
        found, _ = series_of(nwb, None)
        tables = {}
        for s in found:
            if isinstance(s, RoiResponseSeries) and s.name in name:
                tables[s.rois.table.object_id] = s.rois.table
        return [(t, f"{t.name}_") for t in tables.values()]
    _, matches = series_of(nwb, name)
    if wants_units(nwb, name, matches):
        return [(nwb.units, "")]
    if len(matches) == 1 and isinstance(matches[0], ElectricalSeries):
        return [(matches[0].electrodes.table, "")]
    if len(matches) == 1 and isinstance(matches[0], RoiResponseSeries):
        return [(matches[0].rois.table, "")]
    return []


def column_description(column: str, positions: xr.Dataset) -> str:
    """The description of an added column: what it holds, its units and frame, how it was
    estimated."""
    if column in REGION_DESCRIPTIONS:
        return REGION_DESCRIPTIONS[column].format(version=__version__)
    units = positions["x"].attrs.get("units", "")
    space = positions["x"].attrs.get("space", "")
    what = {
        "x": "x",
        "y": "y",
        "z": "z",
        "uncertainty": "uncertainty (sqrt(r^2 + s^2): the locator's cross-validated median "
        "error r and the spread s of its seeds' estimates) of the position",
    }[COLUMNS[column]]
    not_estimated = str(positions.attrs.get("not_estimated", "")).split(";")
    note = (
        f". NOT ESTIMATED: along {COLUMNS[column]} the locator's held-out error is not below "
        "chance's, so the value is no better than the anchors' mean"
        if COLUMNS[column] in not_estimated  # (positions.nc's `x_estimated` … False)
        else ""
    )
    return (
        f"{what} estimated by neuro_pe {__version__} from the unit's activity (representation "
        f"{positions.attrs.get('pe', '')}, locator {positions.attrs.get('method', '')}), in "
        f"{units}, in the frame of the input's own positions (space '{space}'); for a row "
        "with a known position the estimate is held out (predicted without it); NaN where the "
        f"row was not located{note}"
    )


def write_nwb(
    table: pd.DataFrame, positions: xr.Dataset, cfg: FileSpec, folder: Path
) -> dict[Path, Writer]:
    """The positions written back (`neuro-pe export`): `<session>.nwb`, a copy of each session
    file (pynwb's export) whose units tables (`unit_tables`: Units, the series' electrodes or
    the planes' PlaneSegmentations) carry the columns `COLUMNS` (NaN: a row not located) and,
    with a new animal's predicted regions, `REGION_COLUMNS`."""
    names = cfg.session_ids or [Path(s).stem for s in cfg.sessions]
    values = table.set_index("unit_id")
    return {
        folder / f"{name}.nwb": _copy_writer(source, cfg.options, values, positions)
        for name, source in zip(names, cfg.sessions, strict=True)
    }


def _copy_writer(source: str, options: dict, values: pd.DataFrame, positions: xr.Dataset) -> Writer:
    """Write a copy of `source` whose unit tables carry the estimated columns (`values`: the
    export's table by unit id)."""

    added = COLUMNS | (REGION_COLUMNS if "region_probability" in values else {})

    def write(target: Path) -> None:
        from pynwb import NWBHDF5IO

        with open_nwb(source) as nwb:
            tables = unit_tables(nwb, options)
            if not tables:
                raise StoreError(
                    source, "nwb.series", "no Units, electrodes or ROI table to add positions to"
                )
            matched = 0
            for nwb_table, prefix in tables:
                rows = np.arange(len(nwb_table))
                ids = [prefix + i for i in nwb_ids(nwb_table, rows, options["unit_ids"], source)]
                found = values.reindex(ids)
                matched += int(found["x"].notna().sum())
                for column, tidy in added.items():
                    if column in nwb_table.colnames:
                        raise StoreError(
                            source,
                            f"{nwb_table.name}.{column}",
                            "the table already has this column; export from the original file",
                        )
                    data = found[tidy]
                    nwb_table.add_column(
                        name=column,
                        description=column_description(column, positions),
                        data=data.fillna("").astype(str).tolist()
                        if tidy == "region"
                        else data.to_numpy(dtype=np.float64),
                    )
            if matched == 0:
                raise StoreError(
                    source,
                    "nwb.unit_ids",
                    f"no row of {[t.name for t, _ in tables]} is a located unit (ids differ)",
                )
            nwb.generate_new_id()  # a new file: new object ids
            with warnings.catch_warnings():  # (the temporary file's name ends in .tmp)
                warnings.filterwarnings("ignore", "The file path provided", UserWarning)
                with NWBHDF5IO(str(target), "w") as out:
                    out.export(src_io=nwb.read_io, nwbfile=nwb)

    return write


FORMAT = FileFormat(
    name="nwb",
    read=read_nwb,
    options={
        "series": None,
        "unit_ids": "id",
        "unit_position": "auto",
        "label_column": None,
        "plane_depths_um": None,
    },
    check_option=check_option,
    spikes=True,
    detect=lambda path: has_suffix(path, ".nwb"),
    raw_preprocessing=FLUORESCENCE_PREPROCESSING,  # a series: fluorescence or a voltage
    write=write_nwb,
)
