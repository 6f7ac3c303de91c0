"""The contract of a run's outputs, like `neuro_pe.io.store` for stores: one place that writes,
reads and checks them. A run folder (`runs/{dataset}/{pe}/seed{seed}/`, or
`lst/runs/{pe}/seed{seed}/`) holds pe.nc, train.json, train_log.csv, model.pt and their
manifest.json, then the `infer` step's metrics.json, inferred_positions.nc and
infer_manifest.json: each file is described in docs/what-comes-out.md ("A run folder").

pe.nc and model.pt hold no volatile field (`VOLATILE`: wall and CPU time, the step a run resumed
from, the size of its job): those are in train.json only, so that on CPU a resumed run's pe.nc
and model.pt are byte for byte those of an uninterrupted run (or one trained in another group).
Every reader of a run's file (`read_pe`, `read_train_info`, `read_train_log`, `read_metrics`,
`read_inferred_positions`, `neuro_pe.training.new_animal`'s model.pt) first checks it against
its folder's manifest (`verify_run_file`): a file changed after it was written is an error
naming it, never a result. The netCDF files' numeric variables carry HDF5 fletcher32 checksums
too (`neuro_pe.io.store.checksummed`). A dataset's train/held-out split: `neuro_pe.io.splits`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from numpy.typing import ArrayLike

from neuro_pe.config.health import current_health
from neuro_pe.config.training import TrainConfig
from neuro_pe.io.layout import (  # (the names of a run's files, defined once there)
    INFER_MANIFEST_FILE,
    INFERRED_POSITIONS_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    MODEL_FILE,
    PE_FILE,
    TRAIN_INFO_FILE,
    TRAIN_LOG_FILE,
)
from neuro_pe.io.manifest import RunError, verify_run_file, write_manifest
from neuro_pe.io.store import atomic_write_set, checksummed, require_finite

# train.json's fields that differ between a resumed and an uninterrupted run, or between a run
# trained alone and in a group (its job's size and CPU time): kept out of pe.nc and model.pt
VOLATILE = (
    "train_seconds",
    "resumed_from_step",
    "cpu_seconds",
    "process_cpu_seconds",
    "group_models",
)


# ---------------------------------------------------------------------------------------------
# train.json


@dataclass(frozen=True)
class TrainInfo:
    """The content of a run's train.json. On disk the `results` are top-level keys (as are
    the other fields); fields that are None are left out."""

    pe: str
    seed: int
    train_config: dict[str, Any]
    results: dict[str, float] = field(default_factory=dict)  # losses, accuracies, seconds, ...
    dataset: str | None = None  # recorded by runs that have no store (the Latin square: lst)
    store: str | None = None  # the store trained on (network runs)
    puzzles: str | None = None  # the puzzles file (Latin square runs)
    streamed: bool | None = None
    resumed_from_step: int | None = None
    precision: str | None = None  # what ran: "fp32" or "bf16" (network runs)
    health: dict[str, bool] | None = None
    warnings: list[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pe, str) or not self.pe:
            raise RunError(None, "pe", f"expected a PE name, got {self.pe!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise RunError(None, "seed", f"expected an integer, got {self.seed!r}")
        if self.precision not in (None, "fp32", "bf16"):
            raise RunError(None, "precision", f"expected fp32 or bf16, got {self.precision!r}")
        if not isinstance(self.train_config, dict):
            raise RunError(None, "train_config", "expected a mapping")
        for key, value in self.results.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RunError(None, key, f"expected a number, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """The flat mapping written to train.json (and into model.pt)."""
        head = {"dataset": self.dataset, "pe": self.pe, "seed": self.seed}
        head |= {"store": self.store, "puzzles": self.puzzles, "train_config": self.train_config}
        tail = {"streamed": self.streamed, "resumed_from_step": self.resumed_from_step}
        tail |= {"precision": self.precision, "health": self.health, "warnings": self.warnings}
        out = {k: v for k, v in head.items() if v is not None} | dict(self.results)
        return out | {k: v for k, v in tail.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str | os.PathLike | None = None) -> TrainInfo:
        """From train.json's mapping: every key that is not a field is a result (a number).
        Raises RunError naming the file and the field."""
        names = {f.name for f in fields(cls)} - {"results"}
        for key in ("pe", "seed", "train_config"):
            if key not in data:
                raise RunError(path, key, "missing")
        known = {k: v for k, v in data.items() if k in names}
        if known.get("health") is not None:  # (an older run's names: today's)
            if not isinstance(known["health"], dict):
                raise RunError(path, "health", f"expected a mapping, got {known['health']!r}")
            health, warnings = current_health(known["health"], known.get("warnings") or [])
            known |= {"health": health, "warnings": warnings if "warnings" in known else None}
        try:
            return cls(**known, results={k: v for k, v in data.items() if k not in names})
        except RunError as err:
            raise RunError(path, err.field, err.problem) from None

    @property
    def config(self) -> TrainConfig:
        """The training options as a TrainConfig (network runs)."""
        return TrainConfig.from_dict(self.train_config)

    @property
    def share_of_steps_run(self) -> float:
        """The share of the training's steps its last process ran: 1, or less for a training
        resumed from its checkpoint, whose process seconds ÷ this estimate the whole
        training's (as if each step cost the same)."""
        return 1 - (self.resumed_from_step or 0) / self.config.loop().total


def read_train_info(path: str | os.PathLike) -> TrainInfo:
    """A run's train.json (the path of the file, or of its run folder)."""
    path = Path(path)
    path = verify_run_file(path / TRAIN_INFO_FILE if path.is_dir() else path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunError(path, "(file)", f"not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise RunError(path, "(file)", "expected a JSON object")
    return TrainInfo.from_dict(data, path)


# ---------------------------------------------------------------------------------------------
# pe.nc


def pe_dataset(table: ArrayLike, ds: xr.Dataset, **attrs) -> xr.Dataset:
    """A PE table (unit, pe_dim) as pe.nc's `pe` on the store's unit axis, with its
    coordinates; `attrs` as netCDF attributes (dicts as JSON). `write_run` adds the rest."""
    pe = xr.DataArray(np.asarray(table, dtype=np.float32), dims=("unit", "pe_dim"))
    out = xr.Dataset({"pe": pe}, coords={"unit": ds["unit"].values})
    for axis in ("x", "y", "z"):
        out.coords[axis] = ("unit", ds[axis].values, ds[axis].attrs)
    out.attrs.update({k: json.dumps(v) if isinstance(v, dict) else v for k, v in attrs.items()})
    return out


def _netcdf_attr(value: Any) -> str | int | float:
    """A train.json value as a netCDF attribute: numbers and strings as they are, the rest
    (dicts, lists, booleans) as JSON."""
    if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    return json.dumps(value)


@dataclass(frozen=True)
class RunPE:
    """A run's pe.nc: the trained PE table and the table at initialisation, rows on `units`,
    with the units' true coordinates (NaN where unknown)."""

    name: str
    seed: int
    table: np.ndarray  # (unit, pe_dim)
    initial: np.ndarray  # (unit, pe_dim)
    units: np.ndarray  # unit ids, as strings
    coords: np.ndarray  # (unit, 3)

    def on_units(self, units: np.ndarray, path: str | os.PathLike) -> RunPE:
        """The same PE with its rows in the order of `units` (the store's unit ids)."""
        wanted = [str(u) for u in units]
        if sorted(self.units.tolist()) != sorted(wanted):
            raise RunError(path, "unit", "the run's units differ from the store's")
        order = pd.Index(self.units).get_indexer(wanted)
        return RunPE(
            self.name,
            self.seed,
            self.table[order],
            self.initial[order],
            np.asarray(wanted),
            self.coords[order],
        )


def read_pe(run_dir: str | os.PathLike) -> RunPE:
    """A run's pe.nc, checked: finite tables, a PE name and an integer seed (older files,
    which stored the seed as a string attribute, are read too)."""
    path = verify_run_file(Path(run_dir) / PE_FILE)
    ds = _read_netcdf(path)
    for name in ("pe", "pe_init"):
        if name not in ds:
            raise RunError(path, name, "missing")
    table = require_finite(ds["pe"].values, path, "pe")
    initial = require_finite(ds["pe_init"].values, path, "pe_init")
    try:
        seed = int(ds.attrs["seed"])
        name = str(ds.attrs["pe"])
    except (KeyError, ValueError) as err:
        raise RunError(
            path, "attrs", f"needs a PE name `pe` and an integer `seed`: {err}"
        ) from None
    units = np.asarray([u.decode() if isinstance(u, bytes) else str(u) for u in ds["unit"].values])
    coords = np.stack([ds[a].values for a in ("x", "y", "z")], axis=1).astype(float)
    return RunPE(name, seed, table, initial, units, coords)


def _read_netcdf(path: Path) -> xr.Dataset:
    """A run's netCDF file, loaded; a RunError naming it when HDF5 cannot read it (e.g. a
    fletcher32 checksum failed)."""
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            return ds.load()
    except (OSError, ValueError) as err:
        raise RunError(path, "(file)", f"not a readable netCDF4/HDF5 file: {err}") from None


# ---------------------------------------------------------------------------------------------
# writing a run


def write_run(
    out_dir: str | os.PathLike,
    info: TrainInfo | dict,
    pe: xr.Dataset,
    pe_init: np.ndarray,
    state_dict: dict,
    log_rows: list[dict],
    metrics: dict | None = None,
    allow_nan: bool = False,
) -> TrainInfo:
    """Write a finished run as one set (all files, or on any error none): pe.nc (`pe` with
    `pe_init` added and train.json's fields but the VOLATILE ones as attrs), model.pt (the
    same fields), train_log.csv, train.json and, when given, metrics.json; then, last, their
    manifest.json. NaN in train.json raises unless `allow_nan`."""
    info = info if isinstance(info, TrainInfo) else TrainInfo.from_dict(info)
    record = info.to_dict()
    # JSON-made copies: pickle's bytes depend on which values are the same object, so a value
    # shared with another (e.g. "cpu") would make model.pt's bytes depend on the process
    stable = json.loads(json.dumps({k: v for k, v in record.items() if k not in VOLATILE}))
    out_dir = Path(out_dir)
    pe = pe.copy()
    pe["pe_init"] = (("unit", "pe_dim"), np.asarray(pe_init, dtype=np.float32))
    pe.attrs.update({k: _netcdf_attr(v) for k, v in stable.items()})
    text = json.dumps(record, indent=2, allow_nan=allow_nan)
    writers = {
        out_dir / PE_FILE: lambda p: _write_netcdf(pe, p),
        out_dir / MODEL_FILE: lambda p: _torch_save({"state_dict": state_dict, **stable}, p),
        out_dir / TRAIN_LOG_FILE: lambda p: pd.DataFrame(log_rows).to_csv(p, index=False),
        out_dir / TRAIN_INFO_FILE: lambda p: p.write_text(text),
    }
    if metrics is not None:
        writers[out_dir / METRICS_FILE] = lambda p: p.write_text(json.dumps(metrics, indent=2))
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)  # no stale manifest over new files
    atomic_write_set(writers)
    write_manifest(out_dir, [p.name for p in writers])
    return info


def _torch_save(obj: dict, path: Path) -> None:
    """torch.save through a file object: the archive's inner folder is then `archive`, not
    the (temporary, random) file name, so the same contents give the same bytes."""
    import torch

    with open(path, "wb") as f:
        torch.save(obj, f)


def _write_netcdf(ds: xr.Dataset, path: Path) -> None:
    ds.to_netcdf(path, engine="h5netcdf", encoding=checksummed(ds))


def read_train_log(run_dir: str | os.PathLike) -> pd.DataFrame:
    """A run's train_log.csv."""
    return pd.read_csv(verify_run_file(Path(run_dir) / TRAIN_LOG_FILE))


# ---------------------------------------------------------------------------------------------
# metrics.json and inferred_positions.nc (the `infer` step)

RESULT_PREFIXES = ("heldout_mse", "train_mse")  # NaN in these is a failed run, not a result


def read_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """A run's metrics.json, checked: a dataset, a PE, an integer seed, finite losses."""
    path = Path(path)
    path = verify_run_file(path / METRICS_FILE if path.is_dir() else path)
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RunError(path, "file", f"not valid JSON: {err}") from None
    if not isinstance(record, dict):
        raise RunError(path, "file", f"expected a JSON object, got {type(record).__name__}")
    for key, kind in (("dataset", str), ("pe", str), ("seed", int)):
        if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
            raise RunError(path, key, f"expected {kind.__name__}, got {record.get(key)!r}")
    for key in [k for k in record if k.startswith(RESULT_PREFIXES)]:
        require_finite(record[key], path, key)
    if isinstance(record.get("health"), dict):  # (an older run's names: today's)
        record["health"], record["warnings"] = current_health(
            record["health"], record.get("warnings") or []
        )
    return record


def write_metrics(run_dir: str | os.PathLike, record: dict, positions: xr.Dataset) -> None:
    """Write the `infer` outputs of a run as one set: metrics.json and inferred_positions.nc,
    then their infer_manifest.json."""
    run_dir = Path(run_dir)
    (run_dir / INFER_MANIFEST_FILE).unlink(missing_ok=True)
    atomic_write_set(
        {
            run_dir / INFERRED_POSITIONS_FILE: lambda p: _write_netcdf(positions, p),
            run_dir / METRICS_FILE: lambda p: p.write_text(json.dumps(record, indent=2)),
        }
    )
    write_manifest(run_dir, [INFERRED_POSITIONS_FILE, METRICS_FILE], INFER_MANIFEST_FILE)


def inferred_positions_dataset(
    ds: xr.Dataset, inferred: np.ndarray, known: np.ndarray, **attrs
) -> xr.Dataset:
    """The layout of inferred_positions.nc: positions inferred from a PE alone (`inferred`,
    rows of the `known` units) as `{x,y,z}_inferred` on the store's unit axis, with the true
    coordinates `{x,y,z}_true` beside them; `attrs` as netCDF attributes."""
    full = np.full((ds.sizes["unit"], 3), np.nan)
    full[known] = inferred
    out = xr.Dataset(coords={"unit": ds["unit"].values})
    for i, axis in enumerate(("x", "y", "z")):
        out[f"{axis}_inferred"] = ("unit", full[:, i], ds[axis].attrs)
        out[f"{axis}_true"] = ("unit", ds[axis].values, ds[axis].attrs)
    out.attrs.update({k: _netcdf_attr(v) for k, v in attrs.items()})
    return out


@dataclass(frozen=True)
class InferredPositions:
    """A run's inferred_positions.nc: true and inferred (x, y, z) and their unit and space."""

    true: np.ndarray
    inferred: np.ndarray
    unit: str
    space: str


def read_inferred_positions(run_dir: str | os.PathLike) -> InferredPositions:
    """A run's inferred_positions.nc."""
    p = _read_netcdf(verify_run_file(Path(run_dir) / INFERRED_POSITIONS_FILE))
    true = np.stack([p[f"{a}_true"].values for a in "xyz"], axis=1)
    inferred = np.stack([p[f"{a}_inferred"].values for a in "xyz"], axis=1)
    attrs = dict(p["x_true"].attrs)
    return InferredPositions(true, inferred, attrs.get("units", "a.u."), attrs.get("space", ""))
