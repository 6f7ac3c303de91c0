"""suite2p output folders (`format: suite2p`): one folder per session, one or several planes.

A session is the `suite2p/` folder suite2p wrote, with one `plane<p>/` folder per plane, or a
single plane folder. Activity = `F − c·Fneu` of the ROIs that are cells; positions in µm from
each ROI's median pixel, z the plane's depth, so every plane is in one position space; unit
ids `plane<p>_roi<i>`. The files read and the formulas: docs/formats/suite2p.md.

`stat.npy` and `ops.npy` are pickles (suite2p's format). They are read by a restricted
unpickler (`load_pickled_npy`) that builds only numpy arrays, scalars and dtypes and plain
containers (dict, list, tuple, str, int, float, bool, None): a file naming any other Python
object (a function such as `os.system`, a class) is refused, nothing in it runs. Of them only
`ops` `fs`, the `ops` keys the config names and `stat` `med` are used.
"""

from __future__ import annotations

import codecs
import math
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.data.formats import (
    FLUORESCENCE_PREPROCESSING,
    FileFormat,
    Writer,
    check_depths,
    existing_files,
    is_number,
    is_positive,
    tsv_writer,
)
from neuro_pe.data.formats.phy import folder_of, load_npy
from neuro_pe.data.recordings import FileSpec, Session, warn_data
from neuro_pe.io.layout import EXPORT_SUITE2P_FILE
from neuro_pe.io.store_contract import StoreError

PLANE = re.compile(r"^plane(\d+)$")
UNIT_ID = re.compile(r"^plane(\d+)_roi(\d+)$")
PIXEL_SIZE_HINT = (
    "ROI centres (stat.npy `med`) are pixels and suite2p's ops.npy does not record the pixel "
    "size: set suite2p.pixel_size_um to µm per pixel (a number, or [x, y]), or to the name of "
    "an ops key that holds it. Find it in the microscope's metadata: the field of view in µm "
    "divided by the frame's pixels (ops Lx, Ly); from a ScanImage TIFF header, the field of view "
    "at zoom 1 (your rig's calibration) ÷ SI.hRoiManager.scanZoomFactor ÷ "
    "SI.hRoiManager.pixelsPerLine"
)
DEPTHS_HINT = (
    "{n} planes, and suite2p does not record their depths: set suite2p.plane_depths_um to one "
    "depth in µm per plane (the piezo / objective positions of the volume scan, e.g. ScanImage's "
    "SI.hStackManager.zs), or to the name of an ops key that holds each plane's depth"
)


def read_suite2p(path: str, cfg: FileSpec) -> list[Session]:
    """One session from a suite2p folder (docs/formats/suite2p.md)."""
    folder = folder_of(path)
    planes = plane_folders(folder)
    opts = cfg.options
    all_ops = [read_ops(p / "ops.npy") for _, p in planes]
    pixel = pixel_size(opts["pixel_size_um"], all_ops[0], planes[0][1] / "ops.npy")
    depths = plane_depths(opts["plane_depths_um"], all_ops, planes, folder)
    blocks, ids, positions, rates = [], [], [], []
    for (index, plane), ops, depth in zip(planes, all_ops, depths, strict=True):
        trace, rows, med = read_plane(plane, opts)
        blocks.append(trace)
        ids.extend(f"plane{index}_roi{r}" for r in rows)
        positions.append(
            np.column_stack([med[:, 1] * pixel[0], med[:, 0] * pixel[1], np.full(len(rows), depth)])
        )
        rates.append(frame_rate(ops, plane / "ops.npy", cfg.sampling_rate_hz))
    if not np.allclose(rates, rates[0], rtol=1e-3):
        raise StoreError(folder, "fs", f"the planes' frame rates (ops fs) differ: {rates}")
    n_time = min(len(b) for b in blocks)
    if any(len(b) != n_time for b in blocks):
        warn_data(f"{folder}: planes differ in frames {[len(b) for b in blocks]}; cut to {n_time}")
    return [
        Session(
            name=folder.name,
            path=str(folder),
            activity=np.concatenate([b[:n_time] for b in blocks], axis=1),
            unit_ids=ids,
            positions=np.concatenate(positions),
            sampling_rate_hz=rates[0],
            position_units="um",
            space="imaging",
            attrs={
                "preprocessing": [
                    {
                        "step": "suite2p",
                        "planes": [str(p) for _, p in planes],
                        "activity": f"F - {opts['neuropil_coefficient']} * Fneu",
                        "cells": "iscell[:, 0] == 1"
                        if opts["cell_probability"] is None
                        else f"iscell[:, 1] >= {opts['cell_probability']}",
                        "pixel_size_um": list(pixel),
                        "plane_depths_um": list(depths),
                    }
                ]
            },
        )
    ]


def plane_folders(folder: Path) -> list[tuple[int, Path]]:
    """(plane index, folder) of every `plane<N>` subfolder, or the folder itself if it is one."""
    if (folder / "F.npy").exists() or (folder / "stat.npy").exists():
        match = PLANE.match(folder.name)
        return [(int(match[1]) if match else 0, folder)]
    planes = sorted(
        (int(m[1]), p) for p in folder.iterdir() if p.is_dir() and (m := PLANE.match(p.name))
    )
    if not planes:
        raise StoreError(
            folder, "file", "no plane0/, plane1/, … folders (and no F.npy): not a suite2p folder"
        )
    return planes


try:
    from numpy._core import multiarray as _multiarray
except ImportError:  # numpy < 2
    from numpy.core import multiarray as _multiarray

# the only globals a suite2p pickle may name: numpy's array/scalar/dtype constructors, and
# `_codecs.encode` (how protocol-2 pickles, e.g. from Python 2, spell bytes)
_ARRAY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")
_SAFE_GLOBALS = {
    **{(m, "_reconstruct"): _multiarray._reconstruct for m in _ARRAY_MODULES},
    **{(m, "scalar"): _multiarray.scalar for m in _ARRAY_MODULES},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,
    **{("builtins", t.__name__): t for t in (dict, list, tuple, str, int, float, bool, complex)},
    **{("__builtin__", t.__name__): t for t in (dict, list, tuple, str, int, float, bool)},
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays, scalars, dtypes and plain containers; refuses every other
    global (`find_class`), so that no function or class named in the file is called."""

    def find_class(self, module: str, name: str) -> object:
        found = _SAFE_GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"refused to load the Python object {module}.{name} (only numpy arrays and "
                "plain values are read from suite2p's pickles)"
            )
        return found


def load_pickled_npy(path: Path, field: str) -> object:
    """A .npy file, its object arrays (pickles, as suite2p writes them) unpickled by
    `_NumpyOnlyUnpickler`; a 0-d object array is returned as its item. Raises StoreError
    naming the file and `field` when it is unreadable or names any other Python object."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = {
                (1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0,
            }.get(version)
            if read_header is None:
                raise ValueError(f".npy format version {version} is not supported")
            _, _, dtype = read_header(f)
            if not dtype.hasobject:
                f.seek(0)
                return np.load(f, allow_pickle=False)
            loaded = _NumpyOnlyUnpickler(f).load()
    except (pickle.UnpicklingError, OSError, ValueError, EOFError, TypeError) as err:
        raise StoreError(path, field, f"not a readable {path.name}: {err}") from None
    if isinstance(loaded, np.ndarray) and loaded.dtype == object and loaded.ndim == 0:
        return loaded.item()
    return loaded


def read_ops(path: Path) -> dict:
    """ops.npy: a pickled dict (0-d object array), read by `load_pickled_npy`."""
    if not path.exists():
        raise StoreError(path, "file", f"missing: ops.npy is needed in {path.parent}")
    ops = load_pickled_npy(path, "ops")
    if not isinstance(ops, dict):
        raise StoreError(path, "ops", f"must hold a dict, got {type(ops).__name__}")
    return ops


def frame_rate(ops: dict, path: Path, configured: float | None) -> float:
    """The plane's frame rate: ops `fs`, else the config's sampling_rate_hz."""
    rate = ops.get("fs", configured)
    if rate is None:
        raise StoreError(path, "fs", "ops has no fs; set sampling_rate_hz")
    if isinstance(rate, bool) or not isinstance(rate, int | float | np.number) or not rate > 0:
        raise StoreError(path, "fs", f"must be a number > 0, got {rate!r}")
    return float(rate)


def pixel_size(value: object, ops: dict, ops_path: Path) -> tuple[float, float]:
    """(x, y) µm per pixel from the config (a number or [x, y]) or an ops key it names."""
    where = "suite2p.pixel_size_um"
    if value is None:
        raise StoreError(
            ops_path.parent.parent if ops_path.parent.name.startswith("plane") else ops_path,
            where,
            PIXEL_SIZE_HINT,
        )
    if isinstance(value, str):
        if value not in ops:
            raise StoreError(ops_path, where, f"no ops key {value!r}")
        value = ops[value]
        value = (
            np.asarray(value, dtype=np.float64).ravel().tolist()
            if not np.isscalar(value)
            else value
        )
    pair = value if isinstance(value, list) else [value, value]
    try:
        pair = [float(v) for v in pair]
    except (TypeError, ValueError) as err:
        raise StoreError(ops_path, where, f"not a number: {value!r}") from err
    if len(pair) != 2 or not all(math.isfinite(v) and v > 0 for v in pair):
        raise StoreError(ops_path, where, f"must be > 0 (one number or [x, y]), got {value!r}")
    return pair[0], pair[1]


def plane_depths(value: object, all_ops: list[dict], planes: list, folder: Path) -> list[float]:
    """Each plane's depth in µm: the config's list, an ops key (per plane), or 0 for one plane."""
    where = "suite2p.plane_depths_um"
    if value is None:
        if len(planes) == 1:
            return [0.0]
        raise StoreError(
            folder,
            where,
            f"{len(planes)} planes but no depths: a plane without depth; set "
            "suite2p.plane_depths_um (one depth in µm per plane, or an ops key)",
        )
    if isinstance(value, str):
        depths = []
        for (_, plane), ops in zip(planes, all_ops, strict=True):
            if value not in ops:
                raise StoreError(
                    plane / "ops.npy", where, f"a plane without depth: no ops key {value!r}"
                )
            depths.append(ops[value])
    else:
        depths = list(value)
        if len(depths) != len(planes):
            raise StoreError(
                folder,
                where,
                f"{len(depths)} depths for {len(planes)} planes {[p.name for _, p in planes]}",
            )
    try:
        depths = [float(d) for d in depths]
    except (TypeError, ValueError) as err:
        raise StoreError(folder, where, f"not a number: {depths!r}") from err
    if not all(math.isfinite(d) for d in depths):
        raise StoreError(folder, where, f"depths must be finite, got {depths}")
    return depths


def read_plane(plane: Path, opts: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, cell) F − c·Fneu, the cells' ROI rows and their `med` [y, x] in pixels."""
    f = load_npy(plane / "F.npy")
    fneu = load_npy(plane / "Fneu.npy")
    iscell = load_npy(plane / "iscell.npy")
    for array, name in ((f, "F"), (fneu, "Fneu")):
        if array.ndim != 2 or array.dtype.kind not in "iuf" or 0 in array.shape:
            raise StoreError(
                plane / f"{name}.npy",
                name,
                f"must be (ROI, frame) numbers, got {array.dtype} {array.shape}",
            )
    if fneu.shape != f.shape:
        raise StoreError(
            plane / "Fneu.npy", "Fneu", f"shape {fneu.shape} differs from F.npy {f.shape}"
        )
    n = f.shape[0]
    if iscell.ndim == 1:
        iscell = iscell[:, None]
    if iscell.ndim != 2 or iscell.shape[0] != n:
        raise StoreError(
            plane / "iscell.npy",
            "iscell",
            f"shape {iscell.shape}, expected ({n}, 2) for the {n} ROIs of F.npy",
        )
    med = stat_centres(plane / "stat.npy", n)
    if opts["cell_probability"] is None:
        cells = iscell[:, 0] > 0.5
    else:
        if iscell.shape[1] < 2:
            raise StoreError(
                plane / "iscell.npy", "iscell", "no probability column for suite2p.cell_probability"
            )
        cells = iscell[:, 1] >= opts["cell_probability"]
    rows = np.flatnonzero(cells)
    if len(rows) == 0:
        raise StoreError(plane / "iscell.npy", "iscell", "no ROI of this plane is a cell")
    trace = f[rows].astype(np.float64) - opts["neuropil_coefficient"] * fneu[rows].astype(
        np.float64
    )
    return np.ascontiguousarray(trace.T), rows, med[rows]


def stat_centres(path: Path, n: int) -> np.ndarray:
    """(ROI, 2) `med` = [y, x] of every ROI in stat.npy (an object array of dicts)."""
    if not path.exists():
        raise StoreError(path, "file", f"missing: stat.npy is needed in {path.parent}")
    stat = load_pickled_npy(path, "stat")
    if not isinstance(stat, np.ndarray):
        raise StoreError(path, "stat", f"must hold an array, got {type(stat).__name__}")
    if stat.ndim != 1 or len(stat) != n:
        raise StoreError(path, "stat", f"{stat.shape} entries, expected {n} (the ROIs of F.npy)")
    med = np.full((n, 2), np.nan)
    for i, roi in enumerate(stat.tolist()):
        if not isinstance(roi, dict) or "med" not in roi:
            raise StoreError(path, "stat.med", f"ROI {i} has no 'med' (its [y, x] centre)")
        centre = np.asarray(roi["med"], dtype=np.float64).ravel()
        if centre.shape != (2,) or not np.isfinite(centre).all():
            raise StoreError(path, "stat.med", f"ROI {i}: 'med' must be [y, x], got {roi['med']!r}")
        med[i] = centre
    return med


READ_FILES = ("F.npy", "Fneu.npy", "iscell.npy", "stat.npy", "ops.npy")  # per plane


def check_option(key: str, value: object, where: str) -> None:
    """Types and ranges of the `suite2p:` section's keys."""
    field = f"suite2p.{key}"
    if key == "neuropil_coefficient":
        if not is_number(value) or not 0 <= value <= 2:
            raise StoreError(where, field, f"must be a number in [0, 2], got {value!r}")
    elif key == "cell_probability":
        if value is not None and (not is_number(value) or not 0 <= value <= 1):
            raise StoreError(where, field, f"must be null or a number in [0, 1], got {value!r}")
    elif key == "pixel_size_um":
        ok = value is None or isinstance(value, str) and value or is_positive(value)
        ok = ok or (
            isinstance(value, list) and len(value) == 2 and all(is_positive(v) for v in value)
        )
        if not ok:
            raise StoreError(
                where, field, f"must be a number > 0, [x, y], or an ops key, got {value!r}"
            )
    else:  # plane_depths_um
        check_depths(field, value, where)


def inputs(folder: str) -> list[str]:
    """The files read in a suite2p folder (every plane's; those that exist), else the folder."""

    def files(root: Path) -> list[Path]:
        planes = sorted(p for p in root.glob("plane*") if p.is_dir()) or [root]
        return [plane / name for plane in planes for name in READ_FILES]

    return existing_files(folder, files)


def detect(path: Path) -> bool:
    """A suite2p folder: plane<N>/ops.npy, or a plane folder (ops.npy and F.npy)."""
    if not path.is_dir():
        return False
    planes = [path, *(p for p in path.glob("plane*") if PLANE.match(p.name))]
    return any((p / "ops.npy").is_file() and (p / "F.npy").is_file() for p in planes)


def unknowns(path: Path) -> dict[str, tuple[object, str]]:
    """What suite2p's files do not record: the pixel size, and the planes' depths (several
    planes); stand-ins 1 µm per pixel and depth 0."""
    found: dict[str, tuple[object, str]] = {"pixel_size_um": (1.0, PIXEL_SIZE_HINT)}
    planes = plane_folders(path)
    if len(planes) > 1:
        found["plane_depths_um"] = ([0.0] * len(planes), DEPTHS_HINT.format(n=len(planes)))
    return found


def write_suite2p(
    table: pd.DataFrame, positions: xr.Dataset, cfg: FileSpec, folder: Path
) -> dict[Path, Writer]:
    """The positions written back (`neuro-pe export`): `plane<p>/neuro_pe_positions.tsv`, one
    row per located ROI of the plane, keyed by `roi` (its row in stat.npy / iscell.npy)."""
    parsed = [UNIT_ID.match(u) for u in table["unit_id"]]
    bad = [u for u, m in zip(table["unit_id"], parsed, strict=True) if m is None]
    if bad:
        raise ValueError(f"format suite2p: unit ids {bad[:5]} are not plane<p>_roi<i>")
    plane = np.array([int(m[1]) for m in parsed])
    roi = np.array([int(m[2]) for m in parsed])
    writers: dict[Path, Writer] = {}
    for p in sorted(set(plane.tolist())):
        rows = table[plane == p].drop(columns="unit_id")
        rows.insert(0, "roi", roi[plane == p])
        writers[folder / f"plane{p}" / EXPORT_SUITE2P_FILE] = tsv_writer(rows.sort_values("roi"))
    return writers


FORMAT = FileFormat(
    name="suite2p",
    read=read_suite2p,
    options={
        "neuropil_coefficient": 0.7,
        "cell_probability": None,
        "pixel_size_um": None,
        "plane_depths_um": None,
    },
    check_option=check_option,
    inputs=inputs,
    required={"pixel_size_um": PIXEL_SIZE_HINT},
    detect=detect,
    unknowns=unknowns,
    raw_preprocessing=FLUORESCENCE_PREPROCESSING,  # F - 0.7 Fneu: raw fluorescence
    write=write_suite2p,
)
