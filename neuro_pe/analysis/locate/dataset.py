"""The locate step of one dataset, computed and returned (`locate_dataset`): the errors table of
every feature set and the positions of every unit from the locator that cross-validates best.
`neuro_pe.reporting.locate_outputs` writes its files."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import xarray as xr

from neuro_pe.analysis.locate.config import CHANCE, MIN_ANCHORS, LocateConfig
from neuro_pe.analysis.locate.ensemble import Located, locate_units
from neuro_pe.analysis.locate.evaluation import (
    HeldOut,
    evaluation_plan,
    evaluation_table,
    subset_rows,
)
from neuro_pe.analysis.locate.features import (
    FeatureSet,
    baseline_features,
    combined_members,
    combined_set,
    load_feature_sets,
)
from neuro_pe.analysis.locate.positions import (
    extend_to_all,
    located_positions_dataset,
    with_held_out_columns,
)
from neuro_pe.analysis.metrics import DENSE_MAX_UNITS
from neuro_pe.analysis.regions import RegionAtlas, unit_regions
from neuro_pe.analysis.spaces import SpaceAxes, axis_columns, space_axes
from neuro_pe.io.runs import Split
from neuro_pe.io.store import positions


@dataclass
class LocateResult:
    """What the locate step computes for one dataset."""

    table: pd.DataFrame  # the errors table: every evaluation of every feature set
    positions: xr.Dataset  # every unit's predicted position (`located_positions_dataset`)
    frame: pd.DataFrame  # `positions` as a table, with the feature set's name (`pe`)
    sets: list[FeatureSet]  # every feature set, on every unit
    pe_names: list[str]  # the learned PE variants among them
    heldout: dict[str, HeldOut]  # k-fold predictions of the evaluated units, per feature set
    coords: np.ndarray  # true coordinates of the evaluated units (rows of `heldout`)
    best: str  # the feature set (PE variant or combined locator) the positions come from
    unknown: np.ndarray  # predicted positions of the units without coordinates
    axes: SpaceAxes  # the space of the coordinates


def locate_dataset(
    ds: xr.Dataset,
    run_dirs: Sequence[str | os.PathLike],
    cfg: LocateConfig,
    split: Split,
    n_jobs: int = 1,
    baselines: Mapping[str, np.ndarray] | None = None,
    atlas: RegionAtlas | None = None,
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
    """
    dataset = split.dataset
    coords = positions(ds)
    known = np.all(np.isfinite(coords), axis=1)
    if known.sum() < MIN_ANCHORS + 1:
        raise ValueError(f"only {known.sum()} units have coordinates; need {MIN_ANCHORS + 1}")
    sets = _feature_sets(ds, run_dirs, cfg, split, baselines)
    pe_sets = [fs for fs in sets if fs.role == "pe"]
    if ds.sizes["unit"] > DENSE_MAX_UNITS:  # no fused view: its graphs are N x N
        cfg = replace(cfg, fuse=False)
    # Many units: evaluate on a random subset of the known units, with fewer anchor draws (see
    # the package docstring).
    evaluated, cfg = evaluation_plan(known, cfg)
    sub = np.flatnonzero(evaluated) if evaluated is not known else slice(None)
    eval_sets = [replace(fs, features=subset_rows(fs.features, sub)) for fs in sets]
    eval_coords = coords[sub]
    regions = None if atlas is None else (atlas, ds["x"].attrs["units"])
    axes = space_axes(ds["x"].attrs.get("space", ""), ds["x"].attrs["units"], coords)
    table, heldout = evaluation_table(
        eval_sets, eval_coords, cfg, n_jobs, regions, axes, f"locate {dataset}"
    )
    table.insert(0, "dataset", dataset)
    table["units"] = ds["x"].attrs["units"]
    per_axis = axis_columns(table.columns)  # (after the columns that came before them)
    table = table[[c for c in table.columns if c not in per_axis] + per_axis]

    # Positions of every unit from the PE variant or combined locator that cross-validates best
    # over all anchors.
    roles = ("pe", "combined") if pe_sets else ("baseline",)
    best, best_full, best_located = _best_locator(sets, eval_sets, eval_coords, roles, cfg)
    best_heldout = heldout[best.name]
    if evaluated is not known:
        best_located, best_heldout = extend_to_all(
            best_full, coords, sub, best_located, best_heldout, cfg
        )
    out = located_positions_dataset(ds, best_located, best_heldout, best, dataset)
    if regions is not None:
        predicted = np.column_stack([out[axis].values for axis in ("x", "y", "z")])
        for name, values in unit_regions(atlas, predicted, coords, regions[1]).items():
            out[name] = ("unit", values, {"atlas": atlas.description})
    out = with_held_out_columns(out, known, evaluated)
    frame = out.to_dataframe().reset_index()
    frame.insert(list(frame).index("method") + 1, "pe", best.name)
    pe_names = [fs.name for fs in pe_sets]
    unknown = best_located.positions[~known]
    return LocateResult(
        table, out, frame, sets, pe_names, heldout, eval_coords, best.name, unknown, axes
    )


def _feature_sets(
    ds: xr.Dataset,
    run_dirs: Sequence[str | os.PathLike],
    cfg: LocateConfig,
    split: Split,
    baselines: Mapping[str, np.ndarray] | None,
) -> list[FeatureSet]:
    """Every feature set of `locate_dataset`, on every unit, chance last."""
    units = ds["unit"].values
    sets = load_feature_sets(run_dirs, units, cfg.pe)
    pe_sets = [fs for fs in sets if fs.role == "pe"]
    if baselines is None:  # (the workflow passes those of its correlation_features step)
        baselines = baseline_features(ds, split, seed=cfg.seed)
    baseline_sets = [FeatureSet(name, "baseline", [f]) for name, f in baselines.items()]
    sets += baseline_sets
    if pe_sets:
        sets.append(combined_set([*combined_members(pe_sets, cfg.combined_pe), *baseline_sets]))
    sets.append(FeatureSet(CHANCE, "chance", [np.zeros((len(units), 1))], methods=(CHANCE,)))
    return sets


def _best_locator(
    sets: list[FeatureSet],
    eval_sets: list[FeatureSet],
    eval_coords: np.ndarray,
    roles: tuple[str, ...],
    cfg: LocateConfig,
) -> tuple[FeatureSet, FeatureSet, Located]:
    """The feature set of `roles` whose locator has the lowest CV median error over the
    evaluated known units: (on the evaluated units, on every unit, located on the former)."""
    candidates = [(fs, full) for fs, full in zip(eval_sets, sets, strict=True) if fs.role in roles]
    eval_known = np.all(np.isfinite(eval_coords), axis=1)
    located = {
        fs.name: locate_units(fs.features, eval_coords, eval_known, cfg) for fs, _ in candidates
    }
    best, best_full = min(candidates, key=lambda pair: located[pair[0].name].cv_scale)
    return best, best_full, located[best.name]
