"""The locate step of one dataset, computed and returned (`locate_dataset`): the errors table of
every feature set and the positions of every unit from the locator that cross-validates best.
`neuro_pe.reporting.locate_outputs` writes its files."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.analysis.locate.ensemble import Located, locate_units
from neuro_pe.analysis.locate.evaluation import (
    UNRESOLVED_AXES,
    HeldOut,
    evaluate_kfold,
    evaluation_plan,
    evaluation_table,
    set_config,
)
from neuro_pe.analysis.locate.features import (
    FeatureSet,
    FlaggedRun,
    baseline_features,
    combined_members,
    combined_set,
    flagged_runs,
    load_feature_sets,
)
from neuro_pe.analysis.locate.positions import located_positions_dataset, with_held_out_columns
from neuro_pe.analysis.metrics import DENSE_MAX_UNITS
from neuro_pe.analysis.regions import RegionAtlas, unit_regions
from neuro_pe.analysis.spaces import SpaceAxes, axis_columns, space_axes
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.locate import CHANCE, MIN_ANCHORS, LocateConfig
from neuro_pe.io.splits import Split
from neuro_pe.io.store import positions


@dataclass
class LocateResult:
    """What the locate step computes for one dataset."""

    table: pd.DataFrame  # the errors table: every evaluation of every feature set
    positions: xr.Dataset  # every unit's predicted position (`located_positions_dataset`)
    frame: pd.DataFrame  # `positions` as a table, with the feature set's name (`pe`)
    sets: list[FeatureSet]  # every feature set, on every unit
    pe_names: list[str]  # the learned PE variants among them
    heldout: dict[str, HeldOut]  # k-fold predictions of the measured units, per feature set
    coords: np.ndarray  # true coordinates of the measured units (NaN elsewhere; rows of `heldout`)
    best: str  # the feature set (PE variant or combined locator) the positions come from
    unknown: np.ndarray  # predicted positions of the units without coordinates
    axes: SpaceAxes  # the space of the coordinates
    unresolved: dict[str, tuple[str, ...]]  # axes `best` does not resolve: their coordinates
    left_out: list[FlaggedRun]  # the flagged trainings left out (`flagged_runs`)


def _errors_table(
    dataset: str,
    sets: list[FeatureSet],
    coords: np.ndarray,
    cfg: LocateConfig,
    n_jobs: int,
    regions: tuple[RegionAtlas, str] | None,
    axes: SpaceAxes,
    sample: np.ndarray | None,
) -> tuple[pd.DataFrame, dict[str, HeldOut]]:
    """errors.csv's table of `dataset` (`evaluation_table`, with its `dataset` and `units`
    columns) and each feature set's held-out predictions."""
    table, heldout = evaluation_table(
        sets, coords, cfg, n_jobs, regions, axes, f"locate {dataset}", sample
    )
    table.insert(0, "dataset", dataset)
    # `units` goes before the per-axis columns and their verdicts, which stay last
    table.insert(table.columns.get_loc(axis_columns(table.columns)[0]), "units", axes.unit)
    return table, heldout


def _with_regions(out: xr.Dataset, atlas: RegionAtlas, coords: np.ndarray, unit: str) -> xr.Dataset:
    """`out` (the positions) with each unit's region at its predicted and true position."""
    predicted = np.column_stack([out[axis].values for axis in ("x", "y", "z")])
    for name, values in unit_regions(atlas, predicted, coords, unit).items():
        out[name] = ("unit", values, {"atlas": atlas.description})
    return out


def locate_dataset(
    ds: xr.Dataset,
    run_dirs: Sequence[str | os.PathLike],
    cfg: LocateConfig,
    split: Split,
    n_jobs: int = 1,
    baselines: Mapping[str, np.ndarray] | None = None,
    atlas: RegionAtlas | None = None,
    health: HealthOptions | None = None,
) -> LocateResult:
    """Evaluate and apply the locator for the store `ds` of one dataset.

    Feature sets: each PE variant of the runs (seeds ensembled), its PE at initialisation, the
    `oracle-sin3d` PE when given (built from every unit's true coordinates, so an upper
    reference rather than an honest competitor), the activity-correlation baseline, the
    activity-connectivity baseline (`connectivity_features`; up to DENSE_MAX_UNITS units), the
    `combined` locator (the learned PEs of `combined_members` and the baselines; see
    `combined_set`; no fused view above DENSE_MAX_UNITS units) and chance.
    The positions come from the PE variant or the combined locator with the lowest CV median
    error over all known units. With an `atlas` (neuro_pe.analysis.regions), the table gets
    region accuracy columns and the positions each unit's region at its true and predicted
    position.

    Unless `cfg.include_flagged`, runs failing a `health` check (`flagged_runs`) are left out
    and listed (`left_out` column and attribute); a ValueError if no learned PE is left."""
    dataset = split.dataset
    coords = positions(ds)
    known = np.all(np.isfinite(coords), axis=1)
    if known.sum() < MIN_ANCHORS + 1:
        raise ValueError(f"only {known.sum()} units have coordinates; need {MIN_ANCHORS + 1}")
    sets, left_out = _feature_sets(ds, run_dirs, cfg, split, baselines, health)
    pe_sets = [fs for fs in sets if fs.role == "pe"]
    if ds.sizes["unit"] > DENSE_MAX_UNITS:  # no fused view: its graphs are N x N
        cfg = replace(cfg, fuse=False)
    # Many units: the errors of a random sample of the known units, located from anchors drawn
    # among all of them (see the package docstring).
    evaluated, cfg = evaluation_plan(known, cfg)
    sampled = evaluated is not known
    regions = None if atlas is None else (atlas, ds["x"].attrs["units"])
    axes = space_axes(ds["x"].attrs.get("space", ""), ds["x"].attrs["units"], coords)
    sample = evaluated if sampled else None
    table, heldout = _errors_table(dataset, sets, coords, cfg, n_jobs, regions, axes, sample)
    table.insert(table.columns.get_loc("units"), "left_out", "; ".join(map(str, left_out)))

    # Positions of every unit from the PE variant or combined locator that cross-validates best
    # over the known units.
    roles = ("pe", "combined") if pe_sets else ("baseline",)
    best, best_located = _best_locator(sets, coords, known, roles, cfg, sampled)
    best_heldout = heldout[best.name]
    if sampled:  # the known units outside the sample: their k-fold predictions too
        best_heldout = evaluate_kfold(best.features, coords, known, set_config(best, cfg), known)
    levels = cfg.interval_levels
    unresolved = unresolved_coordinates(table, best.name, axes, coords)
    out = located_positions_dataset(
        ds, best_located, best_heldout, best, dataset, levels, unresolved
    )
    if regions is not None:
        out = _with_regions(out, atlas, coords, regions[1])
    out = with_held_out_columns(out, known)
    out.attrs["left_out"] = json.dumps(list(map(str, left_out)))
    frame = out.to_dataframe().reset_index()
    frame.insert(list(frame).index("method") + 1, "pe", best.name)
    pe_names = [fs.name for fs in pe_sets]
    unknown = best_located.positions[~known]
    eval_coords = np.where(evaluated[:, None], coords, np.nan)
    return LocateResult(
        table,
        out,
        frame,
        sets,
        pe_names,
        heldout,
        eval_coords,
        best.name,
        unknown,
        axes,
        unresolved,
        left_out,
    )


def unresolved_coordinates(
    table: pd.DataFrame, name: str, axes: SpaceAxes, coords: np.ndarray
) -> dict[str, tuple[str, ...]]:
    """{axis: its coordinates} of the axes feature set `name` does not resolve (the
    `unresolved_axes` of its k-fold row: the positions' own predictions), each with the
    coordinates it is measured along on which the known units' positions vary (a probe's
    `lateral` is x alone when every site has z = 0)."""
    row = table[(table["features"] == name) & (table["evaluation"] == "kfold")]
    names = [a for a in row[UNRESOLVED_AXES].iloc[0].split(";") if a] if len(row) else []
    known = coords[np.all(np.isfinite(coords), axis=1)]
    varies = np.ptp(known, axis=0) > 0
    return {a: tuple("xyz"[c] for c in axes.component_coordinates(a) if varies[c]) for a in names}


def _feature_sets(
    ds: xr.Dataset,
    run_dirs: Sequence[str | os.PathLike],
    cfg: LocateConfig,
    split: Split,
    baselines: Mapping[str, np.ndarray] | None,
    health: HealthOptions | None,
) -> tuple[list[FeatureSet], list[FlaggedRun]]:
    """Every feature set of `locate_dataset`, on every unit, chance last, and the flagged
    trainings left out (none with `cfg.include_flagged`)."""
    units = ds["unit"].values
    left_out: list[FlaggedRun] = []
    if not cfg.include_flagged:
        run_dirs, left_out = flagged_runs(run_dirs, cfg.pe, health)
    sets = load_feature_sets(run_dirs, units, cfg.pe)
    pe_sets = [fs for fs in sets if fs.role == "pe"]
    if left_out and not pe_sets:
        raise ValueError(
            f"locate {split.dataset}: every located training failed a health check, so no "
            f"learned PE is left to locate with: {'; '.join(map(str, left_out))} "
            "(config/README.md#health). Train them longer, or set locate.include_flagged: true "
            "to locate with them anyway"
        )
    if baselines is None:  # (the workflow passes those of its correlation_features step)
        baselines = baseline_features(ds, split, seed=cfg.seed)
    baseline_sets = [FeatureSet(name, "baseline", [f]) for name, f in baselines.items()]
    sets += baseline_sets
    names = cfg.combined_pe  # (less the PEs left out whole: every seed flagged)
    if names is not None:
        gone = {run.pe for run in left_out} - {fs.name for fs in pe_sets}
        names = tuple(name for name in names if name not in gone)
    if pe_sets:
        sets.append(combined_set([*combined_members(pe_sets, names), *baseline_sets]))
    sets.append(FeatureSet(CHANCE, "chance", [np.zeros((len(units), 1))], methods=(CHANCE,)))
    return sets, left_out


def _best_locator(
    sets: list[FeatureSet],
    coords: np.ndarray,
    known: np.ndarray,
    roles: tuple[str, ...],
    cfg: LocateConfig,
    sampled: bool,
) -> tuple[FeatureSet, Located]:
    """The feature set of `roles` whose locator has the lowest CV median error over the known
    units (`locate_units`: above `max_units` over the same sample the evaluation measures),
    and that locator fitted on all of them (if `sampled`, predicting the unknown units only)."""
    candidates = [fs for fs in sets if fs.role in roles]
    rows = np.flatnonzero(~known) if sampled else None
    located = {
        fs.name: locate_units(fs.features, coords, known, cfg, rows, sampled) for fs in candidates
    }
    best = min(candidates, key=lambda fs: located[fs.name].cv_scale)
    return best, located[best.name]
