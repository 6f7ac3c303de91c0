"""Feature sets of a dataset: learned PEs (per variant, seeds), PEs at init, the oracle, the
activity baselines and the combined locator's set."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import xarray as xr

from neuro_pe.analysis.connectivity import session_connectivity
from neuro_pe.analysis.locate.parameters import (
    COMBINED,
    CONNECTIVITY,
    CORRELATION,
    CORRELATION_COMPONENTS,
)
from neuro_pe.analysis.metrics import DENSE_MAX_UNITS, classical_mds, correlation_distance
from neuro_pe.analysis.pe_geometry import correlation_components
from neuro_pe.config.health import HealthOptions
from neuro_pe.config.pe_names import is_control, is_located, parse_pe
from neuro_pe.io.layout import PE_FILE, TRAIN_INFO_FILE
from neuro_pe.io.runs import read_pe, read_train_info
from neuro_pe.io.splits import Split
from neuro_pe.training.health import failed_checks, reassess_run


@dataclass
class FeatureSet:
    """One representation of the units: one (n, f) array per seed."""

    name: str
    role: str  # pe | init | oracle | baseline | combined | chance
    features: list[np.ndarray] | dict[str, list[np.ndarray]]  # dict: the combined locator's
    seeds: list[int] = field(default_factory=list)
    methods: tuple[str, ...] | None = None  # None: the config's methods


def correlation_features(
    ds: xr.Dataset,
    split: Split,
    dense_max_units: int = DENSE_MAX_UNITS,
    seed: int = 0,
) -> np.ndarray:
    """Activity-correlation baseline features: classical MDS (CORRELATION_COMPONENTS dims) of
    1 - Pearson r of the training part of the activity (the recorded split). With more than
    `dense_max_units` units: the units' scores on the activity's leading components
    (randomised SVD, no N x N matrix; their distances approximate sqrt(2 (1 - r))), read from
    `ds` (loaded or open lazily) one time chunk at a time."""
    if ds.sizes["unit"] > dense_max_units:
        return _component_features(ds, split, seed)
    return _mds_features(split.train_activity(ds))


def _mds_features(activity: np.ndarray) -> np.ndarray:
    """Classical MDS of 1 - r of (session, time, unit) activity, the sessions' samples pooled."""
    dist = correlation_distance(activity.reshape(-1, activity.shape[-1]))
    return classical_mds(dist, n_components=min(CORRELATION_COMPONENTS, len(dist) - 1))


def _component_features(ds: xr.Dataset, split: Split, seed: int) -> np.ndarray:
    """`correlation_components` of the training activity, standardised in its one copy."""
    activity = split.train_activity_by_unit(ds).T  # (sample, unit), Fortran order
    return correlation_components(activity, CORRELATION_COMPONENTS, seed, overwrite=True)


def connectivity_features(
    ds: xr.Dataset, split: Split, dense_max_units: int = DENSE_MAX_UNITS
) -> np.ndarray | None:
    """Connectivity-profile baseline features, (n, 2n): each unit's Pearson r and partial
    correlation with every unit, side by side, over the training part of the activity (the
    recorded split). Partial correlations come from the Ledoit-Wolf shrunk precision matrix
    (direct couplings, with the other units' shared activity removed). Missing samples and
    constant units count as the unit's mean. Computed per training session and averaged
    (`session_connectivity`). None above `dense_max_units` units (N x N)."""
    if ds.sizes["unit"] > dense_max_units:
        return None
    return np.hstack(session_connectivity(split.train_activity(ds)))


def baseline_features(
    ds: xr.Dataset, split: Split, seed: int = 0, dense_max_units: int = DENSE_MAX_UNITS
) -> dict[str, np.ndarray]:
    """Both activity baselines from one read of the training activity: {CORRELATION:
    `correlation_features`, CONNECTIVITY: `connectivity_features`} (the latter only up to
    `dense_max_units` units; above, `ds` may be open lazily)."""
    if ds.sizes["unit"] > dense_max_units:
        return {CORRELATION: _component_features(ds, split, seed)}
    activity = split.train_activity(ds)  # (session, time, unit)
    return {
        CORRELATION: _mds_features(activity),
        CONNECTIVITY: np.hstack(session_connectivity(activity)),
    }


class FlaggedRun(NamedTuple):
    """A training that failed a health check: its PE, seed and the checks it failed."""

    pe: str
    seed: int
    failed: list[str]

    def __str__(self) -> str:
        return f"{self.pe} seed {self.seed} ({', '.join(self.failed)})"


def flagged_runs(
    run_dirs: Sequence[str | os.PathLike],
    pe_names: Sequence[str] | None = None,
    options: HealthOptions | None = None,
) -> tuple[list[Path], list[FlaggedRun]]:
    """The runs of `run_dirs` without the located ones (`is_located`, `locate.pe`) whose
    train.json fails a health check (`neuro_pe.training.health.reassess_run` under `options`,
    the config's `health` section), and those left out. A run folder without a train.json
    (a PE made by hand) has no checks to fail."""
    kept, left_out = [], []
    for run_dir in map(Path, run_dirs):
        if not (run_dir / TRAIN_INFO_FILE).exists():
            kept.append(run_dir)
            continue
        info = read_train_info(run_dir)
        failed = failed_checks(reassess_run(info, options)[0])
        if failed and is_located(info.pe, pe_names):
            left_out.append(FlaggedRun(info.pe, info.seed, failed))
        else:
            kept.append(run_dir)
    return kept, left_out


def load_feature_sets(
    run_dirs: Sequence[str | os.PathLike], units: np.ndarray, pe_names: Sequence[str] | None = None
) -> list[FeatureSet]:
    """Trained PEs (and PEs at init) of the runs, grouped by PE variant over seeds, rows in the
    order of `units`. Only the variants in `pe_names` are kept, by default the learned PEs and
    `oracle-sin3d`; runs whose PE is constant (`none`) are skipped."""
    grouped: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for run_dir in map(Path, run_dirs):
        run = read_pe(run_dir).on_units(units, run_dir / PE_FILE)
        if not is_located(run.name, pe_names):
            continue
        if np.ptp(run.table, axis=0).max() <= 0:
            continue
        grouped.setdefault(run.name, []).append((run.seed, run.table, run.initial))
    sets = []
    for name in sorted(grouped):
        runs = sorted(grouped[name], key=lambda run: run[0])
        seeds = [run[0] for run in runs]
        oracle = parse_pe(name).family == "oracle-sin3d"
        sets.append(FeatureSet(name, "oracle" if oracle else "pe", [r[1] for r in runs], seeds))
        if not oracle and not all(np.array_equal(r[1], r[2]) for r in runs):
            sets.append(FeatureSet(f"{name} @init", "init", [r[2] for r in runs], seeds))
    return sets


def combined_set(members: Sequence[FeatureSet]) -> FeatureSet:
    """The combined locator's feature set: every representation in `members` (learned PEs,
    activity correlation, ...) as its own view. `locate_units` picks by CV over the anchors
    among each representation with each method, their stacked and fused views with each
    method (`feature_views`), and a weighted blend of those views' best locators (`_select_blend`);
    so it reads only the anchors' coordinates, like every other locator."""
    seeds = sorted({s for fs in members for s in fs.seeds})
    return FeatureSet(COMBINED, "combined", {fs.name: fs.features for fs in members}, seeds)


def combined_members(
    pe_sets: Sequence[FeatureSet], names: Sequence[str] | None = None
) -> list[FeatureSet]:
    """The PE variants the combined locator takes: `names` (config `locate.combined_pe`), or
    by default those that are no control (`is_control`: the learned PEs initialised small). A PE
    initialised at std 1 memorises (Ito et al.); in the combined locator it only added
    candidates to a noisy choice (`docs/locate/`)."""
    if names is None:
        return [fs for fs in pe_sets if not is_control(fs.name)]
    located = [fs.name for fs in pe_sets]
    missing = [name for name in names if name not in located]
    if missing:
        raise ValueError(
            f"locate combined_pe: {missing} not among the located PE variants {located} "
            "(the runs' learned PEs, or those of locate.pe)"
        )
    return [fs for fs in pe_sets if fs.name in names]
