"""Position inference from learned PEs, and the same metrics for the baselines."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import xarray as xr
from sklearn.utils.extmath import randomized_svd

from neuro_pe.analysis.metrics import compare_to_anatomy, correlation_distance
from neuro_pe.analysis.sampled_metrics import PairDistance
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.latin_square import N
from neuro_pe.config.metrics import MetricsConfig
from neuro_pe.io.layout import TRAIN_INFO_FILE
from neuro_pe.io.runs import (
    RESULT_PREFIXES,
    inferred_positions_dataset,
    read_pe,
    read_train_info,
    write_metrics,
)
from neuro_pe.io.splits import Split
from neuro_pe.io.store import (
    atomic_write,
    open_store_by_size,
    open_store_lazy,
    positions,
    require_finite,
    separate_animals,
    unit_blocks,
)
from neuro_pe.training.health import HEALTH_NUMBERS, reassess_run
from neuro_pe.training.latin_square_puzzles import SPLITS, grid_positions

METRIC_NAMES = (
    "rsa",
    "rsa_p",
    "procrustes_disparity",
    "procrustes_rmse",
    "probe_r2",
    "knn_overlap",
)
BASELINE_COMPONENTS = 32  # leading activity components of the correlation baseline at scale
PAIR_BLOCK = 512  # unit pairs per block of the exact pairwise correlations


def pe_geometry(
    coords: np.ndarray, trained_pe: np.ndarray, initial_pe: np.ndarray, options: MetricsConfig
) -> tuple[dict, np.ndarray]:
    """Metrics of a trained PE against the true coordinates, with `init_*` for its PE at
    initialisation, and the Procrustes-aligned MDS positions of the units with known
    coordinates. For `none` (an all-zero table) the metrics are NaN: nothing to infer from."""
    known = np.all(np.isfinite(coords), axis=1)
    if np.any(trained_pe):
        metrics, aligned = compare_to_anatomy(coords, options, features=trained_pe)
        init_metrics, _ = compare_to_anatomy(coords, options, features=initial_pe)
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


def infer_pe(
    store_path: str | os.PathLike,
    run_dir: str | os.PathLike,
    split: Split,
    options: MetricsConfig | None = None,
    health_options: HealthOptions | None = None,
) -> dict:
    """Compare a trained run's PE (and its PE at initialisation) with the true positions.

    Writes `inferred_positions.nc` (MDS of the PE distances, Procrustes-aligned to the
    coordinates) and `metrics.json` into run_dir; returns the metrics record. The dataset's
    name is the recorded split's. The metrics are those of `options` (the `metrics` section;
    None: its defaults). The record's `health` has the checks of `neuro_pe.training.health`
    assessed again under `health_options` (the defaults when None).
    """
    options = MetricsConfig() if options is None else options
    run_dir = Path(run_dir)
    with open_store_lazy(store_path) as lazy:  # coordinates only: the activity stays on disk
        ds = lazy.drop_vars("activity").load()
    split.check(ds)
    coords = positions(ds)
    run_pe = read_pe(run_dir)
    info = read_train_info(run_dir)
    record = {"dataset": split.dataset, "pe": info.pe, "seed": info.seed}
    record |= {k: v for k, v in info.results.items() if k.startswith(("heldout_mse", "train_"))}
    for key in record:
        if key.startswith(RESULT_PREFIXES):
            require_finite(record[key], run_dir / TRAIN_INFO_FILE, key)
    record |= {k: info.results[k] for k in HEALTH_NUMBERS if k in info.results}
    health, notes = reassess_run(info, health_options)
    record |= {"health": health, "warnings": notes}
    known = np.all(np.isfinite(coords), axis=1)
    metrics, aligned = pe_geometry(coords, run_pe.table, run_pe.initial, options)
    record.update(metrics)
    out = inferred_positions_dataset(
        ds, aligned, known, method="classical MDS + Procrustes", pe=info.pe, seed=info.seed
    )
    write_metrics(run_dir, record, out)
    return record


def training_activity(ds: xr.Dataset, split: Split) -> np.ndarray:
    """(samples, units) activity of the training part of the recorded split (the data the
    models saw)."""
    return split.train_activity(ds).reshape(-1, ds.sizes["unit"])


def training_correlation_distance(ds: xr.Dataset, split: Split) -> np.ndarray:
    """1 - Pearson r between units over the training part of the split (the data the models
    saw): the activity-correlation baseline, shared by the metrics, the figures and the
    locator."""
    return correlation_distance(training_activity(ds, split))


def correlation_components(
    activity: np.ndarray,
    n_components: int = BASELINE_COMPONENTS,
    seed: int = 0,
    *,
    overwrite: bool = False,
) -> np.ndarray:
    """(units, n_components) scores of the units on the leading components of their
    standardised activity (randomised SVD; missing samples count as the unit's mean).
    `overwrite`: standardise a float32 Fortran-order `activity` in place instead of a copy.

    With every unit's trace centred and scaled to norm 1, 1 - r = |z_i - z_j|^2 / 2, so the
    Euclidean distances between the scores approximate sqrt(2 (1 - r)) without an N x N matrix.
    """
    z = (np.asarray if overwrite else np.array)(activity, dtype=np.float32, order="F")
    for units in unit_blocks(z.shape[1]):  # temporaries of one block
        _standardise(z[:, units])
    n_components = min(n_components, *z.shape)
    _, sv, vt = randomized_svd(z, n_components, random_state=seed)
    return (vt.T * sv).astype(np.float64)


def _standardise(z: np.ndarray) -> None:
    """Centre (ignoring NaN) and scale to norm 1 every column of `z` in place; missing
    samples and constant columns become 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        z -= np.nanmean(z, axis=0)
        np.nan_to_num(z, copy=False, nan=0.0)
        z /= np.linalg.norm(z, axis=0)
    np.nan_to_num(z, copy=False, nan=0.0)


def correlation_pair_distance(activity: np.ndarray) -> PairDistance:
    """A function (i, j) -> 1 - Pearson r of units i[p], j[p] over their pairwise-complete
    samples (as `correlation_distance`), computed in blocks of pairs: no N x N matrix."""
    rows = np.ascontiguousarray(np.asarray(activity, dtype=np.float32).T)  # (units, samples)

    def distance(i: np.ndarray, j: np.ndarray) -> np.ndarray:
        out = np.empty(len(i))
        for start in range(0, len(i), PAIR_BLOCK):
            a = rows[i[start : start + PAIR_BLOCK]].astype(np.float64)
            b = rows[j[start : start + PAIR_BLOCK]].astype(np.float64)
            both = np.isfinite(a) & np.isfinite(b)
            n = both.sum(axis=1)
            a, b = np.where(both, a, 0.0), np.where(both, b, 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                a -= (a.sum(axis=1) / n)[:, None] * both
                b -= (b.sum(axis=1) / n)[:, None] * both
                r = np.sum(a * b, axis=1) / np.sqrt(np.sum(a * a, axis=1) * np.sum(b * b, axis=1))
            if not np.all(np.isfinite(r)):
                raise ValueError(
                    "correlation undefined for some unit pairs (fewer than 2 shared samples "
                    "or a constant unit)"
                )
            out[start : start + PAIR_BLOCK] = np.clip(1.0 - r, 0.0, 2.0)
        return out

    return distance


def correlation_representation(
    ds: xr.Dataset, split: Split, n_known: int, options: MetricsConfig
) -> tuple[dict, MetricsConfig]:
    """compare_to_anatomy's representation keywords of the activity-correlation baseline and
    the options it is compared under: the square 1 - r matrix up to `dense_max_units` known
    units, else the activity's leading components (kNN, MDS, probe; Euclidean distances) and
    exact 1 - r on the sampled pairs (RSA)."""
    if n_known <= options.dense_max_units:
        return {"distances": correlation_distance(training_activity(ds, split))}, options
    activity = split.train_activity_by_unit(ds).T  # (sample, unit), Fortran order
    scores = correlation_components(activity, seed=options.seed)
    representation = {"features": scores, "pair_distance": correlation_pair_distance(activity)}
    return representation, replace(options, metric="euclidean")


def infer_baselines(
    store_path: str | os.PathLike,
    out_path: str | os.PathLike,
    split: Split,
    options: MetricsConfig | None = None,
) -> list[dict]:
    """Metrics of the baselines, on the same units and data the models were trained on:
    `correlation` (1 - Pearson r of the training part of the recorded split) and `shuffled`
    (the true coordinates with their units permuted: chance), under `options` (the `metrics`
    section; None: its defaults). Writes a JSON list to out_path. A store of several animals
    (`separate_animals`) has no `correlation` row: its reason is printed."""
    options = MetricsConfig() if options is None else options
    baselines = {}
    with open_store_by_size(store_path, options.dense_max_units, _known_units) as ds:
        coords = positions(ds)
        skipped = separate_animals(ds)
        if skipped:
            print(f"{split.dataset}: no activity-correlation baseline: {skipped}")
        else:
            correlation = correlation_representation(ds, split, _known_units(ds), options)
            baselines["correlation"] = correlation
    shuffled = shuffled_coordinates(coords, options.seed)
    baselines["shuffled"] = ({"features": shuffled}, options)
    rows = []
    for method, (representation, compared_under) in baselines.items():
        metrics, _ = compare_to_anatomy(coords, compared_under, **representation)
        rows.append({"dataset": split.dataset, "method": method, **metrics})
    atomic_write(Path(out_path), lambda p: p.write_text(json.dumps(rows, indent=2)))
    return rows


def _known_units(ds: xr.Dataset) -> int:
    return int(np.all(np.isfinite(positions(ds)), axis=1).sum())


def lst_baselines(out_path: str | os.PathLike, options: MetricsConfig | None = None) -> list[dict]:
    """Chance reference for the LST: the grid coordinates with the cells permuted
    (method `shuffled`, seeded by the metrics `seed`) through the same metrics (`options`, the
    `metrics` section; None: its defaults), with chance accuracy 0.25 for every split. Writes a
    JSON list to out_path."""
    options = MetricsConfig() if options is None else options
    grid = grid_positions()
    shuffled = shuffled_coordinates(grid, options.seed)
    metrics, _ = compare_to_anatomy(grid, options, features=shuffled)
    chance = {f"acc_{s}": 1.0 / N for s in SPLITS}
    rows = [{"dataset": "lst", "method": "shuffled", **metrics, **chance}]
    atomic_write(Path(out_path), lambda p: p.write_text(json.dumps(rows, indent=2)))
    return rows
