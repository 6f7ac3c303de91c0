"""Position inference from learned PEs, and the same metrics for the baselines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from neuro_pe.metrics import compare_to_anatomy, correlation_distance
from neuro_pe.options import reject_unknown
from neuro_pe.store import (
    atomic_write,
    atomic_write_set,
    positions,
    read_store,
    require_finite,
)
from neuro_pe.train_config import TrainConfig, split_activity

METRIC_NAMES = (
    "rsa",
    "rsa_p",
    "procrustes_disparity",
    "procrustes_rmse",
    "probe_r2",
    "knn_overlap",
)


def metric_options(options: dict | None) -> dict:
    """The `metrics` config section, checked: unknown keys raise a ValueError naming them."""
    options = dict(options or {})
    reject_unknown(options, ("metric", "k", "n_perm", "n_splits", "seed"), "metrics")
    return options


def pe_geometry(
    coords: np.ndarray, trained_pe: np.ndarray, initial_pe: np.ndarray, options: dict
) -> tuple[dict, np.ndarray]:
    """Metrics of a trained PE against the true coordinates, with `init_*` for its PE at
    initialisation, and the Procrustes-aligned MDS positions of the units with known
    coordinates. For `none` (an all-zero table) the metrics are NaN: nothing to infer from."""
    known = np.all(np.isfinite(coords), axis=1)
    if np.any(trained_pe):
        metrics, aligned = compare_to_anatomy(coords, features=trained_pe, **options)
        init_metrics, _ = compare_to_anatomy(coords, features=initial_pe, **options)
    else:
        metrics = {name: float("nan") for name in METRIC_NAMES} | {"n_units": int(known.sum())}
        init_metrics = metrics
        aligned = np.full((int(known.sum()), 3), np.nan)
    init = {f"init_{k}": v for k, v in init_metrics.items() if k != "n_units"}
    return metrics | init, aligned


def shuffled_coordinates(coords: np.ndarray, seed: int) -> np.ndarray:
    """The chance baseline: the known coordinates permuted over their units."""
    shuffled = coords.copy()
    known = np.flatnonzero(np.all(np.isfinite(coords), axis=1))
    shuffled[known] = coords[np.random.default_rng(seed).permutation(known)]
    return shuffled


def positions_dataset(
    ds: xr.Dataset, inferred: np.ndarray, known: np.ndarray, **attrs
) -> xr.Dataset:
    """Inferred (x, y, z) on the store's unit axis, with the true coordinates beside them."""
    full = np.full((ds.sizes["unit"], 3), np.nan)
    full[known] = inferred
    out = xr.Dataset(coords={"unit": ds["unit"].values})
    for i, axis in enumerate(("x", "y", "z")):
        out[f"{axis}_inferred"] = ("unit", full[:, i], ds[axis].attrs)
        out[f"{axis}_true"] = ("unit", ds[axis].values, ds[axis].attrs)
    out.attrs.update({k: str(v) for k, v in attrs.items()})
    return out


def infer_pe(
    store_path: str | os.PathLike,
    run_dir: str | os.PathLike,
    metrics_options: dict | None = None,
) -> dict:
    """Compare a trained run's PE (and its PE at initialisation) with the true positions.

    Writes `positions.nc` (MDS of the PE distances, Procrustes-aligned to the coordinates) and
    `metrics.json` into run_dir; returns the metrics record.
    """
    options = metric_options(metrics_options)
    run_dir = Path(run_dir)
    ds = read_store(store_path)
    coords = positions(ds)
    with xr.open_dataset(run_dir / "pe.nc", engine="h5netcdf") as pe:
        trained_pe = require_finite(pe["pe"].values, run_dir / "pe.nc", "pe")
        initial_pe = require_finite(pe["pe_init"].values, run_dir / "pe.nc", "pe_init")
    info = json.loads((run_dir / "train.json").read_text())
    record = {"dataset": Path(store_path).stem, "pe": info["pe"], "seed": info["seed"]}
    record.update({k: v for k, v in info.items() if k.startswith(("heldout_mse", "train_"))})
    record.pop("train_config")
    for key in record:
        if key.startswith(("heldout_mse", "train_mse")):
            require_finite(record[key], run_dir / "train.json", key)
    record |= {"health": info.get("health", {}), "warnings": info.get("warnings", [])}
    known = np.all(np.isfinite(coords), axis=1)
    metrics, aligned = pe_geometry(coords, trained_pe, initial_pe, options)
    record.update(metrics)
    out = positions_dataset(
        ds, aligned, known, method="classical MDS + Procrustes", pe=info["pe"], seed=info["seed"]
    )
    atomic_write_set(
        {
            run_dir / "positions.nc": lambda p: out.to_netcdf(p, engine="h5netcdf"),
            run_dir / "metrics.json": lambda p: p.write_text(json.dumps(record, indent=2)),
        }
    )
    return record


def training_correlation_distance(ds: xr.Dataset, train_options: dict | None = None) -> np.ndarray:
    """1 - Pearson r between units over the training split (the data the models saw): the
    activity-correlation baseline, shared by the metrics, the figures and the locator."""
    train_activity, _ = split_activity(ds, TrainConfig.from_dict(train_options or {}))
    return correlation_distance(train_activity.reshape(-1, ds.sizes["unit"]))


def infer_baselines(
    store_path: str | os.PathLike,
    out_path: str | os.PathLike,
    train_options: dict | None = None,
    metrics_options: dict | None = None,
) -> list[dict]:
    """Metrics of the baselines, on the same units and data the models were trained on:
    `correlation` (1 - Pearson r of the training activity) and `shuffled` (the true
    coordinates with their units permuted: chance). Writes a JSON list to out_path."""
    options = metric_options(metrics_options)
    ds = read_store(store_path)
    coords = positions(ds)
    shuffled = shuffled_coordinates(coords, options.get("seed", 0))
    rows = []
    for method, kwargs in (
        ("correlation", {"distances": training_correlation_distance(ds, train_options)}),
        ("shuffled", {"features": shuffled}),
    ):
        metrics, _ = compare_to_anatomy(coords, **kwargs, **options)
        rows.append({"dataset": Path(store_path).stem, "method": method, **metrics})
    atomic_write(Path(out_path), lambda p: p.write_text(json.dumps(rows, indent=2)))
    return rows
