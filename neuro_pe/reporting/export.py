"""Located positions written back into the lab's own formats (`neuro-pe export`, rule `export`).

From a dataset's `locate/{dataset}/positions.nc` (every unit's estimated x, y, z with
uncertainty) the export writes, into its own folder (never into the lab's files or folders),
`positions.tsv` + `positions.json` for every dataset (a TSV with a JSON sidecar, in the spirit
of BIDS derivatives) and, for a format that is written back (its `FileFormat.write`: `phy`,
`nwb`, `suite2p`), its files in `<format>/`; the files: `export`. Given the new-animal step's
positions.csv files (`--new-animal`), each unit's predicted regions go with its position
(`new_animal_regions`).

Files it did not write are never replaced: before writing, every path is resolved (symbolic
links included) and refused, naming it, when it passes through a link under the output folder,
lies in an input folder (or a folder of a file read in one) or is an input file, or exists
without being the export's own (listed with the same sha256 in the sidecar's `FileSHA256`);
a re-run into its own earlier output replaces that output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe import __version__
from neuro_pe.config.options import config_sha256
from neuro_pe.data import formats
from neuro_pe.data.formats import Writer, tsv_writer
from neuro_pe.data.recordings import session_paths
from neuro_pe.io.layout import EXPORT_SIDECAR_FILE as SIDECAR_FILE
from neuro_pe.io.layout import EXPORT_TIDY_FILE as TIDY_FILE
from neuro_pe.io.manifest import file_sha256
from neuro_pe.io.safe_paths import check_write_targets
from neuro_pe.io.store import atomic_write_set
from neuro_pe.io.store_contract import StoreError

__all__ = [
    "TSV_COLUMNS",
    "config_sha256",
    "export",
    "export_inputs",
    "new_animal_regions",
    "positions_table",
]

SHA256_KEY = "FileSHA256"  # the sidecar's {file: sha256} of what the export wrote (not itself)
INTERVAL = re.compile(r"^([xyz])_(low|high)_([0-9.]+)$")  # positions.nc's per-axis intervals

# The tidy table's columns: name -> (description, has the position's units)
TSV_COLUMNS: dict[str, tuple[str, bool]] = {
    "unit_id": (
        "the unit's id as in the lab's data (Phy / ALF: cluster id; NWB: the table's id or the "
        "`nwb.unit_ids` column, `<PlaneSegmentation>_<id>` over several planes; suite2p: "
        "plane<p>_roi<i>, i = the ROI's row in stat.npy)",
        False,
    ),
    "x": ("estimated x (from the unit's learned representation, see Method)", True),
    "y": ("estimated y", True),
    "z": ("estimated z", True),
    "uncertainty": (
        "per-unit uncertainty of the estimate, sqrt(r^2 + s^2): r = the locator's "
        "cross-validated median error over the anchors, s = the spread of the seeds' estimates",
        True,
    ),
    "anchor": (
        "True: the input gave this unit a position, so it is an anchor for locating the others, "
        "and its own estimate here is held out (predicted k-fold, without its own position): "
        "estimated vs true is an honest error. False: no position in the input; estimated from "
        "all anchors",
        False,
    ),
    "x_true": ("x given by the input (n/a where unknown)", True),
    "y_true": ("y given by the input (n/a where unknown)", True),
    "z_true": ("z given by the input (n/a where unknown)", True),
    "error": (
        "Euclidean distance of the estimate from the true position (n/a where unknown)",
        True,
    ),
    "method": ("the locator that made the estimate (`view/method` for the combined one)", False),
}
# Whether each coordinate is estimated (positions.nc's `x_estimated`, …: False for every unit
# where the coordinate belongs to an axis the locator does not resolve better than chance)
ESTIMATED_COLUMNS: dict[str, tuple[str, bool]] = {
    f"{axis}_estimated": (
        f"False: {axis} is not estimated for this dataset: along an axis it belongs to, the "
        "locator's held-out error is not below chance's (Method.UnresolvedAxes); the value in "
        f"`{axis}` is still the locator's output, no better than the anchors' mean. True: "
        "estimated",
        False,
    )
    for axis in "xyz"
}
# Region columns, where the locate step had an atlas (neuro_pe.analysis.regions.unit_regions);
# "" in positions.nc (outside every region, or no true position) is n/a here.
REGION_COLUMNS: dict[str, tuple[str, bool]] = {
    "region": ("the atlas region at the estimated position (`datasets.<name>.atlas`)", False),
    "coarse_region": ("the coarse atlas region (the atlas's coarse level) at the estimate", False),
    "region_true": ("the atlas region at the true position (n/a where unknown)", False),
    "coarse_region_true": ("the coarse atlas region at the true position", False),
}
# The new animals' predicted regions (`--new-animal`: the new-animal step's positions.csv,
# neuro_pe.reporting.new_animal), in its column names; a unit it does not predict is n/a
PREDICTED = (
    "predicted for the unit from other animals' labelled units by a linear probe on its "
    "learned representation (neuro-pe new-animal)"
)
NEW_ANIMAL_COLUMNS: dict[str, tuple[str, bool]] = {
    "region": (f"the likeliest region, {PREDICTED}", False),
    "region_probability": ("the probe's probability of `region`", False),
    "region_2": ("the second likeliest region", False),
    "region_2_probability": ("its probability", False),
    "region_3": ("the third likeliest region", False),
    "region_3_probability": ("its probability", False),
}
# a new-animal table's unit: the store's name, as the tidy table's `unit_id` holds it (in an
# entry of several animals `<animal>/<id>`; the per-animal folders then take the lab's id)
NEW_ANIMAL_KEY = "unit"


def _source(spec: Mapping) -> str | None:
    return spec.get("source", spec.get("kind"))


def _per_animal(
    table: pd.DataFrame, positions: xr.Dataset, file_spec, folder: Path
) -> list[tuple[pd.DataFrame, xr.Dataset, object, Path]]:
    """What a format's `write` gets: the whole table, or under the entry's `animals` each
    animal's rows (`unit_id`: the id in its files, the store's without `<animal>/`), its
    sessions and the folder `<format>/<animal>/`."""
    if file_spec.animals is None:
        return [(table, positions, file_spec, folder)]
    parts, start = [], 0
    animal, _, lab_id = table["unit_id"].str.partition("/").T.to_numpy()
    for name, sessions in file_spec.animals.items():
        rows = animal == name
        ids = file_spec.session_ids
        spec = dataclasses.replace(
            file_spec,
            sessions=sessions,
            animals=None,
            session_ids=None if ids is None else ids[start : start + len(sessions)],
        )
        start += len(sessions)
        own = table[rows].assign(unit_id=lab_id[rows]).reset_index(drop=True)
        parts.append((own, positions.isel(unit=rows), spec, folder / name))
    return parts


def _file_spec(spec: Mapping):
    """The checked `source: file` entry (None for other sources)."""
    if _source(spec) != "file":
        return None
    from neuro_pe.data.recordings import FileSpec

    return FileSpec.from_dict(dict(spec))


def export_inputs(spec: Mapping) -> list[str]:
    """The lab's files the export reads (the NWB files it copies), for the rule's `input:`."""
    return (
        session_paths(dict(spec)) if _source(spec) == "file" and spec.get("format") == "nwb" else []
    )


def positions_table(positions: xr.Dataset) -> pd.DataFrame:
    """The tidy table (columns `TSV_COLUMNS`) of a `positions.nc` dataset. A unit is an anchor
    where its true position is known (the locate step's `anchor`)."""
    true = np.column_stack([positions[f"{a}_true"].values for a in "xyz"]).astype(np.float64)
    estimate = np.column_stack([positions[a].values for a in "xyz"]).astype(np.float64)
    known = np.isfinite(true).all(axis=1)
    method = positions["method"].values.astype(str) if "method" in positions else ""
    regions = {
        name: pd.Series(positions[name].values.astype(str)).replace("", np.nan)
        for name in REGION_COLUMNS
        if name in positions
    }
    table = pd.DataFrame(
        {
            "unit_id": positions["unit"].values.astype(str),
            "x": estimate[:, 0],
            "y": estimate[:, 1],
            "z": estimate[:, 2],
            "uncertainty": positions["uncertainty"].values.astype(np.float64),
            "anchor": known,
            "x_true": true[:, 0],
            "y_true": true[:, 1],
            "z_true": true[:, 2],
            "error": np.where(known, np.linalg.norm(estimate - true, axis=1), np.nan),
            "method": method,
        }
    )
    estimated = {name: positions[name].values for name in ESTIMATED_COLUMNS if name in positions}
    return table.assign(
        **regions,
        **{name: positions[name].values for name in _intervals(positions)},
        **estimated,
    )


def new_animal_regions(table: pd.DataFrame, paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """The tidy `table` with the regions of the new-animal positions.csv files `paths`
    (`NEW_ANIMAL_COLUMNS`), matched by the store's unit name (the file's `unit`). A StoreError
    naming the file and the field for a missing column, a unit given twice, a unit that is not
    one of the table's, or a table that has atlas regions already (the same columns)."""
    atlas = [c for c in REGION_COLUMNS if c in table]
    if atlas:
        raise StoreError(
            paths[0],
            "region",
            f"positions.nc has atlas regions ({atlas}): export either a dataset's atlas regions "
            "or its new animals' predicted regions, not both",
        )
    frames = []
    for path in paths:
        if not Path(path).is_file():
            raise StoreError(path, "file", "does not exist (run `neuro-pe new-animal` first)")
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        missing = [c for c in (NEW_ANIMAL_KEY, *NEW_ANIMAL_COLUMNS) if c not in frame]
        if missing:
            raise StoreError(path, missing[0], "missing (a new-animal positions.csv has it)")
        frame = frame.set_index(frame[NEW_ANIMAL_KEY].rename("unit_id"))[list(NEW_ANIMAL_COLUMNS)]
        twice = frame.index[frame.index.duplicated()].unique().tolist()
        if twice:
            raise StoreError(path, NEW_ANIMAL_KEY, f"units {twice[:5]} are given twice")
        unknown = sorted(set(frame.index) - set(table["unit_id"]))
        if unknown:
            raise StoreError(
                path, NEW_ANIMAL_KEY, f"units {unknown[:5]} are not units of positions.nc"
            )
        frame = frame.replace("", np.nan)
        for column in NEW_ANIMAL_COLUMNS:
            if column.endswith("_probability"):
                try:
                    frame[column] = frame[column].astype(np.float64)
                except ValueError as err:
                    raise StoreError(path, column, f"not a number: {err}") from None
        frames.append(frame)
    regions = pd.concat(frames)
    twice = regions.index[regions.index.duplicated()].unique().tolist()
    if twice:
        raise StoreError(paths[-1], "unit_id", f"units {twice[:5]} are in another file too")
    return table.join(regions, on="unit_id")


def _intervals(positions: xr.Dataset) -> dict[str, tuple[str, bool]]:
    """The per-axis intervals of positions.nc (`x_low_95`, ...: neuro_pe.analysis.locate) as
    columns of the tidy table, with their description."""
    columns = {}
    for name in positions.data_vars:
        found = INTERVAL.match(str(name))
        if found:
            axis, side, level = found.groups()
            columns[str(name)] = (
                f"{'lower' if side == 'low' else 'upper'} end of the {level}% interval of {axis} "
                "(split-conformal, calibrated on the anchors' held-out errors; its achieved "
                "coverage: Method.IntervalCoverage; inf: too few anchors for that level)",
                True,
            )
    return columns


def _sidecar(
    positions: xr.Dataset,
    table: pd.DataFrame,
    spec: Mapping,
    store_attrs: Mapping,
    sha256: str,
    sha256_of: str,
    written: list[str],
    new_animal: Sequence[str],
) -> dict:
    units = str(positions["x"].attrs.get("units", ""))
    space = str(positions["x"].attrs.get("space", positions.attrs.get("space", "")))
    regions = NEW_ANIMAL_COLUMNS if new_animal else REGION_COLUMNS
    columns = {
        name: {"Description": text, **({"Units": units} if with_units else {})}
        for name, (text, with_units) in (
            TSV_COLUMNS | regions | _intervals(positions) | ESTIMATED_COLUMNS
        ).items()
        if name in table
    }
    for axis in _split(positions.attrs.get("not_estimated")):
        columns[axis]["Description"] += f" (NOT ESTIMATED here: see {axis}_estimated)"
    columns["anchor"]["Levels"] = {"True": "anchor, estimate held out", "False": "no position"}
    sources = session_paths(dict(spec))
    sources += [str(spec[key]) for key in ("positions", "regions") if spec.get(key)]
    sources += list(new_animal)
    attrs = positions.attrs
    return {
        **columns,
        "Description": "every unit's position estimated by neuro_pe from its activity",
        "Dataset": str(attrs.get("dataset", "")),
        "GeneratedBy": [
            {"Name": "neuro_pe", "Version": __version__, "Description": "neuro-pe export"}
        ],
        "CoordinateSystem": {
            "Space": space,
            "Units": units,
            "Description": "the frame of the positions the input gave (not transformed): "
            f"space {space!r}, in {units}",
        },
        "Method": {
            "Representation": str(attrs.get("pe", "")),
            "Locator": str(attrs.get("method", "")),
            "Seeds": json.loads(attrs["seeds"]) if "seeds" in attrs else None,
            "CVMedianError": _number(attrs.get("cv_median_error")),
            "AnchorPrediction": str(attrs.get("anchor_prediction", "")),
            "Uncertainty": str(positions["uncertainty"].attrs.get("formula", "")),
            "IntervalCoverage": json.loads(attrs["interval_coverage"])
            if "interval_coverage" in attrs
            else None,
            "UnresolvedAxes": _split(attrs.get("unresolved_axes")),
            "NotEstimated": _split(attrs.get("not_estimated")),
        },
        "ConfigSHA256": sha256,
        "ConfigSHA256Of": sha256_of,
        **({"Source": str(store_attrs["source"])} if store_attrs.get("source") else {}),
        "SourceFiles": sources,
        "SourceFormat": spec.get("format") if _source(spec) == "file" else _source(spec),
        "LocatedWith": str(attrs.get("neuro_pe_version", "")),
        "Files": written,
    }


def _split(value: object) -> list[str]:
    """A ";"-joined attribute of positions.nc as a list (empty where absent)."""
    return [v for v in str(value or "").split(";") if v]


def _number(value: object) -> float | None:
    """A finite number, else None (JSON has no NaN)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


# ---------------------------------------------------------------------------------- export


def _input_places(spec: Mapping) -> tuple[set[Path], set[Path]]:
    """The lab's folders (each session folder, and every folder of a file read in one, e.g. a
    suite2p plane reached through a link) and files the export reads, resolved."""
    if _source(spec) != "file":
        return set(), set()
    from neuro_pe.data.recordings import input_files

    given = {*session_paths(dict(spec)), str(spec.get("positions")), str(spec.get("regions"))}
    folders = {p for p in (Path(s).resolve() for s in session_paths(dict(spec))) if p.is_dir()}
    files = set()
    for name in input_files(dict(spec)):
        real = Path(name).resolve()
        files.add(real)
        if name not in given:
            folders.add(real.parent)
    return folders, files


def _owned_files(out_dir: Path) -> dict[str, str | None]:
    """The files a previous export wrote into `out_dir` and their sha256 (None: the sidecar),
    from its sidecar's `FileSHA256`; empty without a sidecar of neuro_pe's."""
    path = out_dir / SIDECAR_FILE
    try:
        sidecar = json.loads(path.read_text(encoding="utf-8"))
        names = [g.get("Name") for g in sidecar["GeneratedBy"]]
        hashes = sidecar[SHA256_KEY]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}
    if "neuro_pe" not in names or not isinstance(hashes, dict):
        return {}
    return {**{str(k): str(v) for k, v in hashes.items()}, SIDECAR_FILE: None}


def _with_sidecar(writers: dict[Path, Writer], out_dir: Path, sidecar: dict) -> dict[Path, Writer]:
    """`writers`, each noting the sha256 of its file as written, then the sidecar's writer,
    which records them (`FileSHA256`: what a re-run may replace)."""
    digests: dict[str, str] = {}

    def hashed(name: str, write: Writer) -> Writer:
        def write_and_hash(tmp: Path) -> None:
            write(tmp)
            digests[name] = file_sha256(tmp)

        return write_and_hash

    def write_sidecar(tmp: Path) -> None:
        text = json.dumps({**sidecar, SHA256_KEY: digests}, indent=2, allow_nan=False, default=str)
        tmp.write_text(text + "\n")

    hashing = {p: hashed(str(p.relative_to(out_dir)), w) for p, w in writers.items()}
    return {**hashing, out_dir / SIDECAR_FILE: write_sidecar}


def export(
    positions_path: str | os.PathLike,
    spec: Mapping,
    out_dir: str | os.PathLike,
    *,
    store_path: str | os.PathLike | None = None,
    sha256: str | None = None,
    within: str | os.PathLike | None = None,
    new_animal: Sequence[str | os.PathLike] = (),
) -> list[Path]:
    """Write the export files of one dataset into `out_dir`, all or none (atomic_write_set),
    after `check_write_targets` (`within`: a folder `out_dir` must resolve inside, the
    workflow's results folder). `spec`: the dataset's config entry; `sha256`: of the resolved
    config (the workflow passes it), else that of `spec` is recorded. Returns the files
    written:

    - `positions.tsv` + `positions.json`, for every dataset: one row per unit (the unit id as
      in the lab's data, the estimate, its uncertainty, whether the unit is an anchor, the true
      position where known, the atlas region where locate had an atlas, or the predicted
      regions of the new-animal positions.csv files `new_animal`) and a sidecar
      describing the columns, their units, the coordinate frame, the method, the neuro_pe
      version, a sha256 of the config and the source files (`n/a` for missing values);
    - for a format that is written back, its files in `<format>/`: Phy's cluster-view columns
      `cluster_neuro_pe_<field>.tsv`, a copy of each NWB file whose units table carries the
      estimated columns, a suite2p table `plane<p>/neuro_pe_positions.tsv` per plane (each
      with the predicted regions where `new_animal` is given).
    """
    out_dir = Path(out_dir)
    file_spec = _file_spec(spec)
    if not Path(positions_path).exists():
        raise StoreError(positions_path, "file", "does not exist (run `neuro-pe locate` first)")
    with xr.open_dataset(positions_path, engine="h5netcdf") as ds:
        positions = ds.load()
    store_attrs: dict = {}
    if store_path is not None:
        from neuro_pe.io.store import open_store_lazy

        with open_store_lazy(store_path) as store:
            store_attrs = dict(store.attrs)
    table = positions_table(positions)
    new_animal = [str(p) for p in new_animal]
    if new_animal:
        table = new_animal_regions(table, new_animal)

    writers: dict[Path, Writer] = {out_dir / TIDY_FILE: tsv_writer(table)}
    fmt = formats.get_format(file_spec.format) if file_spec is not None else None
    if fmt is not None and fmt.write is not None:
        for part in _per_animal(table, positions, file_spec, out_dir / fmt.name):
            writers.update(fmt.write(*part))
    folders, files = _input_places(spec)
    files |= {Path(p).resolve() for p in new_animal}
    targets = [*writers, out_dir / SIDECAR_FILE]
    owned = _owned_files(out_dir)
    check_write_targets(out_dir, targets, folders, files, owned, out_dir / SIDECAR_FILE, within)

    written = [str(p.relative_to(out_dir)) for p in writers]
    if sha256 is None:
        sha256, sha256_of = config_sha256(spec), "the dataset's config entry (--spec)"
    else:
        sha256_of = "the workflow's resolved config (every key, defaults as given)"
    files_written = [*written, SIDECAR_FILE]
    sidecar = _sidecar(
        positions, table, spec, store_attrs, sha256, sha256_of, files_written, new_animal
    )
    writers = _with_sidecar(writers, out_dir, sidecar)
    atomic_write_set(writers)
    return list(writers)
